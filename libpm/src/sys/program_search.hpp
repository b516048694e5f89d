// The PATH search as execvp does it, over facts about a host's files (host_files.hpp): the
// agent machine answers it from its driver's facts, the launcher's and the transports' checks
// (resolve_executable) from this machine's (local_files). Pure but for the questions it asks.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "sys/host_files.hpp"

namespace pm::sys {

/// Why it cannot run: a shell's code (127 not found, 126 found but not runnable) and one line.
struct program_refusal {
  int code = 127;
  std::string reason;
};

/// The file execve runs for `program`: with a '/', relative to `wdir` and an executable regular
/// file; otherwise the first match in `path` (the rank's PATH; empty: /usr/local/bin:/usr/bin:/bin;
/// an empty entry is the working directory). The refusals name the problem:
///   program 'nosuch' not found in PATH       './app' does not exist (in 'w1')
///   './app' is a directory                   './app' is not executable (Permission denied)
std::variant<std::string, program_refusal> find_program(std::string_view program,
                                                        std::string_view path,
                                                        std::string_view wdir,
                                                        const host_files& files);

}  // namespace pm::sys
