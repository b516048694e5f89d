#include "support/host_link.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include "pm/error.hpp"

namespace pm::driver {

namespace asio = boost::asio;

std::shared_ptr<host_link> host_link::create(asio::io_context& io, link::endpoint_options options,
                                             host_link_callbacks callbacks,
                                             clock::time_point epoch) {
  return std::shared_ptr<host_link>(new host_link(io, options, std::move(callbacks), epoch));
}

host_link::host_link(asio::io_context& io, link::endpoint_options options,
                     host_link_callbacks callbacks, clock::time_point epoch)
    : io_(io), ep_(options), cb_(std::move(callbacks)), epoch_(epoch), timer_(io) {
  ep_.start(now(), link::hello{});
}

host_link::~host_link() {
  close_descriptors();
}

void host_link::attach(agent_stream s) {
  if (closed_) {
    if (s.read_fd >= 0) ::close(s.read_fd);
    if (s.write_fd >= 0 && s.write_fd != s.read_fd) ::close(s.write_fd);
    return;
  }
  attached_ = true;
  pid_ = s.pid;
  ep_.stream_opened(now());
  fds_ = link::stream_fds{s.read_fd, s.write_fd, s.socket};
  in_.emplace(io_, s.read_fd);
  in_->non_blocking(true);
  if (s.write_fd != s.read_fd) {
    out_.emplace(io_, s.write_fd);
    out_->non_blocking(true);
  }
  flush();
  start_read();
  arm_timer();
}

void host_link::send(const link::message& m, std::vector<link::owned_fd> fds) {
  if (down_ || closed_) return;
  const auto at = ep_.send(m, static_cast<std::uint32_t>(fds.size()));
  writer_.attach(at, std::move(fds));
  flush();
}

void host_link::acknowledge(std::uint64_t bytes) {
  if (down_ || closed_) return;
  ep_.acknowledge(bytes);
  flush();
}

void host_link::send_input(std::uint32_t rank, std::span<const std::uint8_t> bytes) {
  if (down_ || closed_ || bytes.empty()) return;
  ep_.send_input(rank, bytes);
  flush();
}

void host_link::suspend() {
  if (down_ || closed_) return;
  ep_.suspend(now());
  flush();
}

void host_link::resume() {
  if (down_ || closed_) return;
  ep_.resume(now());
  flush();
  arm_timer();
}

void host_link::close() {
  if (closed_) return;
  closed_ = true;
  if (attached_ && !down_) {
    std::string ignored;
    writer_.flush(fds_, ep_, ignored);  // the last message (shutdown) goes if it can
  }
  close_descriptors();
}

void host_link::close_descriptors() {
  boost::system::error_code ignored;
  timer_.cancel();
  if (in_) in_->close(ignored);
  if (out_) out_->close(ignored);
  in_.reset();
  out_.reset();
}

void host_link::go_down(const std::string& reason) {
  if (down_) return;
  down_ = true;
  close_descriptors();
  if (!closed_ && cb_.on_down) {
    asio::post(io_, [self = shared_from_this(), reason] {
      if (!self->closed_ && self->cb_.on_down) self->cb_.on_down(reason);
    });
  }
}

void host_link::start_read() {
  if (!in_ || down_ || closed_) return;
  in_->async_wait(asio::posix::descriptor_base::wait_read,
                  [self = shared_from_this()](const boost::system::error_code& ec) {
                    if (!ec) self->on_readable();
                  });
}

void host_link::on_readable() {
  if (down_ || closed_) return;
  // A few reads per turn, then let the other hosts and the output run.
  for (int round = 0; round < 16 && !down_ && !closed_; ++round) {
    events_.clear();
    const auto st = reader_.read_once(fds_, now(), ep_, events_);
    handle(events_);
    if (st == link::stream_reader::status::again) {
      flush();
      arm_timer();
      start_read();
      return;
    }
    if (st == link::stream_reader::status::closed) return;  // handle() saw link_down
  }
  flush();
  arm_timer();
  if (!down_ && !closed_) {
    asio::post(io_, [self = shared_from_this()] { self->on_readable(); });
  }
}

void host_link::handle(std::vector<link::link_event>& events) {
  for (auto& e : events) {
    if (closed_) return;
    if (auto* g = std::get_if<link::peer_greeted>(&e)) {
      if (cb_.on_greeted) cb_.on_greeted(g->peer);
    } else if (auto* m = std::get_if<link::message_in>(&e)) {
      std::vector<link::owned_fd> fds;
      if (m->fds > 0) {
        try {
          fds = reader_.take_fds(m->fds, link::type_name(m->msg));
        } catch (const pm::error& err) {
          go_down(err.what());
          return;
        }
      }
      if (cb_.on_message) cb_.on_message(m->msg, std::move(fds));
    } else if (auto* o = std::get_if<link::output_in>(&e)) {
      if (cb_.on_output) cb_.on_output(o->rank, o->stream, o->bytes);
    } else if (std::holds_alternative<link::credit_granted>(e)) {
      if (cb_.on_credit) cb_.on_credit();
    } else if (auto* d = std::get_if<link::link_down>(&e)) {
      go_down(d->reason);
      return;
    }
    // input_in cannot reach the launcher: the endpoint refuses it.
  }
}

void host_link::flush() {
  if (!attached_ || down_ || closed_ || writing_ || write_failed_) return;
  std::string err;
  if (!writer_.flush(fds_, ep_, err)) {
    // An agent that exited (EPIPE here) may have written its last words first: exits,
    // shutdown_done, an error saying why. They are still in the stream: read them before the
    // link goes down, or a heartbeat that happened to be written first lost them. Not from here:
    // flush() may run inside handle(), whose events point into the reader's buffer.
    write_failed_ = true;
    asio::post(io_, [self = shared_from_this(), err] { self->after_write_failure(err); });
    return;
  }
  if (ep_.output().empty()) return;
  writing_ = true;
  auto& d = out_ ? *out_ : *in_;
  d.async_wait(asio::posix::descriptor_base::wait_write,
               [self = shared_from_this()](const boost::system::error_code& ec) {
                 self->writing_ = false;
                 if (!ec) self->flush();
               });
}

void host_link::after_write_failure(const std::string& err) {
  // Bounded: a peer that still writes while it no longer reads is cut off after a few reads.
  for (int round = 0; round < 64 && !down_ && !closed_; ++round) {
    events_.clear();
    const auto st = reader_.read_once(fds_, now(), ep_, events_);
    handle(events_);
    if (st != link::stream_reader::status::data) break;
  }
  if (down_ || closed_) return;  // the stream's end (or garbage) said it already
  std::vector<link::link_event> events;
  ep_.closed(now(), events, err);
  handle(events);
}

void host_link::arm_timer() {
  if (down_ || closed_) return;
  const auto when = ep_.deadline();
  if (!when) return;
  if (armed_for_ && *armed_for_ == *when) return;
  armed_for_ = *when;
  timer_.expires_at(epoch_ + std::chrono::duration_cast<clock::duration>(*when));
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    self->armed_for_.reset();
    if (self->down_ || self->closed_) return;
    std::vector<link::link_event> events;
    self->ep_.tick(self->now(), events);
    self->handle(events);
    self->flush();
    self->arm_timer();
  });
}

}  // namespace pm::driver
