// `pmd --dvm-host`: a host's daemon in a DVM (docs/dvm.md). The DVM's server starts it once per
// host (ssh, a plain child on this machine, or one srun step for all, whose daemons dial back) and
// talks to it over its stdin and stdout (or the dialled socket), one JSON object a line
// (dvm/json_lines.hpp). For each job the server asks it to start that job's agent: this same
// program as `pmd --connect`, which dials the submitting pmrun back (connect_back.hpp) and serves
// the job as any agent does. So every job keeps its own agent and its own failure domain, and a job
// costs a fork and exec here instead of an ssh session.
//
// It ends every job agent it started (SIGTERM, 2 s, SIGKILL) and exits when its stdin ends, when
// the server has been silent for 10 s, on a line it cannot read, and on SIGTERM, SIGINT or SIGHUP;
// its job agents get SIGKILL from the kernel if it dies unannounced (PR_SET_PDEATHSIG), and their
// ranks with them.
#pragma once

namespace pmd {

/// Runs the daemon until it ends; returns pmd's exit code. `connect` (`pmd --dvm-host
/// --connect`, started by srun): the channel is a socket that dials the server back
/// (connect_back.hpp) instead of stdin and stdout.
int run_dvm_host(bool connect);

}  // namespace pmd
