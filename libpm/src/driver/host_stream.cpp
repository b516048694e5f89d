#include "driver/host_stream.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include "launch/launcher.hpp"
#include "pm/error.hpp"

namespace pm::driver {

namespace asio = boost::asio;

host_stream::host_stream(asio::io_context& io, std::uint32_t host, launch::launcher& machine,
                         host_stream_hooks hooks)
    : io_(io), host_(host), machine_(machine), hooks_(std::move(hooks)), timer_(io) {}

host_stream::~host_stream() {
  close_descriptors();
}

std::uint64_t host_stream::begin() {
  close_descriptors();
  ++generation_;
  attached_ = false;
  writing_ = false;
  write_failed_ = false;
  closed_ = false;
  armed_for_.reset();
  writer_ = std::make_unique<link::stream_writer>();
  reader_ = std::make_unique<link::stream_reader>();
  return generation_;
}

bool host_stream::attach(std::uint64_t generation, agent_stream s) {
  if (generation != generation_ || closed_ || attached_) {
    if (s.read_fd >= 0) ::close(s.read_fd);
    if (s.write_fd >= 0 && s.write_fd != s.read_fd) ::close(s.write_fd);
    return false;
  }
  attached_ = true;
  fds_ = link::stream_fds{s.read_fd, s.write_fd, s.socket};
  in_.emplace(io_, s.read_fd);
  in_->non_blocking(true);
  if (s.write_fd != s.read_fd) {
    out_.emplace(io_, s.write_fd);
    out_->non_blocking(true);
  }
  return true;
}

void host_stream::start_reading() {
  if (!attached_ || closed_) return;
  flush();
  start_read();
}

link::stream_writer::output_queue host_stream::queue() {
  return {[this] { return machine_.output(host_); },
          [this] { return machine_.output_offset(host_); },
          [this](std::size_t n) { machine_.consume_output(host_, n); }};
}

void host_stream::flush() {
  if (!attached_ || closed_ || writing_ || write_failed_) return;
  std::string err;
  if (!writer_->flush(fds_, queue(), err)) {
    // An agent that exited (EPIPE here) may have written its last words first: exits,
    // shutdown_done, an error saying why. They are still in the stream: read them before the
    // link goes down. Not from here: flush() runs while the machine's actions are carried out.
    write_failed_ = true;
    asio::post(io_, [self = shared_from_this(), g = generation_, err] {
      if (self->current(g)) self->after_write_failure(err);
    });
    return;
  }
  if (machine_.output(host_).empty()) return;
  writing_ = true;
  auto& d = out_ ? *out_ : *in_;
  d.async_wait(asio::posix::descriptor_base::wait_write,
               [self = shared_from_this(), g = generation_](const boost::system::error_code& ec) {
                 if (!self->current(g)) return;
                 self->writing_ = false;
                 if (!ec) self->flush();
               });
}

void host_stream::attach_fds(std::uint64_t offset, std::vector<link::owned_fd> fds) {
  if (writer_) writer_->attach(offset, std::move(fds));
}

std::vector<link::owned_fd> host_stream::take_fds(std::uint32_t n) {
  if (!reader_) throw error(errc::launch, "agent link: descriptors on a closed stream");
  return reader_->take_fds(n, "started");
}

void host_stream::arm(std::optional<clock::time_point> at) {
  if (at == armed_for_) return;
  armed_for_ = at;
  timer_.cancel();
  if (!at || closed_) return;
  timer_.expires_at(*at);
  timer_.async_wait(
      [self = shared_from_this(), g = generation_](const boost::system::error_code& ec) {
        if (ec || !self->current(g) || self->closed_) return;
        self->armed_for_.reset();
        self->hooks_.tick();
      });
}

void host_stream::close() {
  if (closed_) return;
  closed_ = true;
  if (attached_ && !write_failed_) {
    std::string ignored;
    writer_->flush(fds_, queue(), ignored);  // the last message (shutdown) goes if it can
  }
  close_descriptors();
}

void host_stream::close_descriptors() {
  boost::system::error_code ignored;
  timer_.cancel();
  armed_for_.reset();
  if (in_) in_->close(ignored);
  if (out_) out_->close(ignored);
  in_.reset();
  out_.reset();
}

void host_stream::start_read() {
  if (!in_ || closed_) return;
  in_->async_wait(
      asio::posix::descriptor_base::wait_read,
      [self = shared_from_this(), g = generation_](const boost::system::error_code& ec) {
        if (!ec && self->current(g)) self->on_readable();
      });
}

void host_stream::on_readable() {
  const auto g = generation_;
  // A few reads per turn, then let the other hosts and the output run.
  for (int round = 0; round < 16; ++round) {
    if (closed_ || !current(g) || !in_) return;
    std::span<const std::uint8_t> got;
    std::string err;
    const auto st = reader_->read_bytes(fds_, got, err);
    if (st == link::stream_reader::status::again) {
      flush();
      start_read();
      return;
    }
    if (st == link::stream_reader::status::closed) {
      hooks_.broken(err);
      return;
    }
    hooks_.received(got);
  }
  if (closed_ || !current(g)) return;
  flush();
  asio::post(io_, [self = shared_from_this(), g] {
    if (self->current(g)) self->on_readable();
  });
}

void host_stream::after_write_failure(const std::string& err) {
  const auto g = generation_;
  // Bounded: a peer that still writes while it no longer reads is cut off after a few reads.
  for (int round = 0; round < 64; ++round) {
    if (closed_ || !current(g) || !in_) return;
    std::span<const std::uint8_t> got;
    std::string read_err;
    const auto st = reader_->read_bytes(fds_, got, read_err);
    if (st == link::stream_reader::status::closed) {
      hooks_.broken(read_err);
      return;
    }
    if (st != link::stream_reader::status::data) break;
    hooks_.received(got);
  }
  if (closed_ || !current(g)) return;
  hooks_.broken(err);
}

}  // namespace pm::driver
