// exit_status: how one process ended (exited with a code, or killed by a signal).
#pragma once

#include <cstdint>
#include <string>

#include "pm/export.hpp"

namespace pm {

class PM_API exit_status {
 public:
  static constexpr exit_status exited(int code) noexcept { return exit_status(code, 0); }
  static constexpr exit_status signaled(int signo) noexcept { return exit_status(0, signo); }
  /// From a wait status (waitpid/waitid's CLD_* codes are converted by the transports).
  constexpr exit_status() noexcept = default;

  constexpr bool is_signal() const noexcept { return signal_ != 0; }
  constexpr int code() const noexcept { return code_; }
  constexpr int signal() const noexcept { return signal_; }
  constexpr bool success() const noexcept { return signal_ == 0 && code_ == 0; }
  /// As a shell reports it: the code, or 128 + signal.
  constexpr int shell_code() const noexcept { return signal_ != 0 ? 128 + signal_ : code_; }
  /// "exited with code 7" / "was killed by SIGKILL".
  std::string describe() const;

  friend constexpr bool operator==(exit_status, exit_status) = default;

 private:
  constexpr exit_status(int code, int signo) noexcept : code_(code), signal_(signo) {}
  int code_ = 0;
  int signal_ = 0;
};

/// "SIGKILL" for 9, "signal 77" for numbers without a name.
PM_API std::string signal_name(int signo);

}  // namespace pm
