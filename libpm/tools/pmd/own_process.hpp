// What pmd makes of its own process before it serves a launcher (docs/agent.md, "Lifecycle" 2).
#pragma once

#include <sys/resource.h>

#include <optional>
#include <vector>

#include "link/socket.hpp"

namespace pmd {

/// Becomes a child subreaper (orphaned descendants of the ranks reparent to pmd, not to init:
/// nothing escapes the sweep), leads its own process group (the terminal's ^C and ^Z go to the
/// launcher, which decides), ignores SIGPIPE and takes the hard limit of descriptors (one pidfd
/// per running rank). Returns the limit it was started with, for the ranks (nullopt: unchanged).
/// Throws pm::error when it cannot become a subreaper.
std::optional<rlimit> become_agent_process();

/// Blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP and returns a non-blocking signalfd that reads
/// them (none when the kernel refuses one).
pm::link::owned_fd signal_reader();
/// Every signal the reader holds: whether SIGCHLD came, and the others in order.
struct signals_read {
  bool child = false;
  std::vector<int> others;
};
signals_read read_signals(int fd);

}  // namespace pmd
