// The children of the calling process, for pmd's sweep (kill and reap everything it owns,
// including descendants reparented to it as a child subreaper).
#pragma once

#include <sys/types.h>

#include <vector>

namespace pm::agent {

/// Pids of the calling (single-threaded) process's children, zombies included. Reads
/// /proc/self/task/<pid>/children; where the kernel lacks it, scans /proc for the parent pid.
std::vector<pid_t> list_children();

/// Reaps every child that has ended (waitid P_ALL, WNOHANG) and returns how many it reaped.
/// Only for the sweep: during the job, rank leaders must stay unreaped (agent.hpp).
int reap_all_ended();

/// Reaps the listed children that have ended, one by one (waitid P_PID, WNOHANG).
void reap_ended(const std::vector<pid_t>& pids);

}  // namespace pm::agent
