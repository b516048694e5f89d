#include "io/sigpipe_guard.hpp"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace pm::io {

bool sigpipe_ignored() noexcept {
  struct sigaction sa {};
  if (::sigaction(SIGPIPE, nullptr, &sa) != 0) return false;
  return sa.sa_handler == SIG_IGN;
}

// Blocking SIGPIPE in this thread and consuming the one the write raised (a write's SIGPIPE is
// directed at the writing thread) leaves the process's signal handling as the program set it.
ssize_t writev_guarded(int fd, const iovec* iov, int n, bool guard) noexcept {
  if (!guard) return ::writev(fd, iov, n);
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigemptyset(&pending);
  ::sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  const ssize_t r = ::writev(fd, iov, n);
  const int saved = errno;
  if (r < 0 && saved == EPIPE && !was_pending) {
    const timespec zero{};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return r;
}

}  // namespace pm::io
