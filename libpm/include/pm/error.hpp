// pm::error: the one exception type libpm throws for bad input and failed operations.
//
// Its what() is a single line meant for a human: it names the problem (and, for parsers, the
// file, line and token). Callers that must not throw (the C API, pmrun's main) catch pm::error
// and print what() as it is.
#pragma once

#include <stdexcept>
#include <string>

#include "pm/export.hpp"

namespace pm {

/// What kind of problem an error reports; pmrun maps each to an exit code (docs/exit-codes.md).
enum class errc {
  usage = 1,       ///< a malformed command line or option value
  parse,           ///< a malformed input text: hostfile, host list, Slurm/PBS variables
  allocation,      ///< an allocation that cannot serve the request (unknown host, ...)
  mapping,         ///< the job does not fit the allocation (not enough slots, max_slots, ...)
  env,             ///< an invalid variable name or value
  launch,          ///< a job could not be started (spawn failure)
  not_found,       ///< a rank's program does not exist (a shell's 127)
  not_executable,  ///< a rank's program exists but cannot be executed (a shell's 126)
  system,          ///< an operating-system call failed
  internal,        ///< a broken invariant inside libpm: a bug
};

class PM_API error : public std::runtime_error {
 public:
  error(errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

}  // namespace pm
