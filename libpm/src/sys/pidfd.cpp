#include "sys/pidfd.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace pm::sys {

int open_pidfd(pid_t pid) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

bool send_signal(int pidfd, int signo) noexcept {
  return ::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0) == 0;
}

exit_status status_of(const siginfo_t& info) noexcept {
  if (info.si_code == CLD_EXITED) return exit_status::exited(info.si_status);
  return exit_status::signaled(info.si_status);
}

std::string describe(const exit_check& check) {
  if (check.status) return check.status->describe();
  if (!check.ended) return "is still running";
  return std::string("ended; its status is lost: ") + std::strerror(check.error);
}

namespace {

exit_check wait_id(int pidfd, int options) noexcept {
  siginfo_t info{};
  int rc;
  while ((rc = ::waitid(pidfd_id, static_cast<id_t>(pidfd), &info, options)) != 0 &&
         errno == EINTR) {
  }
  exit_check out;
  if (rc != 0) {
    // A non-blocking pidfd (Asio makes its descriptors so) answers EAGAIN while the child runs.
    if (errno == EAGAIN) return out;
    // It cannot be waited for any more (ECHILD: reaped by someone else, or not our child): as
    // far as anyone can tell it ended, and a caller that looked again would look forever.
    out.ended = true;
    out.error = errno;
    return out;
  }
  if (info.si_pid == 0) return out;  // WNOHANG and still running
  out.ended = true;
  out.status = status_of(info);
  return out;
}

// poll(2) for the pidfd's end (-1: without limit): poll's result.
int poll_ended(int pidfd, int timeout_ms) noexcept {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms);
}

}  // namespace

exit_check check_exit(int pidfd, reap_mode mode) noexcept {
  return wait_id(pidfd, WEXITED | WNOHANG | (mode == reap_mode::keep_zombie ? WNOWAIT : 0));
}

exit_check wait_exit(int pidfd) noexcept {
  for (;;) {
    // Blocks in waitid, unless the pidfd is non-blocking: then in poll until it ended.
    auto out = wait_id(pidfd, WEXITED);
    if (out.ended) return out;
    while (poll_ended(pidfd, -1) < 0 && errno == EINTR) {
    }
  }
}

bool wait_ended(int pidfd, std::chrono::milliseconds timeout) noexcept {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    const int n = poll_ended(pidfd, static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

}  // namespace pm::sys
