// The simulated world: runs a scenario against the real pm::controller, the real node agent and
// the real agent link (two pm::link::endpoint per host, exchanging bytes over a virtual stream).
//
// Single-threaded; virtual time jumps from one event to the next; every random choice comes
// from one seeded pm::sim::prng, so a seed replays a run exactly (same trace hash). No wall
// clock, no threads, no environment reads. The controller and the per-host agent
// (libpm/src/agent) and the link endpoints (libpm/src/link) are the production objects; sim/ only
// plays the world around them: hosts, byte streams, processes, timers and faults, and checks the
// contract (docs/simulator.md).
//
//   pm::sim::scenario s;
//   s.hosts = 64; s.slots = 8; s.seed = 42;
//   s.set_script(17, pm::sim::parse_script("exit:7@1s"));
//   s.faults.push_back(pm::sim::parse_fault("crash:3@2s"));
//   auto r = pm::sim::run(s);
//   EXPECT_EQ(r.outcome, pm::sim::verdict::ok) << r.explain();
//   EXPECT_EQ(r.report.exit_code, 7);
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pm/env.hpp"
#include "pm/report.hpp"
#include "pm/sim/scenario.hpp"

namespace pm::sim {

/// How a run went, as a failure class (pmsim's exit code).
enum class verdict : std::uint8_t {
  ok,           ///< the job finished and every check of the contract held
  correctness,  ///< the job finished (or ran) against the contract
  liveness,     ///< no events left (or the budget spent) but the job is not finished
  crash,        ///< the controller, the agent or the world threw
};
const char* to_string(verdict v) noexcept;
/// pmsim's exit code for a verdict: 0 ok, 10 crash, 11 liveness, 12 correctness.
int exit_code(verdict v) noexcept;

struct run_options {
  /// Receives the readable trace, one line at a time (null: lines are not even formatted).
  std::function<void(std::string_view line)> trace;
  /// Build each rank's environment at spawn (pm::rank_environment) and hand it to on_spawn.
  std::optional<job_env> env;
  /// Called when a simulated process is started: its rank, host and environment (empty
  /// unless `env` is set).
  std::function<void(std::uint32_t rank, std::uint32_t host, const std::vector<std::string>& env)>
      on_spawn;
  /// For testing the checks themselves: edits the controller's actions (after it handled an
  /// event, before the world carries them out), i.e. a controller bug on purpose. A check that
  /// never fails proves nothing; tests/sim/sim_checks_test.cpp shows each one catching a bug.
  std::function<void(std::vector<action>& actions)> tamper_actions;
  /// For tests that compare worlds (tests/multihost/differential_test.cpp): every decision the
  /// launcher machine and its controller make about a host, one short line each, no times
  /// ("spawn [0 1]", "signal [2] SIGTERM", "open 1", "retry", "lost", "given up"), and the job's
  /// finish ("finish 7 rank_failed") with `host` = UINT32_MAX (pm::launch::job_wide). The same
  /// lines pmrun appends to PM_TEST_DECISION_LOG (pm::launch::launch_config::decisions).
  std::function<void(std::uint32_t host, const std::string& decision)> decisions;
  /// Limits: a run that needs more is a liveness failure. 0: 64 events per rank + 1,000,000.
  std::uint64_t max_events = 0;
  sim_time max_time{std::chrono::hours(24)};
};

/// What the run saw, for properties (RC_CLASSIFY) and the CLI.
struct run_stats {
  std::uint64_t events = 0;  ///< world events processed
  std::uint64_t controller_events = 0;
  std::uint64_t actions = 0;
  std::array<std::uint32_t, fault_kind_count> faults_fired{};  ///< faults that took effect
  std::uint32_t partitions_healed = 0;    ///< partitions that ended before anyone noticed
  std::uint32_t timers_after_cancel = 0;  ///< timer_fired delivered after its cancel_timer
  std::uint32_t exits_before_streams = 0;
  std::uint32_t streams_before_exit = 0;
  std::uint32_t sigkills = 0;   ///< ranks the controller sent SIGKILL
  std::uint32_t leftovers = 0;  ///< ranks whose leftovers the job had to clear
  std::uint32_t notices = 0;    ///< notify_ranks the controller sent (notify_failures, no abort)
  /// Hosts lost before their agent's hello (a set-up failure, exit 125: the job ends whatever
  /// the abort policy), and hosts the launcher gave up before their hello because the job was
  /// ending (give_up_setup).
  std::uint32_t lost_before_hello = 0;
  std::uint32_t given_up_in_setup = 0;
  std::uint32_t spawns_withdrawn = 0;  ///< ranks the launcher never started: the job was ending
  std::uint64_t link_bytes = 0;        ///< bytes the agent links carried, both ways
  std::uint64_t link_ticks = 0;        ///< timer events of the link endpoints (heartbeats, silence)
  std::uint32_t relayed_hosts = 0;     ///< child_open: agents started by another host's agent
  // The simulated ranks' PMIx calls (scripts' fence, spawn, abort; docs/simulator.md).
  std::uint32_t pmix_fences = 0;        ///< fence calls of ranks
  std::uint32_t pmix_aborts = 0;        ///< PMIx_Abort calls of ranks
  std::uint32_t pmix_spawns = 0;        ///< PMIx_Spawn calls of ranks
  std::uint32_t pmix_spawned_jobs = 0;  ///< spawns that succeeded (their callers were told so)
  std::uint32_t unfinalized = 0;  ///< ranks reported ended without PMIx_Finalize (rank_unfinalized)

  // Connect-back (scenario::connect_back):
  std::uint32_t calls = 0;            ///< calls the launcher judged (duplicates included)
  std::uint32_t callers_refused = 0;  ///< callers its caller_gate refused
};

/// A host the launcher declared lost: its end of the agent link went down before the job's end.
struct host_loss {
  std::uint32_t host = 0;
  sim_time at{0};
  std::string reason;         ///< the link endpoint's, e.g. "no word from the agent for 3.0 s"
  bool before_hello = false;  ///< its agent never said hello: a set-up failure (125)
};

/// An agent that lost its launcher (silence, or the launcher closed the link) and ended its
/// ranks by itself.
struct agent_loss {
  std::uint32_t host = 0;
  sim_time at{0};       ///< when its end of the link went down
  sim_time cleared{0};  ///< when the last process of the job on its host ended (>= at)
  std::string reason;
};

struct run_result {
  verdict outcome = verdict::ok;
  std::vector<std::string> problems;  ///< what broke, one line each (empty when ok)
  bool finished = false;              ///< the controller emitted finish
  job_report report;                  ///< the controller's report (as of the end)
  std::vector<std::string> lines;     ///< emit actions, in order
  std::uint64_t trace_hash = 0;       ///< FNV-1a over every traced record
  sim_time finish_time{0};            ///< when finish came out
  sim_time end_time{0};               ///< the last event (agents done)
  run_stats stats;
  std::vector<host_loss> hosts_lost;    ///< in the order the launcher noticed them
  std::vector<agent_loss> agents_lost;  ///< in the order the agents noticed
  /// The incarnations the launcher restarted (scenario::restarts), in order (restarting actions).
  std::vector<incarnation_report> restarts;
  /// --enable-recovery: the ranks the launcher started again alone, in order.
  std::vector<rank_restart_report> rank_restarts;
  std::string replay;  ///< the command that replays this run

  /// Seed, verdict, problems and the replay command, as a message for a failed test.
  std::string explain() const;
};

/// Runs the scenario. Bad input (a job that does not fit, a fault naming a missing host or
/// rank) throws pm::error; everything that goes wrong during the run is in the result.
run_result run(const scenario& s, const run_options& options = {});

/// "0x0123456789abcdef".
std::string hash_text(std::uint64_t hash);

}  // namespace pm::sim
