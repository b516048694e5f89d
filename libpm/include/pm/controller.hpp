// The controller: a job's brain, as a sans-I/O state machine.
//
// It owns the job's life — launch, supervise, propagate failure, collect, report — and does no
// I/O: it reads no clock, touches no descriptor and never sleeps. A driver (the Asio driver for
// real transports, sim/ for the simulator) feeds it events stamped with the driver's time and
// carries out the actions it returns. The same object therefore runs in production and in the
// simulator. Rules for drivers (docs/architecture.md):
//   - stamp every event with a monotonic time (`now`); the controller never asks for one;
//   - an action that fails at once comes back as a later event (e.g. rank_spawn_failed), never as
//     a nested call into the controller;
//   - a timer_fired for a timer that was cancelled (or fired already) is ignored by the controller,
//     so drivers need not win that race;
//   - after the finish action, no further actions come out of the controller.
// Not thread-safe: one driver, one thread (or strand).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "pm/exit_status.hpp"
#include "pm/export.hpp"
#include "pm/notice.hpp"
#include "pm/output.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"

namespace pm {

/// Time as the driver stamps it: a monotonic duration since an epoch of the driver's choosing.
using job_time = std::chrono::nanoseconds;

/// A rank's output stream (the same type the output layer uses).
using stream_kind = output_stream;

/// Failure policy and limits. Zero values are the defaults.
struct controller_options {
  bool abort_on_failure = true;  ///< --no-abort-on-failure / orte_abort_on_non_zero_status 0
  /// Between SIGTERM and SIGKILL when the job is aborted (mpirun: 1 s, Slurm KillWait: 30 s).
  std::chrono::milliseconds kill_grace{3000};
  /// --timeout: end the job (exit_codes::timeout) after this long; zero: never.
  std::chrono::milliseconds timeout{0};
  /// The --timeout the user gave, named in the timeout's line when it is not `timeout` (a later
  /// incarnation's timer runs for what the earlier ones left of it); zero: `timeout`.
  std::chrono::milliseconds timeout_said{0};
  /// --stall-timeout: the job is stalled when no rank of it progressed (used CPU or wrote) for
  /// this long; its launcher then names every live rank's state and feeds job_stalled, which
  /// ends the job (exit_codes::stalled). Zero: not watched (docs/resilience.md, "Stalls").
  std::chrono::milliseconds stall_timeout{0};
  /// Streams each rank has open at start (stdout and stderr: 2; merged: 1; none: 0). The job
  /// finishes only once every stream reached end-of-stream, so that no output is lost.
  std::uint8_t streams_per_rank = 2;
  /// With abort_on_failure off: tell the ranks still alive about each failure of another rank and
  /// about the launcher ending the job (notify_ranks actions; job_runner sets it exactly when the
  /// job has PMIx, job_request::pmix, whose agents turn them into PMIx events, docs/pmix.md
  /// "Events"). Ignored with abort_on_failure.
  bool notify_failures = false;
  /// --enable-recovery --max-restarts N (docs/resilience.md, "Recovering single ranks"): a rank
  /// of the first job whose process fails by itself (a non-zero exit but 126 and 127, a signal
  /// the launcher did not forward) while the job runs is started again alone, up to this many
  /// times for the whole job (every rank together), instead of being a failure: a rank_restarting
  /// action, its line, SIGKILL to its process group (what it left holds its output), and once
  /// every stream of the failed process ended, a spawn of that rank alone. Zero: never.
  std::uint32_t rank_restarts = 0;
  /// finish::report without its `ranks` (the counts and everything else as always): a driver
  /// that needs the ranks' reports later takes them from report(), final once finished(). At
  /// 800,000 ranks they are 83 MB, which the launcher would otherwise build at the finish beside
  /// every host's state and hold through the agents' shutdown (libpm's launcher sets it).
  bool finish_without_ranks = false;
};

// ---- events: what happened ------------------------------------------------------------------

/// Begin the job: the controller answers with spawn actions (and the timeout timer).
struct job_start {};
/// A rank's process runs (exec succeeded). `pid` is informational (for the report).
struct rank_started {
  std::uint32_t rank;
  std::int64_t pid = 0;
};
/// A rank could not be started. `code` is the shell-style code (127 not found, 126 not executable).
struct rank_spawn_failed {
  std::uint32_t rank;
  int code = 127;
  std::string reason;  ///< one line, e.g. "cannot execute '/x/app': Permission denied"
};
/// One of a rank's output streams reached end-of-stream after `bytes` bytes.
struct stream_closed {
  std::uint32_t rank;
  stream_kind stream;
  std::uint64_t bytes = 0;
};
/// A rank's process ended.
struct rank_exited {
  std::uint32_t rank;
  exit_status status;
};
/// A host (its agent) is gone: its ranks that had not ended count as failed.
///
/// `before_hello`: its agent never said hello (ssh refused, no key, unreachable, pmd missing, a
/// hello deadline): the host never joined the launch, so this is a set-up failure, not a lost
/// host. Its ranks end `spawn_failed` (status 125, the host's reason), the cause is
/// `spawn_failed` with exit_codes::launch_failed (125), the line says "the agent on HOST did not
/// start (REASON)", and the job ends also with abort_on_failure off (a launch that cannot be set
/// up is not run in part). During an abort its ranks end `not_started`.
struct host_lost {
  std::uint32_t host;  ///< allocation host index
  std::string reason;  ///< e.g. "no heartbeat for 1.0 s", "agent channel closed"
  bool before_hello = false;
  /// Hosts lost with it, in the same step (a tree parent's: those whose links it relayed and whose
  /// agents had said hello): their ranks are lost now, counted in its line, and left out of the
  /// abort it begins. Each may get its own host_lost after it (then a duplicate, ignored).
  std::vector<std::uint32_t> with{};
  /// Why the hosts in `with` are lost (the job may finish with this event: none comes after).
  std::string with_reason{};
};
/// A timer started by a start_timer action expired.
struct timer_fired {
  std::uint64_t timer;
};
/// The launcher received a signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT).
struct signal_received {
  int signo;
};
/// Whether the controller acts on `signo` as a signal_received: SIGINT, SIGTERM and SIGHUP end the
/// job, SIGUSR1, SIGUSR2, SIGTSTP and SIGCONT are forwarded to the ranks; any other it ignores.
PM_API bool job_takes_signal(int signo) noexcept;
/// Throws pm::error (errc::usage), naming the signals a job takes, unless job_takes_signal(signo).
PM_API void check_job_signal(int signo);
/// A rank asked the job to abort (PMIx_Abort / MPI_Abort), or an embedder cancels (rank = none).
/// `refused`: the launcher refused the job before any rank started (a host cannot meet its
/// binding or GPUs, pm::topo::plan_host): `message` is the whole line, `status` the exit code
/// (exit_codes::usage); no "cancelled" wording, nothing to signal.
struct abort_requested {
  std::optional<std::uint32_t> rank;
  int status = 1;
  std::string message;
  bool refused = false;
};

/// A rank that had called PMIx_Init (MPI_Init) ended without PMIx_Finalize, by an exit (even 0)
/// or a signal: its peers may wait for it in their next fence for ever, so the job ends, also
/// where the abort policy is off (as under mpirun), with this rank named as the cause (its code,
/// 1 for an exit 0, or 128 + signal).
struct rank_unfinalized {
  std::uint32_t rank;
  exit_status status;
};

/// A rank's PMIx_Spawn (MPI_Comm_spawn) was mapped by the driver: a new job joins. Its ranks
/// become processes size() .. size()+hosts.size()-1 (job number jobs() before the event), and are
/// supervised like the first job's: spawned (spawn actions, batched per host), the same failure
/// policy, signals forwarded, counted for the finish. Ignored (nothing added) while the job is
/// being aborted or is finished, or when `hosts` is empty or names a host outside the allocation:
/// the driver sees size() unchanged and tells the caller its spawn failed. Also ignored when
/// `hosts` names a host that was lost (host_lost), and once every process has ended (only output
/// is pending, clear_leftovers may be under way): nobody is left to have asked.
struct job_spawned {
  std::vector<std::uint32_t> hosts;  ///< per rank of the new job: its allocation host index
};

/// The driver gives up on starting these ranks because the job is ending: it never sent their
/// spawn (it held it, e.g. waiting for the launch facts) or it closed their host's link before the
/// agent said hello. Each rank still pending ends `not_started` (neither failed nor killed; no
/// line). Ignored unless the job is ending (an abort, a signal, the timeout, a cancel): a running
/// job never gives up on a rank this way. What lets a job whose set-up is cut short finish at once
/// instead of waiting for starts that will never be reported.
struct spawn_withdrawn {
  std::vector<std::uint32_t> ranks;
};

/// The launcher found the job stalled (controller_options::stall_timeout: no live rank of any host
/// progressed for that long) and has named every live rank's state. A failure of the whole job,
/// like the timeout: cause `stalled`, exit_codes::stalled, every running rank aborted, also with
/// abort_on_failure off (nothing would ever end a stalled job). Ignored during an abort and once
/// every rank ended.
struct job_stalled {};

using event = std::variant<job_start, rank_started, rank_spawn_failed, stream_closed, rank_exited,
                           host_lost, timer_fired, signal_received, abort_requested,
                           rank_unfinalized, job_spawned, spawn_withdrawn, job_stalled>;

// ---- actions: what the driver must do -------------------------------------------------------

/// Start these ranks on this host (batched per host). For a job_spawned, one per host of the new
/// job, hosts in the order they first appear in job_spawned::hosts, ranks ascending.
struct spawn {
  std::uint32_t host;
  std::vector<std::uint32_t> ranks;
};
/// Send `signo` to the process group of each listed rank on this host (batched per host).
struct signal_ranks {
  std::uint32_t host;
  std::vector<std::uint32_t> ranks;
  int signo;
};
struct start_timer {
  std::uint64_t timer;
  std::chrono::milliseconds after;
};
struct cancel_timer {
  std::uint64_t timer;
};
/// A line for the user (pmrun prints it on stderr; embedders get a callback), e.g.
/// "rank 3 on node2 exited with code 7; aborting the job (SIGTERM to 7 ranks)". Lines carry no
/// program prefix: pmrun adds "pmrun: ", an embedder adds its own (docs/failure-semantics.md).
struct emit {
  std::string line;
};
/// Every rank ended, but output streams are still open: processes the ranks left behind (a
/// background child, a daemon) hold them. The driver kills everything the ranks left, so that
/// the streams close and the job can finish (as Slurm ends a step's leftovers). Emitted once.
struct clear_leftovers {};
/// Only with controller_options::notify_failures and abort_on_failure off: tell the ranks of
/// `host` that have not ended what happened to other ranks, or that the job is being ended.
/// One action per host with ranks not ended (pending or running), in node order, right after
/// the event and before any signal_ranks the same event causes; never for ranks that exited 0.
/// (docs/failure-semantics.md, "Telling the survivors"; pm/notice.hpp says what `code` is.)
struct notify_ranks {
  std::uint32_t host;
  notice_kind kind;
  std::vector<std::uint32_t> ranks;  ///< the affected ranks (empty: the job ends without one)
  int code = 0;
  std::string line;  ///< the failure's line as emit says it, without the abort tail
};
/// controller_options::rank_restarts: a rank's process failed and the rank starts again alone
/// (its spawn follows once the failed process's streams ended). Its line follows as an emit.
struct rank_restarting {
  rank_restart_report restart;
};
/// The job is over: every rank ended and every stream closed. The driver clears what the ranks
/// left behind (their process groups, the agents), then exits with report.exit_code.
struct finish {
  job_report report;
};

using action = std::variant<spawn, signal_ranks, start_timer, cancel_timer, emit, clear_leftovers,
                            finish, notify_ranks, rank_restarting>;

/// A process's place in its own job: job 0 is the first job, job k the k-th spawned one.
struct job_rank {
  std::uint32_t job = 0;
  std::uint32_t rank = 0;  ///< its rank within that job (its PMIx rank in the job's namespace)
};

/// The job's state machine. Per rank it keeps a few bytes; every event costs O(1) amortized,
/// except the one that starts an abort, which signals every live rank once.
///
/// A session is the first job plus the jobs its ranks spawn (job_spawned). Every process of the
/// session has one process number, the `rank` of every event, action and rank_report: the first
/// job's ranks are 0..N-1, each spawned job's ranks are appended after those of the jobs before
/// it. Where every live rank is walked (an abort, SIGKILL, a forwarded signal, the survivors'
/// notice), hosts come in the first job's node order, then the hosts only spawned jobs use,
/// ascending; on each host, processes ascending.
class PM_API controller {
 public:
  /// `map` must outlive the controller (it is referenced, not copied).
  controller(const rank_map& map, controller_options options);
  ~controller();
  controller(controller&&) noexcept;
  controller& operator=(controller&&) noexcept;

  /// Feeds one event that happened at `now`; appends the resulting actions to `out`. Events
  /// before job_start and after the finish are ignored, as are impossible ones (an unknown rank or
  /// host, a duplicate start, exit or end-of-stream, a cancelled or fired timer): none throws.
  void handle(job_time now, const event& e, std::vector<action>& out);

  bool finished() const noexcept;
  /// The job is being ended (a failure under the abort policy, a signal, the timeout, a cancel):
  /// it takes no spawned job any more.
  bool ending() const noexcept;
  /// The report as of now (final once finished()).
  job_report report() const;
  /// One rank's entry of report(), in O(1): a driver that reports state changes asks for the
  /// ranks an event touched instead of building the whole report. Throws pm::error(internal)
  /// for a rank outside the job.
  rank_report rank_report_of(std::uint32_t rank) const;

  /// Processes of every job so far (the first job's ranks plus every spawned job's).
  std::uint32_t size() const noexcept;
  /// Jobs so far: 1 + the spawned jobs.
  std::uint32_t jobs() const noexcept;
  /// First process of job `job`, and its number of ranks. Throw pm::error(internal) for a job
  /// out of range.
  std::uint32_t job_first(std::uint32_t job) const;
  std::uint32_t job_size(std::uint32_t job) const;
  /// A process's job and its rank within it, in O(log jobs). Throws pm::error(internal) for a
  /// process out of range.
  job_rank job_rank_of(std::uint32_t process) const;
  /// A process's allocation host index. Throws pm::error(internal) for a process out of range.
  std::uint32_t host_of(std::uint32_t process) const;
  /// Processes of every job not ended (pending or running) on allocation host `host`; 0 for an
  /// unknown host. The driver computes a host's free slots from it.
  std::uint32_t live_on_host(std::uint32_t host) const noexcept;
  /// Every job's processes on allocation host `host`, ascending (empty for an unknown host).
  std::vector<std::uint32_t> processes_on_host(std::uint32_t host) const;
  /// How many times `process` was started again alone (controller_options::rank_restarts): 0
  /// for one never restarted or out of range.
  std::uint32_t restarts_of(std::uint32_t process) const noexcept;

 private:
  job_report report(bool with_ranks) const;
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace pm
