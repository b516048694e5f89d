// What /proc says of a process and its descendants: the facts --stall-timeout needs (its state,
// where it waits, the CPU it used, the bytes it wrote). pmd answers the agent machine's
// sample_ranks with it (docs/resilience.md, "Stalls"). Reads files only: no signal, no ptrace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pm::sys {

struct proc_activity {
  char state = '?';           ///< the leader's state letter: S, D, R, T, Z, ...
  std::string wchan;          ///< where the leader waits in the kernel; empty: nowhere known
  std::uint64_t cpu_ms = 0;   ///< user + system time of the leader and its live descendants,
                              ///< and of the children they reaped
  std::uint64_t written = 0;  ///< wchar of the leader and its live descendants
};

/// The leader `pid` and its descendants (through /proc/PID/task/TID/children, at most 4096
/// processes). nullopt: the leader's /proc/PID/stat cannot be read (it is gone).
/// `proc` is the proc file system's mount point (tests give a fake tree).
std::optional<proc_activity> read_activity(pid_t pid, std::string_view proc = "/proc");

/// The fields of one /proc/PID/stat line that read_activity uses: the state letter and
/// utime + stime + cutime + cstime in clock ticks. nullopt: not such a line.
struct stat_fields {
  char state = '?';
  std::uint64_t ticks = 0;
};
std::optional<stat_fields> parse_stat(std::string_view line);

}  // namespace pm::sys
