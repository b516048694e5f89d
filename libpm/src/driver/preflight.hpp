// What pmrun checks before anything starts, on this machine: a job on this machine only has every
// program resolved (a typo is a launch error, not a rank that fails later); a job with other
// hosts reached by ssh has the remote shell command resolved, inside Slurm srun. Each agent
// resolves the program on its own host (docs/failure-semantics.md, "Set-up").
#pragma once

#include <string>

#include "pm/launcher.hpp"

namespace pm::driver {

/// Throws pm::error(errc::usage) with one line when the request does not hold together: no rank,
/// an app context per rank map app missing (or one too many), an app without a program. An
/// embedder's slip is said before anything starts, not met later as an agent that gave up.
void check_request_shape(const job_request& request);

/// Throws pm::error(errc::launch) with one line naming what is missing.
void check_programs(const job_request& request);

/// Throws pm::error(errc::usage) with one line when the restart policy cannot be met as asked
/// (--min-hosts above the hosts the job runs on, or without --max-restarts).
void check_restart_policy(const job_request& request);
/// A relative working directory (-wdir sub) is the launcher's: made absolute here, against this
/// process's working directory, so that every host's agent enters the same one (as mpirun does);
/// sent as given, each remote agent looked for it in its own home directory.
void anchor_working_directories(job_request& request);

}  // namespace pm::driver
