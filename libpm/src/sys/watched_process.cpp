#include "sys/watched_process.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <utility>

namespace pm::sys {

namespace asio = boost::asio;

// Shared with the pending handlers by weak pointer: a handler that runs after the owner let go
// (its completion was queued already) finds nothing and does nothing.
struct watched_process::state : std::enable_shared_from_this<state> {
  state(asio::io_context& context, spawned_process p)
      : io(context), pid(p.pid), pidfd(context, p.pidfd), timer(context) {}

  asio::io_context& io;
  pid_t pid;
  asio::posix::stream_descriptor pidfd;
  asio::steady_timer timer;
  exit_check end;
  std::function<void(const exit_check&)> done;
  bool waiting = false;
  stop_sequence sequence;
  int stop_step = -1;  // -1: not stopping; then 0 (patience), 1 (grace), 2 (last signal sent)

  void watch() {
    if (waiting || end.ended) return;
    waiting = true;
    pidfd.async_wait(asio::posix::descriptor_base::wait_read,
                     [weak = weak_from_this()](const boost::system::error_code& ec) {
                       auto self = weak.lock();
                       if (!self) return;
                       self->waiting = false;
                       if (!ec) self->on_readable();
                     });
  }

  void on_readable() {
    const exit_check c = check_exit(pidfd.native_handle());
    if (!c.ended) {  // a spurious wake-up
      watch();
      return;
    }
    finish(c);
  }

  void finish(const exit_check& c) {
    end = c;
    boost::system::error_code ignored;
    pidfd.close(ignored);
    timer.cancel();
    stop_step = -1;
    if (auto d = std::exchange(done, nullptr)) d(end);  // last: it may destroy the owner
  }

  void step() {
    if (end.ended || stop_step < 0) return;
    // Each step's signal goes when its wait is over and the child has not ended meanwhile.
    if (stop_step == 0 && sequence.first_signal != 0) signal(sequence.first_signal);
    if (stop_step == 1 && sequence.last_signal != 0) signal(sequence.last_signal);
    if (stop_step >= 1) {
      stop_step = 2;
      return;
    }
    stop_step = 1;
    timer.expires_after(sequence.grace);
    timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!ec && self) self->step();
    });
  }

  bool signal(int signo) noexcept {
    return !end.ended && pidfd.is_open() && send_signal(pidfd.native_handle(), signo);
  }
};

watched_process::watched_process(asio::io_context& io, spawned_process process)
    : state_(std::make_shared<state>(io, process)) {}

watched_process::~watched_process() {
  boost::system::error_code ignored;
  state_->timer.cancel();
  state_->pidfd.close(ignored);
}

pid_t watched_process::pid() const noexcept {
  return state_->pid;
}
bool watched_process::ended() const noexcept {
  return state_->end.ended;
}
const exit_check& watched_process::end() const noexcept {
  return state_->end;
}

void watched_process::on_exit(std::function<void(const exit_check&)> done) {
  if (state_->end.ended) {
    asio::post(state_->io, [weak = std::weak_ptr<state>(state_), done = std::move(done)] {
      if (auto self = weak.lock()) done(self->end);
    });
    return;
  }
  state_->done = std::move(done);
  state_->watch();
}

bool watched_process::signal(int signo) noexcept {
  return state_->signal(signo);
}

void watched_process::stop(const stop_sequence& sequence) {
  auto& s = *state_;
  if (s.end.ended || s.stop_step >= 0) return;
  s.sequence = sequence;
  s.stop_step = 0;
  s.watch();  // its end stops the sequence even when nobody asked for on_exit
  s.timer.expires_after(sequence.patience);
  s.timer.async_wait([weak = std::weak_ptr<state>(state_)](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self) self->step();
  });
}

bool watched_process::stopping() const noexcept {
  return state_->stop_step >= 0;
}

void watched_process::stop_now(const stop_sequence& sequence) noexcept {
  auto& s = *state_;
  if (s.end.ended || !s.pidfd.is_open()) return;
  s.done = nullptr;
  s.end = stop_and_reap(s.pidfd.native_handle(), sequence);
  boost::system::error_code ignored;
  s.timer.cancel();
  s.pidfd.close(ignored);
  s.stop_step = -1;
}

}  // namespace pm::sys
