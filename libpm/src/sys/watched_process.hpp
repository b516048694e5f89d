// watched_process: a child process on an io_context, the carriers' one way to wait for and end
// their processes (ssh, srun, a local pmd). Its pidfd is waited on as a posix::stream_descriptor
// (readable once the child ended) and then reaped with waitid: no SIGCHLD handler, ever, since
// the program that embeds libpm owns its own children. Its stop sequence runs on a steady_timer
// and stops as soon as the child ends.
//
// Destroying it cancels its waits and its timer, and neither kills nor reaps the child: an owner
// that must leave nothing behind calls stop_now first. Not thread-safe; handlers run on the
// io_context's thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>

#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::sys {

class watched_process {
 public:
  /// Takes `process`'s pidfd over (closed with this object).
  watched_process(boost::asio::io_context& io, spawned_process process);
  ~watched_process();
  watched_process(const watched_process&) = delete;
  watched_process& operator=(const watched_process&) = delete;

  pid_t pid() const noexcept;
  /// Ended and reaped; end() says how.
  bool ended() const noexcept;
  const exit_check& end() const noexcept;

  /// `done` runs once from the io_context after the child ended and was reaped (at once, posted,
  /// when that happened already); never after this object was destroyed. It may destroy it.
  void on_exit(std::function<void(const exit_check&)> done);

  /// Sends `signo` unless the child was reaped already; false when it was not sent.
  bool signal(int signo) noexcept;

  /// Starts `sequence`; nothing when one runs already or the child ended. The child's end stops
  /// it (on_exit's handler reports that end as usual).
  void stop(const stop_sequence& sequence);
  bool stopping() const noexcept;

  /// Blocking: the whole of `sequence` now, and the reap (stop_and_reap). The on_exit handler
  /// does not run.
  void stop_now(const stop_sequence& sequence) noexcept;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace pm::sys
