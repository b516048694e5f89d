// pm::job_runner: run a job on the caller's Asio io_context — the API a scheduler embeds, and
// what pmrun uses.
//
// The runner drives a pm::controller with one agent link per host (docs/agent-link.md) and the
// output layer. A routing layer picks each host's transport: this machine's pmd locally, ssh (or
// the embedder's own transport) for every other host; a host that is not this machine never runs
// its ranks here.
// It installs no signal handler and no SIGCHLD handler: the embedding program owns its process's
// signals and children, and forwards the signals it wants the job to see with signal().
// Thread safety: every member function must be called from the io_context's thread (or strand);
// callbacks run there too.
// Descriptors: a process that may run with 0, 1 or 2 closed calls
// pm::open_missing_standard_descriptors() (pm/standard_descriptors.hpp) before it makes its
// io_context, whose eventfd would otherwise take 1 and receive the ranks' output.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pm/controller.hpp"
#include "pm/env.hpp"
#include "pm/export.hpp"
#include "pm/job_plan.hpp"
#include "pm/output.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm {

/// What starts the agents of hosts other than this machine (docs/slurm.md).
enum class agent_launcher {
  ssh,   ///< one ssh per host (remote_launch::rsh_agent)
  srun,  ///< one `srun` step for every such host, inside a Slurm allocation; agents dial back
};

/// How hosts other than this machine are reached (docs/multihost.md, docs/slurm.md).
struct remote_launch {
  /// The remote shell command, as words ("ssh -F cfg"): plm_rsh_agent, --launch-agent's peer.
  std::vector<std::string> rsh_agent = {"ssh"};
  /// More arguments for it (plm_rsh_args).
  std::vector<std::string> rsh_args;
  /// pmd on the other hosts; empty: the same path as this machine's pmd.
  std::string agent_path;
  /// Heartbeats both ways; a host silent for interval x misses is lost (0: no heartbeats).
  std::chrono::milliseconds heartbeat_interval{500};
  std::uint32_t heartbeat_misses = 4;
  /// An agent that has not said hello this long after its start is lost.
  std::chrono::milliseconds hello_timeout{20000};
  /// At most this many agent start-ups (ssh connections being set up) at once; in a tree, at
  /// most this many per parent agent.
  std::uint32_t max_concurrent = 32;
  /// ssh only: a tree launch (docs/multihost.md, "The tree launch"). The launcher starts the
  /// first `tree_fanout` other hosts; the agent of each starts the next `tree_fanout` with the ssh
  /// command line the launcher built, and relays their links, level by level.
  bool tree = false;
  std::uint32_t tree_fanout = 32;
  /// ssh's exit 255 before the agent answered (a refused or dropped connection) is retried this
  /// many times, with jittered backoff.
  std::uint32_t connect_retries = 3;
  /// Where MASTER_ADDR and node addresses may come from: interface names or CIDR blocks
  /// (--iface, oob_tcp_if_include). Empty: any non-loopback address.
  std::vector<std::string> iface;
  /// ssh (the default) or srun; an embedder's remote_transport overrides both.
  agent_launcher launcher = agent_launcher::ssh;
  /// srun: the command (words) and more arguments for it (PM_SRUN_ARGS).
  std::vector<std::string> srun_command = {"srun"};
  std::vector<std::string> srun_args;
  /// Lines for the user from a transport (a refused connect-back), without newline; empty: the
  /// job's on_message.
  std::function<void(std::string_view line)> notice;
};

/// This machine's agent (pmd), started before the job is known so that its exec overlaps the
/// caller's own work: parsing, mapping, composing the environment (pmrun starts one right after
/// parsing its command line; docs/agent.md, "Lifecycle"). It runs with the calling process's
/// environment less an outer job's identity (OMPI_COMM_WORLD_*, PMIX_*, SLURM_STEP_*, ...), which
/// the agent turns into the ranks' base as it does for an agent the job starts. Hand it to a job
/// in job_request::prestarted: the job adopts it for this machine when the agent paths agree and
/// uses its nonce. One that no job adopted (a job on other hosts only, a request refused after
/// the start) is killed and reaped when the last reference goes: nothing outlives it.
class PM_API early_agent {
 public:
  /// Starts pmd (`agent_path`; empty: pm's default search, as job_request::agent_path). Best
  /// effort: returns null when pmd cannot be found or started (the job's own start says why).
  /// Call it before the job's io_context runs its first job; not thread-safe.
  static std::shared_ptr<early_agent> start(const std::string& agent_path = {});
  /// Kills and reaps the agent unless a job adopted it (blocking, about a millisecond).
  ~early_agent();
  early_agent(const early_agent&) = delete;
  early_agent& operator=(const early_agent&) = delete;

  /// The nonce the agent was started with; a job that adopts it uses it for its every link.
  std::uint64_t nonce() const noexcept;
  /// The agent's process id.
  std::int64_t pid() const noexcept;
  /// The agent program it runs.
  const std::string& path() const noexcept;
  /// True once a job took it over (it is then that job's to end).
  bool adopted() const noexcept;

  struct impl;

 private:
  explicit early_agent(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
  friend struct early_agent_access;
};

/// Restarts in place (docs/resilience.md): when an incarnation of the job fails, every rank stops
/// (as without restarts), then the whole job starts again on the agents that are still up (no new
/// ssh, no new agent), with a fresh PMIx namespace and MASTER_PORT, as torchrun's --max-restarts.
/// One budget for the whole launch, never per host.
struct restart_policy {
  /// --max-restarts: how many times the launch may restart (0: never; the first failure ends it).
  std::uint32_t max_restarts = 0;
  /// Before restart k (1, 2, ...): min(backoff_max, backoff_base x (2^(k-1) - 1)): the first
  /// restart at once, then 50 ms, 150 ms, 350 ms, ... (a crash loop does not spin).
  std::chrono::milliseconds backoff_base{50};
  std::chrono::milliseconds backoff_max{1000};
  /// TORCHELASTIC_RUN_ID; empty: the launch's own id (its PMIx namespace's stem).
  std::string run_id;
  /// Hosts of the allocation that the map leaves empty are spares (with max_restarts > 0): their
  /// agents start with the job's, and a lost host's ranks move to one (same rank, local rank and
  /// node numbers) for the next incarnation. A lost host is quarantined: never used again in
  /// the launch. false: no spare is started.
  bool spares = true;
  /// --min-hosts: where no spare is left for a lost host, the job goes on with the hosts it
  /// still has (every rank renumbered, the world smaller: min(np, their slots)) as long as at
  /// least this many remain. 0: it does not shrink (a lost host without a spare ends it).
  std::uint32_t min_hosts = 0;
  /// --enable-recovery (PRRTE's meaning, docs/resilience.md "Recovering single ranks"): a rank
  /// that fails is started again alone (same rank, host and environment; its own restart count),
  /// while the other ranks keep running; `max_restarts` is then one budget for every rank of the
  /// launch together, and the job never restarts as a whole. With max_restarts 0 no rank is
  /// restarted and the job goes on without the failed ones (the launcher turns
  /// controller_options::abort_on_failure off, unless keep_abort). Once the budget is spent, the
  /// failure policy applies.
  bool per_rank = false;
  /// per_rank with max_restarts 0 keeps the failure policy as given (pmrun: an explicit
  /// `-mca orte_abort_on_non_zero_status 1`) instead of letting the others run on.
  bool keep_abort = false;
  /// --host-discovery-script (Horovod's spelling; docs/resilience.md "Hosts that join"): a shell
  /// command run at each restart, before the next incarnation is placed, that prints the hosts
  /// available now, one `host[:slots]` a line. Hosts it names that the launch does not have yet
  /// join (their agents start, as spares'): a lost host's ranks move to one, and a job that
  /// shrank (min_hosts) grows back up to the -np asked for. A quarantined host it names comes
  /// back only when nothing else is left. A command that fails, is not done within
  /// discovery_timeout or prints garbage gets one line, and the restart goes on with the hosts
  /// there are. Empty: none.
  std::string host_discovery;
  /// How long host_discovery may run before it is killed (its process group with it).
  std::chrono::milliseconds discovery_timeout{10000};
};

/// Everything a job needs, decided before any rank starts.
struct job_request {
  rank_map map;                   ///< from pm::map_job
  std::vector<app_context> apps;  ///< argv and wdir per app (job_spec::apps)
  /// How jobs that the ranks spawn (MPI_Comm_spawn, PMIx_Spawn) are placed on the allocation's
  /// free slots: the launch's own policy (job_spec::mapping), oversubscription included. Its
  /// `host` part and report_bindings apply to the first job's ranks within each host: the agents
  /// report their hosts' topologies, every host is planned before any rank starts, and a host that
  /// cannot meet it refuses the job in one line (exit_codes::usage; docs/gpus.md).
  mapping_policy mapping;
  job_env env;                 ///< from pm::make_job_env
  controller_options control;  ///< failure policy, timeout, grace
  output_options output;       ///< how output is shown (pm/output.hpp)
  /// The descriptor rank `stdin_rank` reads as stdin (-1: every rank reads /dev/null). Not owned:
  /// the runner takes a copy of its own when it is made (the caller may close its own then), and
  /// closes it once the rank needs it no more (a local rank started, a remote one ended), so that
  /// a rank that is gone or stopped reading makes writes to a pipe fail rather than block.
  int stdin_fd = -1;
  std::int64_t stdin_rank = 0;
  /// --stdin all: one descriptor per rank (index = rank), each rank's own copy. Not owned, copied
  /// and released as stdin_fd is.
  std::vector<int> per_rank_stdin;
  std::string agent_path;  ///< pmd; empty: next to the program, or $PM_AGENT
  /// MASTER_PORT given by the user (--master-port): kept for a job whose rank 0 is elsewhere too.
  bool master_port_fixed = false;
  remote_launch remote;
  /// Give the ranks a PMIx server (in each host's agent), so that MPI programs run as one job
  /// (docs/pmix.md). It starts only when a rank connects: a job that never calls PMIx does not
  /// pay for it. false: --no-pmix (the ranks get no PMIx variables at all). It also decides
  /// control.notify_failures: only ranks with a PMIx server can be told of failures.
  bool pmix = true;
  /// Reaches hosts other than this machine; null: the system ssh (remote.rsh_agent).
  std::shared_ptr<transport> remote_transport;
  /// An agent for this machine started beforehand (early_agent::start); null: the job starts
  /// its own when it needs one.
  std::shared_ptr<early_agent> prestarted;
  /// Restarts in place (none by default).
  restart_policy restarts = {};
};

struct job_callbacks {
  /// A human line from the controller (failures, aborts), without trailing newline.
  std::function<void(std::string_view line)> on_message;
  /// The job ended; the report is final. Called once, last.
  std::function<void(const job_report& report)> on_finish;
  /// A rank changed state: it started (running) or ended (exited, killed, spawn_failed, lost,
  /// not_started). Called once per change, in the order the job learned them, with that rank's
  /// entry of the report; O(1) per change (a lost host calls it for each of its ranks). A rank
  /// whose exit overtook its start goes from pending to its end in one call; a rank the ending
  /// job gave up before it started goes from pending to not_started. (Last in the struct, so
  /// that {on_message, on_finish} initialisation keeps its meaning.)
  std::function<void(const rank_report& rank)> on_rank_state = {};
  /// --report-bindings (mapping_policy::report_bindings): Open MPI's line for each rank, e.g.
  /// "[a:4242] MCW rank 1 bound to socket 0[core 1[hwt 0-1]]: [../BB/..]", once every host of the
  /// job is planned and before any rank starts (pmrun writes them to stderr as mpirun does).
  /// It must not call into the runner. Null: on_message gets them.
  std::function<void(std::string_view line)> on_binding = {};
  /// Once every host of the job is planned (the job binds, maps within hosts or gives GPUs:
  /// needs_topology), before any rank starts: each rank's cores, GPUs and NIC by rank, as
  /// job_report::resources will hold them, and Open MPI's words for its binding (pmrun prints
  /// --display-map then). Not called for a job that plans nothing, or one refused. It must not
  /// call into the runner.
  std::function<void(const job_plan& plan)> on_planned = {};
  /// The launch restarts in place (restart_policy): `ended` is the incarnation that failed (its
  /// number, cause and line); the next one, ended.number + 1, starts once every agent cleared it.
  /// Called before the restart's line reaches on_message. It must not call into the runner.
  std::function<void(const incarnation_report& ended)> on_restart = {};
  /// --enable-recovery (restart_policy::per_rank): a rank failed and is started again alone
  /// (its rank, host, its count and the launch's, and its failure's line). Called before its line
  /// reaches on_message. It must not call into the runner.
  std::function<void(const rank_restart_report& restart)> on_rank_restart = {};
};

/// One host's agent as the launcher knows it (what `pmrun --ps` shows; docs/pmix.md, "Tools").
struct agent_report {
  std::uint32_t host = 0;  ///< allocation index
  std::int64_t pid = 0;    ///< the agent's pid on its host; 0 until it said hello
  /// Where a PMIx tool on that host reaches the agent's PMIx server (PMIX_SERVER_URI), and
  /// PMIx's tmpdir there (rendezvous files, once the server runs). Empty: no PMIx (--no-pmix).
  std::string pmix_uri, pmix_tmpdir;
};

class PM_API job_runner {
 public:
  /// Checks the request and throws pm::error before anything starts. For a job on this machine
  /// only, every app's program is resolved in its ranks' PATH and wdir first, so that a missing
  /// program starts no rank; on other hosts their agents resolve it.
  job_runner(boost::asio::io_context& io, job_request request, job_callbacks callbacks);
  ~job_runner();
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  /// Starts the job; returns at once (the io_context runs it).
  void start();
  /// Tells the job that its launcher received `signo` (SIGINT/TERM/HUP abort it, also during the
  /// set-up: hosts whose agent has not answered are given up at once; a second one escalates to
  /// SIGKILL and waits at most 500 ms more for the agents; USR1/USR2/TSTP/CONT are forwarded to
  /// every rank). Any other signal throws pm::error (errc::usage) instead of doing nothing
  /// (pm::check_job_signal).
  void signal(int signo);
  /// Aborts the job (SIGTERM, then SIGKILL after the grace period), as a cancelled job.
  void cancel();
  /// Lets go of the ranks' output that cannot be written now (a pipe nobody reads, full): its
  /// bytes are dropped and counted in one message, and the job ends without waiting for a reader
  /// (pmrun's second interrupt does the same). Output to files is never given up.
  void give_up_output();
  bool finished() const noexcept;
  /// The report so far (final after on_finish).
  job_report report() const;
  /// The agents started so far, by host (an agent's entry stays after its end).
  std::vector<agent_report> agents() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm
