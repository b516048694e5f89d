// spawner: start one rank process, fast and clean (docs/local-launch.md).
//
// clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD) runs a small child function on a stack in the
// parent's frame: no page tables copied (unlike fork), a pidfd from the same call, and an exec
// failure reported synchronously through shared memory. The child, before execve: its own process
// group, its cpu binding (if asked), every signal disposition default and the mask empty,
// stdin/stdout/stderr in place, every other descriptor closed, the working directory, the original
// RLIMIT_NOFILE. Nothing in the child allocates or locks (vfork rules). Falls back to posix_spawn +
// pidfd_open where clone with CLONE_PIDFD is refused (old kernels, seccomp).
//
// Thread safety: spawn() may be called from any thread; other threads may fork meanwhile.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pm::sys {

struct spawn_request {
  std::string path;  ///< the executable (resolved; relative paths are relative to wdir)
  std::vector<std::string> argv;  ///< argv[0] first
  std::vector<std::string> env;   ///< "NAME=value", the complete environment
  std::string wdir;               ///< empty: inherit the caller's
  int stdin_fd = -1;              ///< -1: /dev/null
  int stdout_fd = -1;             ///< -1: /dev/null
  int stderr_fd = -1;             ///< -1: /dev/null; may equal stdout_fd (merged)
  bool new_process_group = true;  ///< setpgid(0, 0): signals reach the rank and its children
  std::optional<rlimit> nofile;   ///< RLIMIT_NOFILE to restore in the child
  /// PR_SET_PDEATHSIG: the signal the child gets when the calling THREAD ends (0: none). For a
  /// helper that spawns from one thread that lives as long as it (pmd): its ranks then die at
  /// once when it is SIGKILLed. Not for embedders, whose spawning thread may end early.
  int parent_death_signal = 0;
  /// sched_setaffinity before exec: the PUs (OS indexes) the process may run on; empty: inherit.
  /// The caller checks that they are this machine's (pmd's bindable_cpus): the kernel would refuse
  /// a set with none online, and quietly narrow one with some.
  std::vector<std::uint32_t> cpus;
};

struct spawned_process {
  pid_t pid = -1;
  int pidfd = -1;  ///< owned by the caller; readable when the process exits
};

/// Starts the process. Throws pm::error(errc::launch) with one line ("cannot execute '/x/app':
/// Permission denied") when it cannot run; the failed child is reaped before the throw. Exit codes
/// a shell would give for the same failure: 127 for ENOENT, 126 otherwise (exec_failure_code).
spawned_process spawn(const spawn_request& request);

/// 127 for "not found", 126 for any other exec failure, as shells do.
int exec_failure_code(int error_number) noexcept;

}  // namespace pm::sys
