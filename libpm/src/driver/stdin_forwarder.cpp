#include "driver/stdin_forwarder.hpp"

#include <boost/asio/post.hpp>

#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/write.hpp>
#include <string>

namespace pm::driver {

namespace asio = boost::asio;

namespace {
constexpr std::size_t read_chunk = 64 * 1024;
constexpr std::size_t max_pending = 1024 * 1024;  // per target; reading pauses above this
}  // namespace

std::shared_ptr<stdin_forwarder> stdin_forwarder::start(asio::io_context& io, int input_fd,
                                                        std::vector<int> targets) {
  std::shared_ptr<stdin_forwarder> self(new stdin_forwarder(io, input_fd, std::move(targets)));
  self->read_some();
  return self;
}

stdin_forwarder::stdin_forwarder(asio::io_context& io, int input_fd, std::vector<int> targets)
    : io_(io), tty_fd_(input_fd), background_wait_(io), buffer_(read_chunk) {
  is_tty_ = isatty(input_fd) == 1;
  struct stat st {};
  is_file_ = ::fstat(input_fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
  // A private open file description: making it non-blocking leaves the shell's own untouched.
  const std::string proc = "/proc/self/fd/" + std::to_string(input_fd);
  int fd = ::open(proc.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  // (Asio treats a regular file, which epoll refuses, as always ready.)
  if (fd >= 0) input_ = std::make_unique<asio::posix::stream_descriptor>(io, fd);
  for (int t : targets) {
    target tg;
    tg.pipe = std::make_unique<asio::posix::stream_descriptor>(io, t);
    boost::system::error_code ec;
    tg.pipe->non_blocking(true, ec);
    targets_.push_back(std::move(tg));
  }
  if (!input_) finish_input();  // nothing we can read: the ranks see end of input
}

stdin_forwarder::~stdin_forwarder() = default;

void stdin_forwarder::read_some() {
  if (stopped_ || input_done_ || reading_ || !input_) return;
  for (const auto& t : targets_) {
    if (t.pending.size() >= max_pending) return;  // resumed by flush()
  }
  if (is_tty_ && tcgetpgrp(tty_fd_) != getpgrp()) {
    // In the background: reading the terminal would stop us (SIGTTIN). Look again shortly.
    background_wait_.expires_after(std::chrono::milliseconds(200));
    background_wait_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->read_some();
    });
    return;
  }
  reading_ = true;
  // A regular file is always ready: Asio cannot wait on it (epoll refuses it), so read it from
  // a posted handler, one chunk per turn.
  const auto when_ready = [this](auto handler) {
    if (is_file_) {
      asio::post(
          io_, [handler = std::move(handler)]() mutable { handler(boost::system::error_code()); });
    } else {
      input_->async_wait(asio::posix::stream_descriptor::wait_read, std::move(handler));
    }
  };
  when_ready([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!self) return;
    self->reading_ = false;
    if (ec == asio::error::operation_not_supported && !self->is_file_) {
      // A descriptor epoll refuses (a character device such as /dev/zero or /dev/urandom, which
      // poll(2) calls always ready): Asio fails the wait at once. It was read as end of input,
      // so `--stdin all < /dev/zero` gave the ranks nothing. Read it as a regular file instead.
      self->is_file_ = true;
      self->read_some();
      return;
    }
    if (ec) {
      self->finish_input();
      return;
    }
    if (self->stopped_) return;
    if (self->is_tty_ && tcgetpgrp(self->tty_fd_) != getpgrp()) {
      self->read_some();
      return;
    }
    const ssize_t n =
        ::read(self->input_->native_handle(), self->buffer_.data(), self->buffer_.size());
    if (n > 0) {
      self->on_read(static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      self->finish_input();
    } else if (errno == EAGAIN && self->is_file_) {
      // Read without waiting (above) and nothing there: look again shortly rather than spin.
      self->background_wait_.expires_after(std::chrono::milliseconds(10));
      self->background_wait_.async_wait([weak](const boost::system::error_code& e) {
        if (auto s = weak.lock(); s && !e) s->read_some();
      });
      return;
    }
    self->read_some();
  });
}

void stdin_forwarder::on_read(std::size_t n) {
  bool anyone = false;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    if (!targets_[i].pipe) continue;  // that rank closed its stdin
    anyone = true;
    targets_[i].pending.append(buffer_.data(), n);
    flush(i);
  }
  // Every reading rank closed its stdin (`head -c 1000` ended): an endless input (/dev/zero, a
  // pipe that never closes) is no longer read for nobody.
  if (!anyone) finish_input();
}

void stdin_forwarder::flush(std::size_t i) {
  auto& t = targets_[i];
  if (t.writing || !t.pipe) return;
  if (t.pending.empty()) {
    if (input_done_) t.pipe.reset();  // closes: the rank sees end of input
    return;
  }
  t.writing = true;
  // The bytes being written must not move while on_read appends to pending.
  t.inflight.swap(t.pending);
  t.pending.clear();
  asio::async_write(
      *t.pipe, asio::buffer(t.inflight),
      [weak = weak_from_this(), i](const boost::system::error_code& ec, std::size_t n) {
        auto self = weak.lock();
        if (!self) return;
        auto& tg = self->targets_[i];
        tg.writing = false;
        (void)n;  // async_write sends all of inflight unless it fails
        tg.inflight.clear();
        if (ec) {  // the rank is gone or closed stdin: drop what it would get
          tg.pending.clear();
          tg.pipe.reset();
        }
        self->flush(i);
        self->read_some();
      });
}

void stdin_forwarder::finish_input() {
  input_done_ = true;
  if (input_) {
    boost::system::error_code ec;
    input_->close(ec);
  }
  for (std::size_t i = 0; i < targets_.size(); ++i) flush(i);
}

void stdin_forwarder::stop() {
  stopped_ = true;
  background_wait_.cancel();
  boost::system::error_code ec;
  if (input_) input_->close(ec);
  for (auto& t : targets_) t.pipe.reset();
}

}  // namespace pm::driver
