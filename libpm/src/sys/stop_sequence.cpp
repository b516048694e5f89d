#include "sys/stop_sequence.hpp"

namespace pm::sys {

exit_check stop_and_reap(int pidfd, const stop_sequence& sequence) noexcept {
  // A zero wait still looks once, so that a child that already ended gets no signal.
  if (!wait_ended(pidfd, sequence.patience)) {
    if (sequence.first_signal != 0) send_signal(pidfd, sequence.first_signal);
    if (!wait_ended(pidfd, sequence.grace) && sequence.last_signal != 0) {
      send_signal(pidfd, sequence.last_signal);
    }
  }
  return wait_exit(pidfd);
}

}  // namespace pm::sys
