// pmrun's command line: mpirun-compatible spelling (Open MPI 4 and 5), parsed into a value.
//
// parse_command_line() is pure: it checks syntax and values, never the file system or the
// environment. Anything wrong is one pm::error(errc::usage) line naming the option and the value,
// e.g. "-np 'abc': not a number". The option table (and so `pmrun --help`) lives in
// libpm/src/cli/options.cpp; docs/cli.md holds the same text.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/env.hpp"
#include "pm/export.hpp"
#include "pm/job.hpp"

namespace pm {

/// Where pmrun's standard input goes: one rank (default 0), every rank, or nowhere.
struct stdin_target {
  enum kind_t { rank, all, none } kind = rank;
  std::uint32_t rank_index = 0;
  friend bool operator==(const stdin_target&, const stdin_target&) = default;
};

/// How the hosts of a job are started: one ssh per host from pmrun (flat), or a tree in which
/// agents start the next level (docs/multihost.md).
enum class launch_shape {
  automatic,  ///< flat when the remote hosts fit in one level (at most tree_fanout), else tree
  flat,
  tree,
};

/// What starts the agents of other hosts (--launcher; docs/slurm.md).
enum class launcher_choice {
  automatic,  ///< srun inside a Slurm allocation (SLURM_JOB_ID and its node list), else ssh
  ssh,
  srun,
  local,  ///< no other host: the batch allocation is ignored, every rank runs on this machine
};

/// How pmrun reaches other hosts, as the command line gives it (Open MPI 4 and 5 spellings).
/// resolve_remote_options() fills what it left open from the environment.
struct remote_options {
  /// The rsh agent's words (`-mca plm_rsh_agent "ssh -F cfg"`, plm_ssh_agent, orte_rsh_agent),
  /// split as a shell would without expansion. Empty: not on the command line.
  std::vector<std::string> rsh_agent;
  /// plm_rsh_args / plm_ssh_args, split the same way; nullopt: not on the command line.
  std::optional<std::vector<std::string>> rsh_args;
  std::optional<std::string> launch_agent;  ///< --launch-agent PATH: pmd on the remote hosts
  std::optional<std::string> prefix;        ///< --prefix DIR: pmd is DIR/bin/pmd there
  /// --iface / -mca oob_tcp_if_include: interface names ("eth0") and networks ("10.0.0.0/24")
  /// the launcher's address may come from; empty: any non-loopback, non-bridge address.
  std::vector<std::string> interfaces;
  /// Agent link heartbeats: a host is lost after `heartbeat_misses` intervals of silence, so a
  /// silently partitioned host is noticed within interval * misses = 2 s by default.
  std::chrono::milliseconds heartbeat_interval{500};
  std::uint32_t heartbeat_misses = 4;
  launch_shape launch = launch_shape::automatic;  ///< --launch; plm_rsh_no_tree_spawn 1: flat
  std::uint32_t tree_fanout = 32;                 ///< --tree-fanout: children per tree node
  /// --max-ssh / plm_rsh_num_concurrent: ssh clients pmrun runs at once (Open MPI's and PRRTE's
  /// default is 128; 32 keeps a launcher's key exchanges and the remote sshds' MaxStartups
  /// (default 10:30:100) comfortable, and a tree serves more hosts than that anyway).
  std::uint32_t max_ssh = 32;
  /// --launcher; resolve_job() turns automatic into ssh or srun.
  launcher_choice launcher = launcher_choice::automatic;

  friend bool operator==(const remote_options&, const remote_options&) = default;
};

struct run_options {
  // What to run and where.
  job_spec job;                         ///< apps (MPMD segments) and the mapping policy
  std::vector<std::string> host_lists;  ///< every -H value, for the allocation
  /// The option each host list was given with (-H, --host, -host), for messages; same index.
  std::vector<std::string> host_list_options;
  std::optional<std::string> hostfile;  ///< --hostfile / --machinefile
  // What the ranks are told.
  env_exports exports;  ///< -x and the -mca keys that reach ranks
  env_profile profiles = default_env_profiles;
  std::optional<std::uint16_t> master_port;
  // Output.
  bool tag_output = false;
  bool timestamp_output = false;
  bool merge_stderr = false;
  bool json_lines = false;
  std::string output_dir;       ///< --output-filename DIR (Open MPI 4.1 layout)
  bool output_nocopy = false;   ///< --output-filename DIR:nocopy
  bool output_nojobid = false;  ///< --output-filename DIR:nojobid (DIR/rank.R, no 1/)
  stdin_target input;
  // Failure policy.
  bool abort_on_failure = true;
  /// --no-abort-on-failure or -mca orte_abort_on_non_zero_status was given (it then wins over
  /// OMPI_MCA_orte_abort_on_non_zero_status in the environment).
  bool abort_policy_given = false;
  /// --no-pmix: no PMIx server for the ranks (docs/pmix.md).
  bool pmix = true;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds stall_timeout{0};  ///< --stall-timeout (docs/resilience.md)
  std::chrono::milliseconds kill_grace{3000};
  /// --max-restarts N: the job restarts in place up to N times (docs/resilience.md).
  std::uint32_t max_restarts = 0;
  /// --min-hosts K: with restarts, a lost host without a spare leaves the job on the others if at
  /// least K are left (0: it does not shrink).
  std::uint32_t min_hosts = 0;
  bool spares = true;  ///< --no-spares: false
  /// --host-discovery-script CMD: run at each restart; the hosts it prints join (restart_policy).
  std::string host_discovery;
  /// --enable-recovery (PRRTE's): a failed rank starts again alone, within --max-restarts for the
  /// whole launch; without --max-restarts no rank restarts and the others run on (it then sets
  /// abort_on_failure off). docs/resilience.md, "Recovering single ranks".
  bool enable_recovery = false;
  std::string report_file;  ///< --report FILE: the JSON report
  // Map display.
  bool display_map = false;
  std::string display_map_json;  ///< --display-map-json FILE ("-" = stdout)
  bool do_not_launch = false;
  /// --topology-file FILE: with --do-not-launch, every host's summary (pm::topo::to_text's line,
  /// what `pmd --topology` prints); empty: this machine's, from its pmd (docs/mapping.md).
  std::string topology_file;
  bool display_allocation = false;  ///< --display-allocation
  // A DVM (docs/dvm.md).
  /// --dvm start|stop: start a DVM on the allocation and leave it running, or stop one.
  std::string dvm_action;
  /// --report-uri FILE: where `--dvm start` writes the DVM's URI ("-": stdout).
  std::string report_uri;
  /// --dvm-uri URI: run the job on (or stop, or show) this DVM: file:PATH, unix:PATH, or
  /// "search" for this user's default one. Empty: $PM_DVM_URI if set, else no DVM.
  std::string dvm_uri;
  /// --dvm-idle-timeout SECONDS: a DVM with no job this long stops (0: never).
  std::chrono::milliseconds dvm_idle_timeout{0};
  /// --dvm-no-wait: a job whose slots the DVM's other jobs hold is refused instead of waiting.
  bool dvm_no_wait = false;
  // Misc.
  bool allow_run_as_root = false;
  remote_options remote;  ///< how other hosts are reached
  /// Every plm_rsh_* / plm_ssh_* -mca key in Open MPI 5's spelling (plm_ssh_...), for transports;
  /// like every -mca key these reach the ranks too (exports.mca).
  std::vector<std::pair<std::string, std::string>> launcher_mca;
  bool help = false;
  bool version = false;
};

/// Parses argv[1..] (without the program name).
PM_API run_options parse_command_line(std::span<const std::string> args);

/// The allocation and job a command line asks for, in the environment it runs in: a Slurm/PBS
/// allocation when inside one, the hostfile and -H lists (read through `read`), this machine
/// otherwise. Each MPMD segment's -H hosts become that app's host filter, by allocation name.
/// The remote options come with the environment's say (resolve_remote_options), and the launcher
/// decided: srun inside a Slurm allocation unless --launcher says otherwise; --launcher srun
/// outside one, and --launcher local with a host that is not this machine, are usage errors.
struct resolved_job {
  allocation alloc;
  job_spec job;
  remote_options remote;
};
PM_API resolved_job resolve_job(const run_options& options, const env_map& env,
                                const local_host& me, const file_reader& read);

/// The remote options with what the command line left open taken from the environment:
/// the rsh agent from PM_RSH_AGENT, else OMPI_MCA_plm_rsh_agent, else PRTE_MCA_plm_ssh_agent,
/// else "ssh"; plm_rsh_args from OMPI_MCA_plm_rsh_args, else PRTE_MCA_plm_ssh_args, else none.
/// The result's rsh_agent is never empty and its rsh_args is set. A malformed value is
/// pm::error(errc::usage) naming the variable ("PM_RSH_AGENT 'ssh \"x': unterminated double
/// quote").
PM_API remote_options resolve_remote_options(const remote_options& given, const env_map& env);

/// The launch shape for a job with `remote_hosts` hosts other than this machine.
PM_API launch_shape choose_launch_shape(const remote_options& options, std::size_t remote_hosts);

/// pmrun's arguments with `--app FILE` replaced by the file's app contexts: each line that is
/// not blank or a '#' comment is one MPMD segment ("-np 2 ./a x"), words split as a shell
/// would without expansion; the options before it apply to the job. Without --app, `args` as
/// they are. Reads through `read`; pm::error(errc::usage) for a program also on the command
/// line or a file with no app context.
PM_API std::vector<std::string> expand_app_file(std::span<const std::string> args,
                                                const file_reader& read);

/// What mpirun takes from its environment when the command line leaves it open (mpirun 4.1):
/// OMPI_MCA_orte_abort_on_non_zero_status (a boolean, as -mca takes it) and MPIEXEC_TIMEOUT
/// (seconds). The command line wins. A malformed value is pm::error(errc::usage) naming the
/// variable ("MPIEXEC_TIMEOUT 'abc': expected a positive number of seconds"); mpirun reads
/// "abc" as 0 and aborts the job at once.
PM_API void apply_environment_options(run_options& options, const env_map& env);

/// Open MPI's booleans: 1, 0, true, false, yes, no (any case). False when `value` is none.
PM_API bool parse_mca_boolean(std::string_view value, bool& out);

/// The text `pmrun --help` prints.
PM_API std::string help_text();

}  // namespace pm
