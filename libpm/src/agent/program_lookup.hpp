// Where a rank starts and which file it executes, decided from facts about the host's files
// (host_files.hpp): the working-directory fallback and the PATH search as execvp does it. Pure
// but for the questions it asks `files`.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "agent/host_files.hpp"

namespace pm::agent {

/// What a rank runs, and where.
struct program_place {
  std::string path;  ///< what execve runs
  std::string wdir;  ///< where the rank starts ("" the agent's own directory)
};

/// Why it cannot run: a shell's code (127 not found, 126 found but not runnable) and one line.
struct program_refusal {
  int code = 127;
  std::string reason;
};

/// The working directory: `wdir`, or where it is the launcher's directory (`may_fall_back`) and
/// not a directory on this host, `home` (the rank's HOME; "/" without one), as Open MPI does.
std::string working_directory_of(const std::string& wdir, bool may_fall_back, std::string_view home,
                                 const host_files& files);

/// The file execve runs for `program`: with a '/', relative to `wdir` and an executable regular
/// file; otherwise the first match in `path` (the rank's PATH; empty: /usr/local/bin:/usr/bin:/bin;
/// an empty entry is the working directory). The refusals name the problem:
///   program 'nosuch' not found in PATH       './app' does not exist (in 'w1')
///   './app' is a directory                   './app' is not executable (Permission denied)
std::variant<std::string, program_refusal> find_program(std::string_view program,
                                                        std::string_view path,
                                                        std::string_view wdir,
                                                        const host_files& files);

}  // namespace pm::agent
