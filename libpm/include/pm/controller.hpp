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
  /// Streams each rank has open at start (stdout and stderr: 2; merged: 1; none: 0). The job
  /// finishes only once every stream reached end-of-stream, so that no output is lost.
  std::uint8_t streams_per_rank = 2;
  /// With abort_on_failure off: tell the ranks still alive about each failure of another rank and
  /// about the launcher ending the job (notify_ranks actions; job_runner sets it exactly when the
  /// job has PMIx, job_request::pmix, whose agents turn them into PMIx events, docs/pmix.md
  /// "Events"). Ignored with abort_on_failure.
  bool notify_failures = false;
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
struct host_lost {
  std::uint32_t host;  ///< allocation host index
  std::string reason;  ///< e.g. "no heartbeat for 1.0 s", "agent channel closed"
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
struct abort_requested {
  std::optional<std::uint32_t> rank;
  int status = 1;
  std::string message;
};

/// A rank that had called PMIx_Init (MPI_Init) ended without PMIx_Finalize, by an exit (even 0)
/// or a signal: its peers may wait for it in their next fence for ever, so the job ends, also
/// where the abort policy is off (as under mpirun), with this rank named as the cause (its code,
/// 1 for an exit 0, or 128 + signal).
struct rank_unfinalized {
  std::uint32_t rank;
  exit_status status;
};

using event =
    std::variant<job_start, rank_started, rank_spawn_failed, stream_closed, rank_exited, host_lost,
                 timer_fired, signal_received, abort_requested, rank_unfinalized>;

// ---- actions: what the driver must do -------------------------------------------------------

/// Start these ranks on this host (batched per host).
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
/// The job is over: every rank ended and every stream closed. The driver clears what the ranks
/// left behind (their process groups, the agents), then exits with report.exit_code.
struct finish {
  job_report report;
};

using action = std::variant<spawn, signal_ranks, start_timer, cancel_timer, emit, clear_leftovers,
                            finish, notify_ranks>;

/// The job's state machine. Per rank it keeps a few bytes; every event costs O(1) amortized,
/// except the one that starts an abort, which signals every live rank once.
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
  /// The report as of now (final once finished()).
  job_report report() const;
  /// One rank's entry of report(), in O(1): a driver that reports state changes asks for the
  /// ranks an event touched instead of building the whole report. Throws pm::error(internal)
  /// for a rank outside the job.
  rank_report rank_report_of(std::uint32_t rank) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace pm
