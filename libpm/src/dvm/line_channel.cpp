#include "dvm/line_channel.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <exception>
#include <string>

#include "io/sigpipe_guard.hpp"

namespace pm::dvm_parts {

namespace asio = boost::asio;

line_channel::line_channel(asio::io_context& io, int fd) : sd_(io, fd) {
  boost::system::error_code ignored;
  sd_.non_blocking(true, ignored);
}

line_channel::~line_channel() = default;

void line_channel::start(std::function<void(const nlohmann::json&)> on_object,
                         std::function<void(const std::string&)> on_end) {
  on_object_ = std::move(on_object);
  on_end_ = std::move(on_end);
  read();
}

void line_channel::read() {
  sd_.async_read_some(asio::buffer(buf_), [weak = weak_from_this()](
                                              const boost::system::error_code& ec, std::size_t n) {
    auto self = weak.lock();
    if (!self || self->ended_) return;
    if (ec) {
      self->finish({});
      return;
    }
    std::vector<std::string> lines;
    if (!self->lines_.append(std::string_view(self->buf_.data(), n), lines)) {
      self->finish("a line longer than " + std::to_string(line_limit) + " bytes");
      return;
    }
    for (const auto& line : lines) {
      std::string problem;
      const auto doc = parse_object(line, problem);
      if (!doc) {
        self->finish(problem);
        return;
      }
      // The last wall: a handler that throws on what a peer sent ends this channel with a line,
      // not the loop (a throw out of the handler unwound io.run and ended the DVM and its jobs).
      try {
        self->on_object_(*doc);
      } catch (const std::exception& e) {
        self->finish(std::string("a line that could not be taken (") + e.what() + ")");
        return;
      }
      if (self->ended_) return;  // the handler closed the channel
    }
    self->read();
  });
}

void line_channel::finish(const std::string& problem) {
  if (ended_) return;
  ended_ = true;
  auto done = std::move(on_end_);
  on_object_ = nullptr;
  if (done) done(problem);
}

void line_channel::send(const nlohmann::json& doc) {
  if (closed_) return;
  outbox_ += to_line(doc);
  if (writing_.empty()) write();
}

// Written here, not with asio::async_write (a plain write(2)): a peer that went away before its
// answer (a submitter killed at the wrong moment) made the write raise SIGPIPE, which killed the
// DVM's server and every job on it. The write fails with EPIPE instead, and ends this channel.
void line_channel::write() {
  for (;;) {
    if (writing_.empty()) {
      if (outbox_.empty()) {
        if (closed_) {
          boost::system::error_code ignored;
          sd_.close(ignored);
        }
        return;
      }
      writing_ = std::move(outbox_);
      outbox_.clear();
      written_ = 0;
    }
    while (written_ < writing_.size()) {
      const iovec part{writing_.data() + written_, writing_.size() - written_};
      const ssize_t n = io::writev_guarded(sd_.native_handle(), &part, 1, guard_sigpipe_);
      if (n > 0) {
        written_ += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        sd_.async_wait(asio::posix::stream_descriptor::wait_write,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         if (!ec) self->write();
                       });
        return;
      }
      // The peer is gone (EPIPE) or the descriptor failed: nothing more goes out.
      writing_.clear();
      outbox_.clear();
      boost::system::error_code ignored;
      sd_.close(ignored);
      return;
    }
    writing_.clear();
  }
}

void line_channel::close() {
  if (closed_) return;
  closed_ = true;
  ended_ = true;
  on_object_ = nullptr;
  on_end_ = nullptr;
  // A write under way finishes first and closes the descriptor behind it.
  if (writing_.empty()) {
    if (outbox_.empty()) {
      boost::system::error_code ignored;
      sd_.close(ignored);
    } else {
      write();
    }
  }
}

}  // namespace pm::dvm_parts
