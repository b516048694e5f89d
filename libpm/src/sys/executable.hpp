// Resolving a rank's program before any rank starts, so that a typo is one clear error and no
// half-started job.
#pragma once

#include <string>
#include <string_view>

namespace pm::sys {

/// The path execve will run for `program`: with a '/', relative to `wdir` (when given) and it must
/// be an executable regular file; otherwise the first match in `path_env` (the rank's PATH; an
/// empty entry is the working directory, as execvp). Throws pm::error(errc::launch):
///   program 'nosuch' not found in PATH
///   './app' does not exist        './app' is a directory        './app' is not executable
///   (Permission denied)
std::string resolve_executable(std::string_view program, std::string_view path_env,
                               std::string_view wdir);

}  // namespace pm::sys
