// What the agent machine needs to know of its host's files to decide where a rank starts and
// which program it runs (program_lookup.hpp). The machine never touches the filesystem: its
// driver answers these questions (pmd with stat and access, a simulator from its model).
#pragma once

#include <cstdint>
#include <string>

namespace pm::agent {

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

}  // namespace pm::agent
