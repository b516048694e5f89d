// pidfd: a child process as a descriptor (Linux 5.4). The descriptor becomes readable when the
// child ends, waitid(P_PIDFD) reaps exactly that child, and pidfd_send_signal cannot hit a
// recycled pid. So libpm waits for its children without a SIGCHLD handler, which would steal
// the children of the program that embeds it. These calls neither block nor wait unless named
// so; the Asio side is sys/watched_process.hpp, pmd's epoll loop calls them directly.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <optional>
#include <string>

#include "pm/exit_status.hpp"

namespace pm::sys {

/// waitid's id type for a pidfd. glibc 2.36 names it P_PIDFD in an enum, older headers not at
/// all: the number is written here and nowhere else.
inline constexpr idtype_t pidfd_id = static_cast<idtype_t>(3);

/// A pidfd for `pid`, one of our children; -1 with errno when the kernel refuses.
int open_pidfd(pid_t pid) noexcept;

/// pidfd_send_signal. False when it failed (the process ended and was reaped: ESRCH).
bool send_signal(int pidfd, int signo) noexcept;

/// How waitid's siginfo says the child ended (CLD_EXITED: its code; otherwise its signal).
exit_status status_of(const siginfo_t& info) noexcept;

/// What a look at a child found.
struct exit_check {
  bool ended = false;                 ///< false: still running
  std::optional<exit_status> status;  ///< how it ended, when known
  int error = 0;  ///< waitid's errno when it ended unknown (ECHILD: someone else reaped it)
};

/// One line: "exited with code 3", "was killed by SIGKILL", or "ended; its status is lost: No
/// child processes" (pm::exit_status::describe, plus the unknown case).
std::string describe(const exit_check& check);

enum class reap_mode {
  reap,         ///< the child is gone afterwards
  keep_zombie,  ///< WNOWAIT: it stays a zombie, so its pid and group id are not reused yet
};

/// Without blocking (WNOHANG).
exit_check check_exit(int pidfd, reap_mode mode = reap_mode::reap) noexcept;

/// Blocks until the child ended, and reaps it.
exit_check wait_exit(int pidfd) noexcept;

/// Blocks at most `timeout` until the child ended (the pidfd is readable); does not reap.
bool wait_ended(int pidfd, std::chrono::milliseconds timeout) noexcept;

}  // namespace pm::sys
