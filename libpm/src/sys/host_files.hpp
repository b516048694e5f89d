// What a program search needs to know of a host's files (program_search.hpp): the agent machine
// never touches the filesystem, its driver answers (pmd and the launcher's checks with
// sys::local_files, a test or a simulator from a model).
#pragma once

#include <cstdint>
#include <string>

namespace pm::sys {

/// What the host says of one path.
struct file_facts {
  enum class kind : std::uint8_t {
    missing,         ///< cannot be looked at (`error` says why: ENOENT, EACCES, ...)
    directory,       ///< a directory
    executable,      ///< a regular file this process may execute
    not_executable,  ///< anything else (`error`: why not, EACCES when it is no regular file)
  };
  kind what = kind::missing;
  int error = 0;  ///< an errno value
};

class host_files {
 public:
  virtual ~host_files() = default;
  /// Follows links, as exec does.
  virtual file_facts look(const std::string& path) const = 0;
  /// The agent's own working directory: a program found relative to it is named absolutely,
  /// since the rank changes into its own working directory before the exec.
  virtual std::string working_directory() const = 0;
};

}  // namespace pm::sys
