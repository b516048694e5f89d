// stop_sequence: how a child process is ended, as data. A child gets `patience` to end by itself,
// then the first signal, then `grace` more, then the last signal: the same shape for ssh and
// srun (SIGTERM, then SIGKILL), a local pmd (no first signal: it ends on its own once its link
// closed; SIGKILL after the grace) and pmd's child agents. watched_process::stop carries it out
// on an io_context; stop_and_reap below, blocking, in destructors.
#pragma once

#include <signal.h>

#include <chrono>

#include "sys/pidfd.hpp"

namespace pm::sys {

struct stop_sequence {
  std::chrono::milliseconds patience{0};  ///< left to end by itself before the first signal
  int first_signal = SIGTERM;             ///< 0: none
  std::chrono::milliseconds grace{2000};  ///< after the first signal
  int last_signal = SIGKILL;              ///< 0: none (then the child is waited for, however long)
};

/// ssh once its link is over: it normally ends by itself (its agent exited); one that does not (a
/// cut network) gets SIGTERM, then SIGKILL. The launcher's own ssh and a tree parent's for its
/// children alike: stopped at once, the far agent and its shell outlived the launch.
inline constexpr stop_sequence ssh_after_the_link{.patience = std::chrono::milliseconds(200),
                                                  .first_signal = SIGTERM,
                                                  .grace = std::chrono::milliseconds(2000),
                                                  .last_signal = SIGKILL};

/// Blocking: carries out `sequence` on a child that has not ended yet, waits for its end and
/// reaps it. For destructors, where nothing may outlive the owner and no loop runs any more.
exit_check stop_and_reap(int pidfd, const stop_sequence& sequence) noexcept;

}  // namespace pm::sys
