// pmrun's DVM commands (docs/dvm.md): `--dvm start` (a server in the background on the
// allocation, returning once every host's daemon is up), `--dvm stop`, `--ps --dvm-uri` (the DVM's
// hosts and jobs), and where a job's DVM is found.
#pragma once

#include <string>
#include <vector>

#include "pm/command_line.hpp"
#include "pm/environment.hpp"

namespace pmrun {

/// This user's default URI file: "dvm.uri" in pmrun's status directory (job_status.hpp).
std::string default_uri_file(const pm::env_map& env);

/// The DVM this command line names: --dvm-uri ("search": the default URI file), else $PM_DVM_URI;
/// empty: none.
std::string dvm_uri(const pm::run_options& options, const pm::env_map& env);

/// `pmrun --dvm start [allocation and ssh options] [--report-uri FILE]`. Returns pmrun's exit
/// code: 0 once the DVM is up (it goes on in the background), else one line and 125.
int start_dvm(const pm::run_options& options, const pm::resolved_job& resolved,
              const pm::env_map& env);

/// `pmrun --dvm stop`: asks the DVM to stop and returns once its server has ended.
int stop_dvm(const std::string& uri);

/// `pmrun --ps --dvm-uri URI [--json]`: `args` are the words after --ps.
int show_dvm(const std::vector<std::string>& args, const pm::env_map& env);

}  // namespace pmrun
