// job_report: how a job ended, for humans (one line) and programs (JSON).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pm/exit_status.hpp"
#include "pm/export.hpp"

namespace pm {

/// The launcher's exit codes beyond the ranks' own (docs/exit-codes.md).
namespace exit_codes {
inline constexpr int success = 0;
inline constexpr int usage = 2;      ///< bad command line or input file: nothing started
inline constexpr int timeout = 124;  ///< --timeout expired (as coreutils timeout)
/// the launcher could not run the job: its own failure, or an agent that never said hello
inline constexpr int launch_failed = 125;
inline constexpr int not_executable = 126;
inline constexpr int not_found = 127;
inline constexpr int host_lost = 213;  ///< a host (its agent) was lost
inline constexpr int stalled = 214;    ///< --stall-timeout: no rank progressed for that long
}  // namespace exit_codes

enum class rank_state : std::uint8_t {
  pending,       ///< not started yet
  running,       ///< started, not ended
  exited,        ///< ended by itself (any code or signal)
  killed,        ///< ended by the job's abort (does not count as a failure)
  spawn_failed,  ///< could not be started
  lost,          ///< its host was lost
  not_started,   ///< never started: the job ended before its spawn went out (spawn_withdrawn)
};
PM_API const char* to_string(rank_state s) noexcept;

/// What ended the job (its first failure, a signal, a timeout), if anything.
enum class cause_kind : std::uint8_t {
  none,             ///< every rank succeeded
  rank_failed,      ///< a rank exited non-zero or was killed by a signal
  spawn_failed,     ///< a rank could not be started
  abort_requested,  ///< a rank called abort (PMIx_Abort/MPI_Abort) or the embedder cancelled
  host_lost,        ///< a host was lost
  signal,           ///< the launcher received SIGINT/SIGTERM/SIGHUP
  timeout,          ///< --timeout
  stalled,          ///< --stall-timeout: no rank progressed for that long
};
PM_API const char* to_string(cause_kind k) noexcept;

struct rank_report {
  std::uint32_t rank = 0;      ///< its process number: the first job's rank, or after (spawned)
  std::uint32_t job = 0;       ///< 0: the first job; k: the k-th job spawned (MPI_Comm_spawn)
  std::uint32_t job_rank = 0;  ///< its rank within its job (== rank for job 0)
  std::uint32_t host = 0;
  rank_state state = rank_state::pending;
  std::optional<exit_status> status;  ///< when it ended
  std::int64_t pid = 0;
  std::optional<std::chrono::nanoseconds> started_at, ended_at;  ///< driver time stamps
  std::string reason;  ///< why it could not start / its abort message / why its host was lost
};

/// What a rank of the first job was given on its host (docs/gpus.md), when the job planned its
/// hosts (--bind-to, --gpus-per-rank, --map-by core, --report-bindings, ...).
struct rank_resources {
  std::string cpus = {};  ///< the PUs it is bound to, a cpu list ("0-3,8"); empty: unbound
  std::vector<std::uint32_t> gpus = {};  ///< as its vendor numbers them (CUDA_VISIBLE_DEVICES)
  std::string nic = {};  ///< its nearest NIC where the host has several; empty: none named
  friend bool operator==(const rank_resources&, const rank_resources&) = default;
};

/// How one incarnation of a launch that may restart ended (docs/resilience.md): the first run is
/// incarnation 0, each restart in place starts the next.
struct incarnation_report {
  std::uint32_t number = 0;
  int exit_code = 0;
  cause_kind cause = cause_kind::none;
  std::optional<std::uint32_t> failed_rank;  ///< as job_report::failed_rank
  std::optional<std::uint32_t> failed_host;  ///< its host (allocation index)
  std::string summary;                       ///< its failure's line ("" for a success)
  std::uint32_t ranks_failed = 0;
  std::uint32_t ranks_killed = 0;
  std::uint32_t size = 0;   ///< its ranks (fewer after a shrink: restart_policy::min_hosts)
  std::uint32_t hosts = 0;  ///< the hosts they ran on
  std::optional<std::chrono::nanoseconds> started_at, ended_at;  ///< driver time stamps
  friend bool operator==(const incarnation_report&, const incarnation_report&) = default;
};

/// A host a launch that restarts stopped using (docs/resilience.md, "Spare hosts").
struct quarantined_host {
  std::uint32_t host = 0;         ///< allocation index
  std::string reason;             ///< why it was lost
  std::uint32_t incarnation = 0;  ///< the incarnation it was lost in
  /// Its name: a host a discovery command named may be in no incarnation's map the report keeps.
  std::string name;
  friend bool operator==(const quarantined_host&, const quarantined_host&) = default;
};

/// One rank started again alone (--enable-recovery, docs/resilience.md "Recovering single
/// ranks"): its process failed and the job went on with a new process for it.
struct rank_restart_report {
  std::uint32_t number = 0;  ///< the launch's count: restart k is "k of N" (1, 2, ...)
  std::uint32_t rank = 0;
  std::uint32_t host = 0;   ///< allocation index
  std::uint32_t count = 0;  ///< this rank's own count (1: its first restart)
  exit_status status;       ///< how the failed process ended
  std::string summary;      ///< its failure's line, "rank 3 on node2 exited with code 7"
  std::optional<std::chrono::nanoseconds> at;  ///< driver time stamp of the failure
  friend bool operator==(const rank_restart_report&, const rank_restart_report&) = default;
};

struct job_report {
  int exit_code = 0;
  cause_kind cause = cause_kind::none;
  /// The rank of the first failure, if a rank; for a lost host, its lowest-numbered lost rank.
  /// A process number (rank_report::rank): ranks[*failed_rank] says its job and job rank.
  std::optional<std::uint32_t> failed_rank;
  std::optional<std::uint32_t> failed_host;  ///< its host (allocation index)
  std::optional<exit_status> failed_status;
  int signal = 0;                  ///< for cause signal: the launcher should end by it
  std::string summary;             ///< one human line, e.g. "rank 3 on node2 exited with code 7"
  std::uint32_t ranks_failed = 0;  ///< ranks that failed by themselves (not killed by the abort)
  std::uint32_t ranks_killed = 0;  ///< ranks ended by the abort
  std::vector<std::string> host_names;  ///< allocation host names, for rendering
  std::vector<rank_report> ranks;
  /// By rank of the first job; empty when the job did not plan its hosts (nothing bound, no GPUs).
  std::vector<rank_resources> resources = {};
  /// A launch that may restart (job_request::restarts.max_restarts > 0): every incarnation in
  /// order, the last one included (the rest of this report is the last one's). Empty otherwise.
  std::vector<incarnation_report> incarnations = {};
  /// Hosts lost during a launch that may restart, never used again in it (spares took their
  /// ranks, or the job went on with fewer hosts: restart_policy::min_hosts).
  std::vector<quarantined_host> quarantined = {};
  /// With --enable-recovery (restart_policy::per_rank): every rank restarted alone, in order.
  std::vector<rank_restart_report> rank_restarts = {};
  /// The launch had --enable-recovery: the JSON has `restarts` and `rank_restarts` (also when
  /// no rank was restarted).
  bool recovery = false;
};

/// The report as JSON (a stable schema documented in docs/failure-semantics.md).
PM_API std::string to_json(const job_report& report);

}  // namespace pm
