// A simulated scenario as a value: cluster, job, latency model, process scripts, fault plan, seed.
//
// Everything here prints and parses back (to_string / parse_*), so that a failing run can be
// replayed from one command line: scenario::replay_command() gives the `pmsim` arguments that
// reproduce it exactly. Durations print as "1.5s", "250ms", "20us", "7ns".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/controller.hpp"
#include "pm/job.hpp"
#include "pm/rank_map.hpp"

namespace pm::sim {

/// Virtual time: nanoseconds since the simulated job began.
using sim_time = std::chrono::nanoseconds;

/// "1.5s", "250ms", "20us", "7ns", "0s": the shortest exact spelling.
std::string format_duration(sim_time d);
/// Parses "1.5s", "250ms", "20us", "7ns", "2m" (a bare number is seconds). Throws
/// pm::error(errc::usage) naming `what`, e.g. "--run-time: invalid duration 'x' (e.g. 1.5s, 20ms)".
sim_time parse_duration(std::string_view text, std::string_view what);

/// A PMIx call a simulated rank makes on its way (docs/simulator.md, "PMIx in the simulated
/// ranks"): the rank blocks in it until its host's PMIx server completes it.
struct pmix_call {
  enum class kind : std::uint8_t {
    fence,  ///< PMIx_Fence of every rank of the first job, collecting data (MPI_Barrier-like)
    spawn,  ///< PMIx_Spawn (MPI_Comm_spawn) of `count` ranks of the default script
  };
  kind what = kind::fence;
  std::uint32_t count = 0;  ///< spawn: how many ranks
  sim_time at{0};           ///< when (from the rank's start; later if it is blocked then)
  friend bool operator==(const pmix_call&, const pmix_call&) = default;
};

/// What a simulated rank does: a tiny script.
struct process_script {
  enum class ending : std::uint8_t {
    exit,    ///< exits with `value` at `at`
    signal,  ///< dies by signal `value` at `at`
    hang,    ///< never ends by itself
    abort,   ///< calls abort (MPI_Abort/PMIx_Abort) with status `value` at `at`, then waits
  };
  ending end = ending::exit;
  int value = 0;
  /// When it ends (from its start); nullopt: the latency model's run time, with jitter.
  std::optional<sim_time> at;
  bool ignore_term = false;     ///< ignores SIGTERM, SIGINT and SIGHUP (only SIGKILL ends it)
  sim_time slow_start{0};       ///< extra time between fork and exec (a slow start)
  std::uint64_t out_bytes = 0;  ///< bytes it writes on stdout before it ends (stderr: none)
  bool close_early = false;     ///< closes stdout and stderr halfway, then keeps running
  bool leftover = false;        ///< leaves a child that holds its streams open after it ends
  /// PMIx calls before its end, by time. A rank with calls (or an abort) is a PMIx client: it
  /// connects at its start and finalizes before an `exit` ending (not before a signal).
  std::vector<pmix_call> calls;

  /// True if, run undisturbed, it ends the job's success (exit 0 or a successful script).
  bool succeeds() const noexcept { return end == ending::exit && value == 0; }
  friend bool operator==(const process_script&, const process_script&) = default;
};
/// "exit:7@1.5s+ignore-term+slow=20ms+out=4096+close-early+leftover", "signal:9@2s", "hang",
/// "abort:3@1s", "exit:0" (the default); PMIx calls as further steps: "exit:0@5s+fence@1s+
/// spawn:2@2s" (a script may start with a call: "fence@1s" is "exit:0+fence@1s").
std::string to_string(const process_script& s);
process_script parse_script(std::string_view text);

/// The kinds of fault, in a fixed order (the order of their printing and of RC_CLASSIFY).
enum class fault_kind : std::uint8_t {
  host_crash,     ///< the host dies at `at`: its processes and agent vanish without a word
  partition,      ///< the link launcher<->host carries nothing from `at` until `until`
  spawn_failure,  ///< rank `target` cannot be executed (a synchronous failure, code 127)
  agent_failure,  ///< the agent of host `target` does not start
  lost_exit,      ///< the agent misses rank `target`'s exit (the notification never comes)
  /// The launcher receives signal `target` at `at` (a user's Ctrl-C is SIGINT; a batch
  /// system's preemption SIGTERM; SIGUSR1/2 are forwarded to the ranks). Not a fault of the
  /// cluster, but an input the controller must handle at any moment, so it is planned the same way.
  launcher_signal,
  // Connect-back (scenario::connect_back, docs/slurm.md): agents started by one srun step call
  // the launcher, whose caller_gate decides which caller becomes which host's stream.
  forged_call,     ///< at `at`, a caller with a wrong token claims host `target` (refused)
  duplicate_call,  ///< host `target`'s agent calls twice (the second is refused)
  late_call,       ///< host `target`'s agent calls only at `at` (after the hello timeout: refused)
  lost_call,       ///< host `target`'s agent's call never arrives (the hello timeout loses it)
  /// Host `target` never answers (an unroutable address, a stopped sshd): its agent never
  /// starts and nothing arrives. Lost before its hello, at the hello deadline, unless the job
  /// ends first (then the launcher gives it up at once, as it gives up whatever is being set up).
  silent_host,
  /// ssh to host `target` ends with 255 before its agent runs (sshd dropped the connection in
  /// its key exchange: a failure ssh may retry), once per such fault; the launcher's next
  /// attempt, after its backoff, reaches the host. Not with connect_back (no ssh there).
  ssh_failure,
  /// Rank `target` stops progressing at `at`: from then on it uses no CPU and writes nothing,
  /// and its script's end never comes (it hangs until it is signalled). What --stall-timeout
  /// (controller_options::stall_timeout) is for; without one the job never ends.
  stall,
};
inline constexpr std::size_t fault_kind_count = 13;
const char* to_string(fault_kind k) noexcept;

struct fault {
  fault_kind kind = fault_kind::host_crash;
  std::uint32_t target = 0;  ///< a host index (crash, partition, agent) or a rank
  sim_time at{0};
  sim_time until{0};  ///< partitions only
  friend bool operator==(const fault&, const fault&) = default;
};
/// "crash:3@1s", "partition:3@1s-5s", "spawn-fail:12", "agent-fail:3", "lost-exit:12",
/// "launcher-signal:INT@2s" (INT, TERM, HUP, USR1, USR2, TSTP, CONT or a number),
/// "forged-call:3@1s", "dup-call:3", "late-call:3@25s", "lost-call:3" (connect-back only),
/// "silent:3", "ssh-fail:3" (twice in the plan: its first two attempts fail), "stall:5@1s".
std::string to_string(const fault& f);
fault parse_fault(std::string_view text);

/// Latencies and limits of the simulated cluster. Every random draw is uniform in the range given.
struct latency_model {
  sim_time link{std::chrono::microseconds(100)};        ///< one way, launcher <-> agent
  sim_time link_jitter{std::chrono::microseconds(50)};  ///< + [0, jitter]
  sim_time agent_hop{std::chrono::milliseconds(20)};    ///< to start one agent (an ssh hop)
  std::uint32_t fanout =
      32;  ///< tree launch: children per agent; 0: flat (the launcher starts all)
  std::uint32_t concurrent_starts = 32;  ///< agents one launcher or agent starts at once (ssh cap)
  sim_time spawn{std::chrono::microseconds(500)};  ///< per rank, serial on a host
  sim_time spawn_jitter{std::chrono::microseconds(250)};
  sim_time reaction{std::chrono::milliseconds(1)};  ///< a process dies [0, this] after SIGTERM
  sim_time heartbeat_interval{std::chrono::seconds(1)};
  sim_time heartbeat_timeout{std::chrono::seconds(3)};  ///< silence after which a peer is lost
  sim_time hello_timeout{std::chrono::seconds(20)};     ///< the agent's hello, from its launch
  sim_time run_time{std::chrono::seconds(10)};          ///< the default script's run time
  sim_time run_jitter{std::chrono::seconds(1)};         ///< + [0, jitter]
  friend bool operator==(const latency_model&, const latency_model&) = default;
};

/// One app context of an MPMD job (`mpirun -np 2 a : -np 6 b`): its rank count and, optionally,
/// the script its ranks run (instead of the default script; a rank's own script still wins).
struct app_segment {
  std::uint32_t np = 1;
  std::optional<process_script> script;
  friend bool operator==(const app_segment&, const app_segment&) = default;
};
/// "4" or "4=exit:3@1s".
std::string to_string(const app_segment& a);
app_segment parse_app(std::string_view text);

/// One simulated run, fully described.
struct scenario {
  std::uint32_t hosts = 4;  ///< hosts "node0".."nodeN-1"
  std::uint32_t slots = 2;  ///< slots per host
  /// Slots of each host (overrides hosts/slots when not empty).
  std::vector<std::uint32_t> host_slots;
  std::optional<std::uint32_t> np;  ///< nullopt: one rank per slot (ignored when `apps` is set)
  /// MPMD: the job's app contexts in order (ranks numbered across them, as mpirun does).
  /// Empty: one app of `np` ranks.
  std::vector<app_segment> apps;
  mapping_policy mapping{map_by::slot, 0, false, std::nullopt};
  controller_options control{};
  latency_model latency{};
  process_script default_script{};
  /// Ranks whose script differs from the default, sorted by rank, each rank once.
  std::vector<std::pair<std::uint32_t, process_script>> scripts;
  std::vector<fault> faults;
  std::uint64_t seed = 1;
  /// Agents as inside a Slurm allocation (docs/slurm.md): one step starts them all at once (one
  /// agent hop after the launch, no launch plan, no cap), and each calls the launcher with the
  /// job's token before its link begins; the launcher's real caller_gate accepts one caller per
  /// host. The *-call faults need it.
  bool connect_back = false;
  /// Every host's shape, as pm::topo::to_text writes it: what its agent answers when the job
  /// asks (mapping.host: --bind-to, --gpus-per-rank, --map-by core, ...; docs/simulator.md,
  /// "Topologies"). Empty: the agents have none, and a job that plans its hosts is refused.
  std::string topology;
  /// Hosts whose shape differs from `topology` (an empty text: none), sorted by host, once each.
  std::vector<std::pair<std::uint32_t, std::string>> host_topologies;
  /// Restarts in place (pmrun --max-restarts, docs/resilience.md): a failed incarnation is
  /// cleared on every agent and the job runs again, up to this many times.
  std::uint32_t max_restarts = 0;
  /// The ranks' scripts (`scripts`, the apps') are incarnation 0's; later incarnations run the
  /// default script, unless this is set (a failure that comes back every time).
  bool scripts_every_incarnation = false;
  /// Spare hosts and fewer hosts (pmrun --no-spares, --min-hosts; docs/resilience.md): with
  /// restarts, hosts the map leaves empty are spares whose agents start with the job's, and a
  /// lost host's ranks move to one; without one, at least `min_hosts` hosts (when not 0) carry on.
  bool spares = true;
  std::uint32_t min_hosts = 0;
  /// --enable-recovery (docs/resilience.md, "Recovering single ranks"): a failed rank starts
  /// again alone, within max_restarts for every rank together (its next process runs the default
  /// script unless scripts_every_incarnation); with max_restarts 0 the others run on.
  bool enable_recovery = false;

  /// The shape host `host` answers with (empty: none).
  const std::string& topology_of(std::uint32_t host) const;
  /// Sets one host's shape (keeps `host_topologies` sorted).
  void set_host_topology(std::uint32_t host, std::string text);

  /// The script rank `rank` was given by `scripts`, else the default script (an MPMD app's
  /// script, which depends on the map, is applied by the world).
  const process_script& script_of(std::uint32_t rank) const;
  /// Sets one rank's script (keeps `scripts` sorted).
  void set_script(std::uint32_t rank, process_script s);

  /// The arguments of `pmsim` that describe this scenario (only what differs from defaults).
  std::vector<std::string> to_args() const;
  /// "pmsim --hosts 4 --slots 2 --fail 3:7 --seed 42": the one command that replays it.
  std::string replay_command() const;
};

/// A random fault plan of `count` faults for the scenario's hosts and ranks, drawn from `seed`
/// (the same seed, the same plan): crashes and partitions (at most one per host) within the
/// first `within` of the run, spawn failures, agent failures, silent hosts (both lost before
/// their hello) and launcher signals (SIGINT, SIGTERM, SIGUSR1), some of them during the set-up
/// (the first 50 ms). Lost exits are left out: they can only end in a liveness failure.
/// The plan is a plain value: print it (to_string) or append it to scenario::faults, whose
/// replay command then lists every fault explicitly.
std::vector<fault> generate_faults(const scenario& s, std::uint64_t seed, std::uint32_t count,
                                   sim_time within = std::chrono::seconds(5));

/// The allocation, job and rank map the scenario describes (hosts "node0", "node1", ...).
/// Throws pm::error(errc::mapping) when the job does not fit.
allocation make_allocation(const scenario& s);
job_spec make_job(const scenario& s);

/// Throws the pm::error that run() would throw for this scenario before its first event: no
/// host, a job that does not fit, a script or fault naming a missing rank or host, two
/// partitions of one host. pmsim calls it before it prints anything, so that bad input is one
/// error line. It maps the job once (about 20 ms at 800,000 ranks).
void check(const scenario& s);

/// The part of check() that needs only the sizes: every rank script and fault names a rank below
/// `ranks` or a host below `hosts`, and no host has two partitions.
void check_targets(const scenario& s, std::uint32_t hosts, std::uint32_t ranks);

}  // namespace pm::sim
