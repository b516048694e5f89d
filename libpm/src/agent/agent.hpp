// The node agent's logic (what pmd does), as a sans-I/O state machine like the controller.
//
// pmd (libpm/tools/pmd) is the driver for real: it owns the channel, the processes and the
// clock, feeds events here and carries out the actions; the simulator can drive the same machine
// per virtual host. The machine decides; the driver only does system calls. docs/agent.md.
//
// The no-orphan rule it implements: a rank leader that exited is NOT reaped (the driver sees the
// exit with WNOWAIT), so its pid, which is also its process group id, cannot be reused while the
// job runs; `signal` requests therefore reach a finished rank's leftover group members safely.
// At the end (a shutdown request, or the launcher lost) every rank's group gets SIGKILL, and
// only then does the driver sweep: kill and reap every child of the agent, including descendants
// that were orphaned and reparented to it (pmd is a child subreaper), until none is left.
//
// A restart in place (link::restart_request, docs/agent.md "Restarts") ends the ranks the same
// way without ending the agent: SIGKILL to every rank's group, then sweep_ranks (the tree
// launch's child agents stay) until no process of the ranks is left; `restarted` goes out only
// then, and only once every forwarded output stream of those ranks has ended, after everything
// that was said about them. Signals are ignored meanwhile: the sweep reaps the leaders, so their
// pids may name other processes soon. Then the ranks are forgotten and the same rank numbers may
// be spawned again.
//
// Rules for drivers:
//   - stamp every event with a monotonic time;
//   - an action that fails comes back as a later event (rank_spawn_failed), never nested;
//   - a timer_fired for a timer that was not the latest one started is ignored here;
//   - after exit_agent, feed nothing more.
// Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "agent/host_files.hpp"
#include "link/messages.hpp"
#include "pm/exit_status.hpp"

namespace pm::agent {

using agent_time = std::chrono::nanoseconds;

/// The job setups held by the agents of one process, for a driver of many agents (the
/// simulator's 100,000): an agent whose job message equals one of the latest few (its `host`
/// aside, which the agent does not read) shares that one instead of keeping a copy (320 bytes
/// and the apps' strings). A bounded look: setups that differ per host (PMIx facts name the
/// host's node) are each kept once, as without the pool. Not thread-safe.
class setup_pool {
 public:
  /// The setup to keep: an equal one already held (its `host` may be another agent's), or `s`.
  std::shared_ptr<const link::job_setup> share(link::job_setup&& s);

 private:
  static constexpr std::size_t kept = 4;
  std::vector<std::shared_ptr<const link::job_setup>> latest_;
  std::size_t next_ = 0;  // the slot the next new setup replaces, once `kept` are held
};

struct options {
  /// The agent's own environment ("NAME=value"): what ranks start from (rank_env.hpp).
  std::vector<std::string> environment;
  /// When the launcher is lost before the job's setup said otherwise: SIGTERM to every rank
  /// group, SIGKILL after this grace (or as soon as every rank leader has exited). The job's
  /// setup (its stop sequence, --kill-grace) replaces it.
  std::chrono::milliseconds lost_grace{1000};
  /// While clearing: sweep again this often even if no SIGCHLD arrives.
  std::chrono::milliseconds sweep_interval{20};
  /// What the driver says of the host's files: with it the machine decides each rank's working
  /// directory and program (program_lookup.hpp) and refuses a rank that cannot run; without it
  /// (a simulated host) `process_spec::program` stays empty and `wdir` as the job gave it.
  /// Not owned; it must outlive the machine.
  const host_files* files = nullptr;
  /// Reads this host's topology (pmd: hwloc, docs/gpus.md), called at most once, when the job
  /// asks for it (job_setup::topology); its answer goes to the launcher as is. Empty: the agent
  /// answers that it has none (a simulated host without a summary).
  std::function<link::host_shape()> read_topology = {};
  /// Where agents of one process share identical job setups (null: this agent keeps its own, as
  /// pmd does). Not owned; it must outlive the machine.
  setup_pool* shared_setups = nullptr;
};

/// One process to start, with everything decided: the driver starts `program` (argv[0] where
/// no host_files were given) in `wdir`.
struct process_spec {
  std::uint32_t rank = 0;
  std::vector<std::string> argv;
  /// What execve runs: argv[0] found on this host (program_lookup.hpp).
  std::string program;
  /// The rank's own profile variables ("NAME=value"), as its spawn request carried them.
  std::vector<std::string> profile;
  /// The parts every rank of the job (of its app) shares, owned by the agent that made this spec
  /// and valid as long as it lives: the base environment, the -x overrides, the app's variables.
  const std::vector<std::string>* base = nullptr;
  const std::vector<std::string>* overrides = nullptr;
  const std::vector<std::string>* app_env = nullptr;
  /// What the host's PMIx server tells the rank and Open MPI's settings for this host
  /// (pmix_relay::rank_variables): they win over everything above.
  std::vector<std::string> pmix;
  /// The complete environment ("NAME=value"), composed now: a driver calls it when it starts the
  /// rank, so that a spawn request for many ranks never holds many complete environments (a
  /// 100 KB -x variable once cost 100 KB per queued rank).
  std::vector<std::string> environment() const;
  /// One variable of environment() without composing it (nullopt: not set).
  std::optional<std::string_view> variable(std::string_view name) const;
  /// Where it starts (empty: the agent's working directory). Where the job named none, the
  /// launcher's directory, or the rank's home directory where this host has no such directory
  /// (as Open MPI does) instead of failing.
  std::string wdir;
  bool stdin_from_launcher = false;
  /// The PUs to bind the rank to before exec, a Linux cpu list ("0-3,8"); empty: not bound.
  std::string cpus = {};
  std::uint8_t streams = 2;    ///< 2: stdout and stderr pipes; 1: one pipe for both; 0: /dev/null
  bool forward_output = true;  ///< output travels as data frames (false: pipes passed as fds)
};

// ---- events ----
/// A message from the launcher (the link's own messages, hello and heartbeats, stay in the
/// link endpoint).
struct received {
  link::message msg;
};
/// A forwarded output stream of a rank reached end-of-stream after `bytes` bytes, all sent.
struct output_ended {
  std::uint32_t rank;
  output_stream stream;
  std::uint64_t bytes = 0;
};
/// A spawn_rank action succeeded: the rank runs with this pid (= its process group id).
struct rank_spawned {
  std::uint32_t rank;
  std::int64_t pid;
};
/// A spawn_rank action failed.
struct rank_spawn_failed {
  std::uint32_t rank;
  int code = 127;
  std::string reason;
};
/// A rank leader ended (seen with WNOWAIT: it stays a zombie until the sweep).
struct rank_exited {
  std::uint32_t rank;
  exit_status status;
};
/// The channel to the launcher closed, broke or carried garbage; `reason` says which.
struct channel_lost {
  std::string reason;
};
/// The launcher sent something undecodable (the reason is sent back; then as channel_lost).
struct bad_message {
  std::string reason;
};
/// The agent itself received SIGTERM (or SIGINT/SIGHUP when run by hand).
struct terminate_requested {
  int signo;
};
struct timer_fired {
  std::uint64_t timer;
};
/// A child of the agent changed state (SIGCHLD).
struct child_changed {};
/// Result of a sweep action: how many children the agent still has.
struct swept {
  std::size_t children_left;
};
/// Result of a sweep_ranks action (a restart): how many children the agent still has besides the
/// child agents' carriers; with none left, `port`: a TCP port free on this host now (pmd picks it
/// as it picks hello's; 0: none), which the agent's `restarted` carries.
struct ranks_swept {
  std::size_t children_left = 0;
  std::uint16_t port = 0;
};

/// What the system says of one live rank (the answer to sample_ranks; pmd reads /proc).
struct rank_sample {
  std::uint32_t rank = 0;
  char state = '?';   ///< the kernel's state letter of the rank's leader ('S', 'D', 'R', ...)
  std::string wchan;  ///< where the leader waits in the kernel; empty: unknown or running
  std::uint64_t cpu_ms = 0;   ///< CPU time (user + system) of the rank's processes
  std::uint64_t written = 0;  ///< bytes its processes wrote (write(2) and the like: wchar)
  bool gone = false;          ///< nothing could be read (it is ending): no progress, no state
};
/// The answer to sample_ranks: one sample per rank it named that the driver could look at.
struct ranks_sampled {
  std::vector<rank_sample> ranks;
};

using event = std::variant<received, rank_spawned, rank_spawn_failed, rank_exited, output_ended,
                           channel_lost, bad_message, terminate_requested, timer_fired,
                           child_changed, swept, ranks_swept, ranks_sampled>;

// ---- actions ----
/// Start a rank in its own process group (output pipes per spec.streams); report rank_spawned
/// or rank_spawn_failed.
struct spawn_rank {
  process_spec spec;
};
/// killpg(pgid, signo); ESRCH (group empty) is not an error.
struct signal_group {
  std::int64_t pgid;
  int signo;
};
/// Send a message to the launcher. A `started` message carries the rank's output read ends when
/// output is not forwarded.
struct send {
  link::message msg;
};
struct start_timer {
  std::uint64_t timer;
  std::chrono::milliseconds after;
};
/// Reap children that ended and are not rank leaders (orphans reparented to the agent).
struct reap_orphans {};
/// SIGKILL every remaining child of the agent, reap every one that ended (rank leaders too),
/// then report swept{children_left}.
struct sweep {};
/// Close the channel and exit with this code.
struct exit_agent {
  int code;
};
/// A restart: SIGKILL every child of the agent but the tree launch's child-agent carriers, and
/// the group each leads (a rank's leftovers, a descendant that called setsid and came back to
/// the subreaper); report the end of every rank leader whose exit was not reported yet as
/// rank_exited (seen without reaping it, as always); reap every child that ended but a rank
/// leader whose exit is still unknown (it is reaped by a later sweep, after its exit was said);
/// then report ranks_swept. The rank groups got SIGKILL before this action.
struct sweep_ranks {};
/// A restart is complete (`restarted` was sent just before): the driver forgets the ranks it
/// started (their pidfds, output and input pipes, pipes not passed yet): every one of them is
/// reaped, every forwarded stream has ended, and the same rank numbers come again.
struct forget_ranks {};

/// --enable-recovery: the launcher asks for a rank whose process ended (and whose group got
/// SIGKILL just before) again. The driver reaps that rank's leader and forgets what it held of it
/// (its pidfd, its output and input pipes: its forwarded output ended already), then starts the
/// spawn_rank that follows; a PMIx server registers the rank's client again (docs/resilience.md).
struct forget_rank {
  std::uint32_t rank;
};
/// --stall-timeout (link::stall_watch): look at these live ranks (rank, pid: its leader and
/// process group) and answer ranks_sampled, in a later event.
struct sample_ranks {
  std::vector<std::pair<std::uint32_t, std::int64_t>> ranks;
};

using action = std::variant<spawn_rank, signal_group, send, start_timer, reap_orphans, sweep,
                            exit_agent, sweep_ranks, forget_ranks, sample_ranks, forget_rank>;

/// Exit codes of pmd.
inline constexpr int exit_after_shutdown = 0;
inline constexpr int exit_after_launcher_lost = 1;

class agent {
 public:
  explicit agent(options opts);
  ~agent();
  agent(agent&&) noexcept;
  agent& operator=(agent&&) noexcept;

  /// Takes the event by value: a spawn request's rank specs move into the spawn actions.
  void handle(agent_time now, event e, std::vector<action>& out);
  /// True once exit_agent was emitted.
  bool done() const noexcept;
  /// The job's setup, once it came (null before).
  const link::job_setup* setup() const noexcept;
  /// True when a rank this agent started and that has not exited satisfies `pred`.
  bool any_live_rank(const std::function<bool(std::uint32_t rank)>& pred) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace pm::agent
