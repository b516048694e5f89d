// The local agent forked from the launcher's own process, without an exec (docs/agent.md, "The
// local agent, forked"): the program links pmd's code and the child runs it. What an exec of pmd
// costs on every launch (the kernel's exec, the C library's start with its CPU probe, a fresh
// process's page faults) is gone; what the child starts with is what the exec'd pmd got.
#pragma once

#include <sys/resource.h>

#include <optional>
#include <string>
#include <vector>

#include "pm/launcher.hpp"
#include "sys/spawner.hpp"

namespace pm::local {

/// A child of this process that runs `entry(argv)` and ends with its result, set up as
/// spawn_agent sets up the exec'd pmd: its own process group, every signal's default disposition
/// and an empty mask, `link_fd` as its stdin and stdout, stderr kept, no other descriptor,
/// `nofile` restored, `env` as its whole environment; named "pmd" (its comm, as ps and the tests
/// see it). Only from a single-threaded process. Throws pm::error(errc::launch) when it cannot
/// fork or watch the child (no pidfd_open): nothing is left started then.
sys::spawned_process fork_agent(early_agent::agent_entry entry,
                                const std::vector<std::string>& argv,
                                const std::vector<std::string>& env, int link_fd,
                                std::optional<rlimit> nofile);

}  // namespace pm::local
