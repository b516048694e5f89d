// The simulator on hand-written scenarios: exact outcomes, lines, messages and replay commands.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>

#include "pm/error.hpp"
#include "pm/sim/random.hpp"
#include "pm/sim/world.hpp"

namespace {

using namespace std::chrono_literals;
using pm::sim::parse_fault;
using pm::sim::parse_script;
using pm::sim::scenario;
using pm::sim::verdict;

scenario cluster(std::uint32_t hosts, std::uint32_t slots, std::uint64_t seed = 7) {
  scenario s;
  s.hosts = hosts;
  s.slots = slots;
  s.seed = seed;
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pm::error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SimScenario, FailingRankAbortsTheJobWithItsCode) {
  auto s = cluster(8, 2);
  s.set_script(3, parse_script("exit:7@1s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.report.exit_code, 7);
  EXPECT_EQ(r.report.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.report.failed_rank, 3u);
  EXPECT_EQ(r.report.failed_host, 1u);
  EXPECT_EQ(r.report.summary, "rank 3 on node1 exited with code 7");
  EXPECT_EQ(r.report.ranks_killed, 15u);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0],
            "rank 3 on node1 exited with code 7; aborting the job (SIGTERM to 15 ranks)");
  // The abort ends the job soon after the failure, long before the others' 10 s run time.
  EXPECT_GT(r.finish_time, 1s);
  EXPECT_LT(r.finish_time, 1100ms);
}

// --enable-recovery: rank 3 fails once and starts again alone; nobody else is touched.
TEST(SimScenario, ARecoveredRankStartsAgainAloneAndTheJobSucceeds) {
  auto s = cluster(8, 2);
  s.set_script(3, parse_script("exit:7@1s"));
  s.enable_recovery = true;
  s.max_restarts = 2;
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.report.cause, pm::cause_kind::none);
  EXPECT_EQ(r.report.ranks_killed, 0u);
  ASSERT_EQ(r.rank_restarts.size(), 1u);
  EXPECT_EQ(r.rank_restarts[0].rank, 3u);
  EXPECT_EQ(r.rank_restarts[0].host, 1u);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0], "restarting rank 3 on node1 (1 of 2): rank 3 on node1 exited with code 7");
  EXPECT_TRUE(r.restarts.empty());
  // Every incarnation of the script fails: the budget is spent, then the abort.
  s.scripts_every_incarnation = true;
  const auto spent = pm::sim::run(s);
  ASSERT_EQ(spent.outcome, verdict::ok) << spent.explain();
  EXPECT_EQ(spent.report.exit_code, 7);
  EXPECT_EQ(spent.rank_restarts.size(), 2u);
  EXPECT_EQ(spent.report.ranks_killed, 15u);
  const auto args = s.to_args();
  EXPECT_NE(std::find(args.begin(), args.end(), "--enable-recovery"), args.end());
}

TEST(SimScenario, SameSeedSameTraceOtherSeedOtherTrace) {
  auto s = cluster(16, 4, 42);
  s.set_script(9, parse_script("signal:11@2s"));
  const auto a = pm::sim::run(s);
  const auto b = pm::sim::run(s);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.stats.events, b.stats.events);
  s.seed = 43;
  const auto c = pm::sim::run(s);
  EXPECT_NE(a.trace_hash, c.trace_hash);
  EXPECT_EQ(c.report.exit_code, 128 + SIGSEGV);
}

TEST(SimScenario, TraceDumpIsReadableAndDoesNotChangeTheHash) {
  auto s = cluster(2, 1);
  s.set_script(1, parse_script("exit:3@1s"));
  std::vector<std::string> lines;
  pm::sim::run_options o;
  o.trace = [&](std::string_view l) { lines.emplace_back(l); };
  const auto traced = pm::sim::run(s, o);
  const auto quiet = pm::sim::run(s);
  EXPECT_EQ(traced.trace_hash, quiet.trace_hash);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "     0.000000000 <- job_start");
  EXPECT_EQ(lines[1], "     0.000000000 -> spawn host=0 ranks=[0]");
  bool saw_exit = false, saw_finish = false;
  for (const auto& l : lines) {
    saw_exit |= l.find("<- rank_exited rank=1 exited with code 3") != std::string::npos;
    saw_finish |=
        l.find("-> finish exit_code=3 cause=rank_failed rank 1 on node1 exited with code 3") !=
        std::string::npos;
  }
  EXPECT_TRUE(saw_exit);
  EXPECT_TRUE(saw_finish);
}

TEST(SimScenario, RankThatIgnoresSigtermGetsSigkillAfterTheGrace) {
  auto s = cluster(2, 2);
  s.set_script(0, parse_script("exit:1@1s"));
  s.set_script(2, parse_script("hang+ignore-term"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.stats.sigkills, 1u);
  EXPECT_EQ(r.report.ranks[2].state, pm::rank_state::killed);
  EXPECT_EQ(r.report.ranks[2].status, pm::exit_status::signaled(SIGKILL));
  EXPECT_EQ(r.report.ranks[1].status, pm::exit_status::signaled(SIGTERM));
  // SIGKILL comes with the 3 s grace, not before.
  EXPECT_GE(r.finish_time, 4s);
}

// The driver's race: the grace timer is cancelled when the last rank ends, but its handler was
// already queued, so timer_fired reaches the controller after cancel_timer (and after finish).
// Some seeds must take that path, and the controller must ignore the stale timer.
TEST(SimScenario, CancelledTimerThatStillFiresIsIgnored) {
  int raced = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    auto s = cluster(4, 2, seed);
    s.set_script(3, parse_script("exit:7@1s"));
    std::vector<std::string> lines;
    pm::sim::run_options o;
    o.trace = [&](std::string_view l) { lines.emplace_back(l); };
    const auto r = pm::sim::run(s, o);
    ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
    EXPECT_EQ(r.report.exit_code, 7);
    EXPECT_EQ(r.stats.sigkills, 0u);
    if (r.stats.timers_after_cancel == 0) continue;
    ++raced;
    // The grace timer is cancelled in the step that finishes the job, so its late firing comes
    // after the finish: the launcher machine takes it there (a controller timer after the finish
    // is dropped, launcher.cpp), as job_runner does. Before the finish the controller would get
    // it and must not act on it.
    const auto npos = lines.size();
    std::size_t cancel = npos, finish = npos;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (cancel == npos && lines[i].find("-> cancel_timer") != std::string::npos) cancel = i;
      if (lines[i].find("-> finish") != std::string::npos) finish = i;
      if (lines[i].find("<- timer_fired") != std::string::npos && i + 1 < lines.size()) {
        EXPECT_EQ(lines[i + 1].find("-> "), std::string::npos) << "seed " << seed << ": " << i;
      }
    }
    ASSERT_LT(cancel, npos) << "seed " << seed;
    ASSERT_LT(finish, npos) << "seed " << seed;
    EXPECT_GT(finish, cancel) << "seed " << seed;
    for (std::size_t i = finish; i < lines.size(); ++i)
      EXPECT_EQ(lines[i].find("<- "), std::string::npos) << "seed " << seed << ": " << lines[i];
  }
  // One in four cancels races; 40 seeds without one would be a broken model (p < 1e-4).
  EXPECT_GT(raced, 0);
  EXPECT_LT(raced, 40);
}
TEST(SimScenario, CrashedHostIsLostWithinTheDetectionTime) {
  auto s = cluster(4, 2);
  s.faults.push_back(parse_fault("crash:1@2s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::host_lost);
  EXPECT_EQ(r.report.cause, pm::cause_kind::host_lost);
  EXPECT_EQ(r.report.failed_host, 1u);
  EXPECT_EQ(r.report.ranks[2].state, pm::rank_state::lost);
  EXPECT_EQ(r.report.ranks[3].state, pm::rank_state::lost);
  ASSERT_EQ(r.lines.size(), 1u);
  // The launcher closes the link and waits for ssh's end for its words: ssh to a crashed host
  // does not end by itself, so the transport's stop sequence kills it after 200 ms.
  EXPECT_EQ(r.lines[0],
            "host node1 was lost (no word from the agent for 3.0 s (ssh was killed by SIGTERM)); "
            "its 2 ranks failed; aborting the job (SIGTERM to 6 ranks)");
  EXPECT_EQ(r.stats.faults_fired[0], 1u);
  EXPECT_LE(r.finish_time, 2s + 3s + 150us + 2ms);
}

TEST(SimScenario, LongPartitionLosesTheHostAndItsAgentKillsTheOldRanks) {
  auto s = cluster(3, 2);
  s.set_script(4, parse_script("hang+ignore-term"));  // on node2, the partitioned host
  s.faults.push_back(parse_fault("partition:2@1s-20s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::host_lost);
  EXPECT_EQ(r.report.failed_host, 2u);
  EXPECT_EQ(r.stats.partitions_healed, 0u);
  // The agent gives up on the launcher, SIGTERMs, then SIGKILLs after its 1 s grace; the world
  // checks that nothing ran past that (else the verdict would be a correctness failure).
}

TEST(SimScenario, ShortPartitionOnlyDelays) {
  auto s = cluster(3, 2);
  s.faults.push_back(parse_fault("partition:2@1s-2s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.stats.partitions_healed, 1u);
}

TEST(SimScenario, SpawnFailureIsTheCause) {
  auto s = cluster(2, 2);
  s.faults.push_back(parse_fault("spawn-fail:3"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 127);
  EXPECT_EQ(r.report.cause, pm::cause_kind::spawn_failed);
  EXPECT_EQ(r.report.summary,
            "rank 3 on node1 could not start: cannot execute 'app': No such file or directory");
}

TEST(SimScenario, AgentThatDoesNotStartIsASetUpFailure) {
  auto s = cluster(3, 1);
  s.faults.push_back(parse_fault("agent-fail:2"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  // Its agent never said hello: the launch fails (125), it is not a lost host (213).
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::launch_failed);
  EXPECT_EQ(r.report.cause, pm::cause_kind::spawn_failed);
  EXPECT_EQ(r.report.failed_host, 2u);
  // ssh's words for a host where pmd cannot start (exit 127, ssh_end), as the real launcher
  // reports them.
  EXPECT_EQ(r.report.summary,
            "the agent on node2 did not start (pmd was not found on node2 at pmd (install it "
            "there, or use --prefix or --launch-agent): bash: pmd: command not found); its 1 rank "
            "could not start");
}

TEST(SimScenario, SshThatEndsWith255IsRetriedAndTheNextAttemptReachesTheHost) {
  auto s = cluster(3, 1);
  s.faults.push_back(parse_fault("ssh-fail:1"));
  s.faults.push_back(parse_fault("ssh-fail:1"));
  std::vector<std::string> decided;
  pm::sim::run_options o;
  o.decisions = [&](std::uint32_t host, const std::string& d) {
    if (host == 1) decided.push_back(d);
  };
  const auto r = pm::sim::run(s, o);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0) << r.report.summary;
  EXPECT_EQ(r.stats.faults_fired[static_cast<int>(pm::sim::fault_kind::ssh_failure)], 2u);
  EXPECT_EQ(decided, (std::vector<std::string>{"spawn [1]", "open 1", "retry", "open 2", "retry",
                                               "open 3", "greeted"}));
  // Four failures are one more than the retries (3): a set-up failure in ssh's words.
  for (int i = 0; i < 2; ++i) s.faults.push_back(parse_fault("ssh-fail:1"));
  const auto lost = pm::sim::run(s);
  ASSERT_EQ(lost.outcome, verdict::ok) << lost.explain();
  EXPECT_EQ(lost.report.exit_code, pm::exit_codes::launch_failed);
  EXPECT_NE(lost.report.summary.find("Connection reset by peer"), std::string::npos)
      << lost.report.summary;
}

TEST(SimScenario, RankZerosHostSilentBeforeItsHelloFailsTheLaunchAtItsDeadline) {
  // node0 holds rank 0: the launch facts wait for its hello, so every other host's spawns are
  // held. When its deadline passes, the launch fails at once and nothing else ever started.
  auto s = cluster(4, 2);
  s.faults.push_back(parse_fault("silent:0"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::launch_failed);
  EXPECT_EQ(r.report.summary,
            "the agent on node0 did not start (no hello from the agent within 20.0 s (ssh was "
            "killed by SIGTERM)); its 2 ranks could not start");
  EXPECT_EQ(r.lines.size(), 1u);  // one line: nothing was running to abort
  for (const auto& rr : r.report.ranks) {
    EXPECT_EQ(rr.state, rr.host == 0 ? pm::rank_state::spawn_failed : pm::rank_state::not_started)
        << rr.rank;
    EXPECT_EQ(rr.pid, 0) << rr.rank;
  }
  // The deadline, then ssh's stop (SIGTERM after 200 ms: a silent host's ssh hangs), whose end
  // the launcher waits for.
  EXPECT_LT(r.finish_time, 20s + 200ms + 10ms);
}

TEST(SimScenario, ASignalDuringTheSetUpEndsTheLaunchAtOnceAlsoWithASilentHost) {
  // Ctrl-C 5 ms in: no agent has said hello yet (an agent hop is 20 ms), node3 never will. The
  // launcher gives up every link still being set up and ends within a link's latency.
  auto s = cluster(4, 2);
  s.faults.push_back(parse_fault("silent:3"));
  s.faults.push_back(parse_fault("launcher-signal:INT@5ms"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.report.cause, pm::cause_kind::signal);
  EXPECT_EQ(r.report.exit_code, 128 + SIGINT);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_EQ(r.lines[0], "interrupted by SIGINT");  // nothing ran: no "SIGINT to N ranks"
  for (const auto& rr : r.report.ranks) EXPECT_EQ(rr.state, pm::rank_state::not_started);
  EXPECT_LT(r.finish_time, 6ms);
  EXPECT_TRUE(r.hosts_lost.empty());  // given up, not lost
}

// --stall-timeout (docs/resilience.md, "Stalls"): rank 5 stops at 1 s. While the others run
// the job progresses; once they ended, node2 (ranks 4 and 5) holds the only live rank, quiet
// since 1 s: the launcher names it and the job ends, cause stalled, 214.
TEST(SimScenario, AStalledRankIsNamedOnceEveryOtherRankEnded) {
  auto s = cluster(4, 2, 3);
  s.control.stall_timeout = 2s;
  s.faults.push_back(parse_fault("stall:5@1s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.report.cause, pm::cause_kind::stalled);
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::stalled);
  EXPECT_EQ(r.report.ranks[5].state, pm::rank_state::killed);
  EXPECT_EQ(r.stats.faults_fired[static_cast<int>(pm::sim::fault_kind::stall)], 1u);
  ASSERT_GE(r.lines.size(), 2u);
  EXPECT_TRUE(r.lines[0].starts_with("stalled on node2: rank 5 (pid ")) << r.lines[0];
  EXPECT_NE(r.lines[0].find(", S in stalled, cpu 1.00 s, last output "), std::string::npos)
      << r.lines[0];
  EXPECT_EQ(r.lines[1],
            "no rank progressed for 2 s (--stall-timeout); aborting the job (SIGTERM to 1 rank)");
  // After the last other rank ended (about 10 s: the default run time), within a look or two.
  std::int64_t last_other = 0;
  for (const auto& rr : r.report.ranks) {
    if (rr.rank != 5 && rr.ended_at) last_other = std::max(last_other, rr.ended_at->count());
  }
  EXPECT_GE(last_other, std::chrono::nanoseconds(10s).count());
  EXPECT_LT(r.finish_time.count() - last_other, std::chrono::nanoseconds(1s).count());
  EXPECT_NE(r.replay.find("--stall-timeout 2s"), std::string::npos) << r.replay;
  EXPECT_NE(r.replay.find("--fault stall:5@1s"), std::string::npos) << r.replay;
  // The same seed, the same run.
  EXPECT_EQ(pm::sim::run(s).trace_hash, r.trace_hash);
}

// Without a stall timeout nothing can end a stalled job: a loud liveness failure.
TEST(SimScenario, AStallWithoutATimeoutIsALivenessFailure) {
  auto s = cluster(2, 2, 5);
  s.faults.push_back(parse_fault("stall:1@1s"));
  EXPECT_EQ(pm::sim::run(s).outcome, verdict::liveness);
}

TEST(SimScenario, LostExitNotificationIsALoudLivenessFailure) {
  auto s = cluster(2, 2, 5);
  s.faults.push_back(parse_fault("lost-exit:1"));
  const auto r = pm::sim::run(s);
  EXPECT_EQ(r.outcome, verdict::liveness);
  EXPECT_FALSE(r.finished);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems[0].find("no events left, but the job is not finished: 1 rank not ended "
                               "(e.g. rank 1, running as the controller sees it)"),
            std::string::npos)
      << r.problems[0];
  EXPECT_NE(
      r.explain().find("replay: build/bin/pmsim --hosts 2 --slots 2 --fault lost-exit:1 --seed 5"),
      std::string::npos)
      << r.explain();
  EXPECT_EQ(pm::sim::exit_code(r.outcome), 11);
}

TEST(SimScenario, WithoutAbortTheOthersRunToCompletion) {
  auto s = cluster(4, 2);
  s.control.abort_on_failure = false;
  s.set_script(5, parse_script("exit:9@1s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 9);
  EXPECT_EQ(r.report.ranks_killed, 0u);
  for (const auto& rr : r.report.ranks) {
    EXPECT_EQ(rr.state, pm::rank_state::exited);
    if (rr.rank != 5) {
      EXPECT_EQ(rr.status, pm::exit_status::exited(0));
    }
  }
  EXPECT_GT(r.finish_time, 10s);
}

TEST(SimScenario, WithoutAbortEveryHostWithLiveRanksIsToldOfTheFailure) {
  auto s = cluster(4, 2);
  s.control.abort_on_failure = false;
  s.control.notify_failures = true;
  s.set_script(5, parse_script("exit:9@1s"));
  const auto r = pm::sim::run(s);
  // The agents take the notices (no protocol error), and the job runs on as without them.
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 9);
  EXPECT_EQ(r.report.ranks_killed, 0u);
  EXPECT_EQ(r.stats.notices, 4u);  // rank 5's host still has rank 4
  EXPECT_NE(r.replay.find("--no-abort --notify-failures"), std::string::npos) << r.replay;
  // An explicit abort: every host is told before the stop sequence.
  auto a = cluster(2, 2);
  a.control.abort_on_failure = false;
  a.control.notify_failures = true;
  a.set_script(2, parse_script("abort:4@1s"));
  const auto ra = pm::sim::run(a);
  ASSERT_EQ(ra.outcome, verdict::ok) << ra.explain();
  EXPECT_EQ(ra.report.exit_code, 4);
  EXPECT_EQ(ra.stats.notices, 2u);
}

TEST(SimScenario, AbortCallEndsTheJobWithItsStatus) {
  auto s = cluster(2, 2);
  s.control.abort_on_failure = false;  // an explicit abort ends the job anyway
  s.set_script(2, parse_script("abort:4@1s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 4);
  EXPECT_EQ(r.report.cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.report.failed_rank, 2u);
}

// ---- PMIx in the simulated ranks: the host machine's PMIx relay and the launcher's routing ----

TEST(SimScenario, FencesOfEveryRankCrossHostsAndTheJobSucceeds) {
  auto s = cluster(4, 2);
  s.default_script = parse_script("exit:0@2s+fence@100ms+fence@1s");
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.stats.pmix_fences, 16u);
  EXPECT_GT(r.finish_time, 2s);
  // One host: the server completes its fences itself.
  auto one = cluster(1, 4);
  one.default_script = s.default_script;
  const auto r1 = pm::sim::run(one);
  ASSERT_EQ(r1.outcome, verdict::ok) << r1.explain();
  EXPECT_EQ(r1.report.exit_code, 0);
  EXPECT_EQ(r1.stats.pmix_fences, 8u);
}

TEST(SimScenario, RanksWaitingInAFenceForAFailedRankAreAborted) {
  auto s = cluster(3, 2);
  s.default_script = parse_script("exit:0@1s+fence@500ms");
  s.set_script(4, parse_script("exit:3@200ms"));  // never reaches the fence
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 3);
  EXPECT_EQ(r.report.failed_rank, 4u);
  EXPECT_LT(r.finish_time, 300ms);
}

TEST(SimScenario, ARankThatDiesWithoutFinalizeEndsTheJobAlsoWithAbortOff) {
  auto s = cluster(2, 2);
  s.control.abort_on_failure = false;
  s.default_script = parse_script("exit:0@3s+fence@100ms");
  s.set_script(1, parse_script("signal:9@1s+fence@100ms"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 137);
  EXPECT_EQ(r.report.failed_rank, 1u);
  EXPECT_NE(r.report.summary.find("without calling MPI_Finalize"), std::string::npos)
      << r.report.summary;
  EXPECT_LT(r.finish_time, 2s);
}

TEST(SimScenario, PmixAbortOfAFencingJobEndsItWithItsStatus) {
  auto s = cluster(3, 2);
  s.default_script = parse_script("fence@100ms");
  s.set_script(3, parse_script("abort:42@1s+fence@100ms"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 42);
  EXPECT_EQ(r.report.cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.report.failed_rank, 3u);
  EXPECT_EQ(r.stats.pmix_aborts, 1u);
}

TEST(SimScenario, CommSpawnPlacesTheNewJobOnAnotherHostsFreeSlots) {
  auto s = cluster(2, 4);
  s.np = 4;  // node0 full, node1 free
  s.set_script(0, parse_script("exit:0@3s+spawn:2@500ms"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.stats.pmix_spawns, 1u);
  EXPECT_EQ(r.stats.pmix_spawned_jobs, 1u);
  ASSERT_EQ(r.report.ranks.size(), 6u);
  for (const auto& rr : r.report.ranks) {
    EXPECT_EQ(rr.state, pm::rank_state::exited) << rr.rank;
    if (rr.rank >= 4) {
      EXPECT_EQ(rr.host, 1u) << rr.rank;
    }
  }
  // No free slot: the spawn is refused, the caller goes on.
  auto full = cluster(2, 2);
  full.set_script(0, parse_script("exit:0@2s+spawn:2@500ms"));
  const auto rf = pm::sim::run(full);
  ASSERT_EQ(rf.outcome, verdict::ok) << rf.explain();
  EXPECT_EQ(rf.report.exit_code, 0);
  EXPECT_EQ(rf.stats.pmix_spawned_jobs, 0u);
  EXPECT_EQ(rf.report.ranks.size(), 4u);
}

TEST(SimScenario, TheTreeRelayIsTheHostMachinesChildRelay) {
  auto s = cluster(20, 2);
  s.latency.fanout = 2;
  s.default_script = parse_script("exit:0@2s+fence@1s");
  s.faults.push_back(parse_fault("crash:1@1500ms"));  // relays part of the tree
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_GT(r.stats.relayed_hosts, 10u);
  EXPECT_EQ(r.report.cause, pm::cause_kind::host_lost);
  EXPECT_EQ(r.stats.pmix_fences, 40u);
  EXPECT_EQ(pm::sim::run(s).trace_hash, r.trace_hash);
}

TEST(SimScenario, LeftoverChildHoldingTheStreamsIsCleared) {
  auto s = cluster(1, 2);
  s.set_script(1, parse_script("exit:0@1s+leftover+out=100"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.stats.leftovers, 1u);
}

TEST(SimScenario, EnvironmentFollowsTheContract) {
  auto s = cluster(3, 2);
  s.mapping.by = pm::map_by::node;
  pm::sim::run_options o;
  o.env = pm::job_env{};
  std::map<std::uint32_t, std::vector<std::string>> seen;
  o.on_spawn = [&](std::uint32_t rank, std::uint32_t, const std::vector<std::string>& env) {
    seen[rank] = env;
  };
  const auto r = pm::sim::run(s, o);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_EQ(seen.size(), 6u);
  const auto has = [&](std::uint32_t rank, const std::string& var) {
    const auto& env = seen[rank];
    return std::find(env.begin(), env.end(), var) != env.end();
  };
  // map-by node: rank 4 is the second rank on node1.
  EXPECT_TRUE(has(4, "OMPI_COMM_WORLD_RANK=4"));
  EXPECT_TRUE(has(4, "OMPI_COMM_WORLD_LOCAL_RANK=1"));
  EXPECT_TRUE(has(4, "NODE_RANK=1"));
  EXPECT_TRUE(has(4, "WORLD_SIZE=6"));
}

TEST(SimScenario, BadFaultsAndScriptsAreUsageErrors) {
  auto s = cluster(2, 2);
  s.faults.push_back(parse_fault("crash:5@1s"));
  EXPECT_EQ(message_of([&] { pm::sim::run(s); }),
            "fault 'crash:5@1s': no host 5 (the cluster has 2 hosts)");
  EXPECT_EQ(message_of([] { parse_fault("crash:1"); }),
            "fault 'crash:1': a crash needs a time, e.g. crash:3@1s");
  EXPECT_EQ(message_of([] { parse_fault("partition:1@2s-1s"); }),
            "fault 'partition:1@2s-1s': the partition must end after it begins");
  EXPECT_EQ(message_of([] { parse_fault("flood:1"); }),
            "fault 'flood:1': unknown kind 'flood' (crash, partition, spawn-fail, agent-fail, "
            "lost-exit, launcher-signal, forged-call, dup-call, late-call, lost-call, silent, "
            "ssh-fail, stall)");
  EXPECT_EQ(message_of([] { parse_fault("stall:1"); }),
            "fault 'stall:1': a stall needs a time, e.g. stall:3@1s");
  EXPECT_EQ(message_of([] { parse_fault("launcher-signal:KILL@1s"); }),
            "fault 'launcher-signal:KILL@1s': 'KILL' is not a signal the launcher handles (INT, "
            "TERM, HUP, USR1, USR2, TSTP, CONT)");
  EXPECT_EQ(message_of([] { parse_fault("launcher-signal:INT"); }),
            "fault 'launcher-signal:INT': a launcher signal needs a time, e.g. "
            "launcher-signal:INT@2s");
  EXPECT_EQ(message_of([] { pm::sim::parse_app("0"); }), "app '0': an app needs at least one rank");
  EXPECT_EQ(message_of([] { parse_script("exit:300"); }),
            "script 'exit:300': exit codes are 0..255");
  EXPECT_EQ(message_of([] { parse_script("exit:1+fast"); }),
            "script 'exit:1+fast': unknown option 'fast' (ignore-term, slow=T, out=N, "
            "close-early, leftover, fence@T, spawn:K@T)");
  EXPECT_EQ(message_of([] { parse_script("spawn@1s"); }),
            "script 'spawn@1s': spawn needs a rank count, e.g. spawn:2@1s");
  EXPECT_EQ(message_of([] { pm::sim::parse_duration("1.5x", "--run-time"); }),
            "--run-time: invalid duration '1.5x' (e.g. 1.5s, 20ms)");
}

TEST(SimScenario, ValuesPrintAndParseBack) {
  for (const char* text :
       {"exit:7@1.5s+ignore-term+slow=20ms+out=4096+close-early+leftover", "signal:9@2s", "hang",
        "abort:3@1s", "exit:0", "exit:0@5s+fence@0s+fence@1s+spawn:2@2s+ignore-term"}) {
    EXPECT_EQ(to_string(parse_script(text)), text);
  }
  // A script may begin with a call (the default ending); calls are kept in time order.
  EXPECT_EQ(to_string(parse_script("fence@1s")), "exit:0+fence@1s");
  EXPECT_EQ(to_string(parse_script("spawn:3@2s+fence")), "exit:0+fence@0s+spawn:3@2s");
  for (const char* text :
       {"crash:3@1s", "partition:3@1.5s-5s", "spawn-fail:12", "agent-fail:3", "lost-exit:12",
        "launcher-signal:INT@2s", "launcher-signal:USR1@20ms", "silent:2", "stall:5@1.5s"}) {
    EXPECT_EQ(to_string(parse_fault(text)), text);
  }
  EXPECT_EQ(to_string(parse_fault("launcher-signal:SIGTERM@1s")), "launcher-signal:TERM@1s");
  EXPECT_EQ(to_string(parse_fault("launcher-signal:15@1s")), "launcher-signal:TERM@1s");
  for (const char* text : {"4", "4=exit:3@1s"})
    EXPECT_EQ(to_string(pm::sim::parse_app(text)), text);
  EXPECT_EQ(pm::sim::format_duration(1500ms), "1.5s");
  EXPECT_EQ(pm::sim::format_duration(250us), "250us");
  EXPECT_EQ(pm::sim::format_duration(std::chrono::nanoseconds(1'000'000'007)), "1.000000007s");
  EXPECT_EQ(pm::sim::parse_duration("0.25ms", "x"), 250us);
  auto s = cluster(64, 8, 42);
  s.set_script(17, parse_script("exit:7@1s"));
  s.faults.push_back(parse_fault("crash:3@2s"));
  EXPECT_EQ(
      s.replay_command(),
      "build/bin/pmsim --hosts 64 --slots 8 --rank 17=exit:7@1s --fault crash:3@2s --seed 42");
}

TEST(SimScenario, LauncherSigintAbortsTheJobWithTheSignalAsCause) {
  auto s = cluster(16, 4);
  s.faults.push_back(parse_fault("launcher-signal:INT@2s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 128 + SIGINT);
  EXPECT_EQ(r.report.cause, pm::cause_kind::signal);
  EXPECT_EQ(r.report.ranks_killed, 64u);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_EQ(r.lines[0], "interrupted by SIGINT; aborting the job (SIGINT to 64 ranks)");
  for (const auto& rr : r.report.ranks) EXPECT_EQ(rr.status, pm::exit_status::signaled(SIGINT));
  EXPECT_EQ(r.stats.faults_fired[static_cast<int>(pm::sim::fault_kind::launcher_signal)], 1u);
  EXPECT_LT(r.finish_time, 2010ms);
}

TEST(SimScenario, SecondSigintKillsAtOnceWithoutWaitingForTheGrace) {
  auto s = cluster(4, 2);
  s.set_script(5, parse_script("hang+ignore-term"));
  s.faults.push_back(parse_fault("launcher-signal:INT@2s"));
  s.faults.push_back(parse_fault("launcher-signal:INT@2.5s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();  // the world allows this SIGKILL only so
  EXPECT_EQ(r.report.exit_code, 128 + SIGINT);
  EXPECT_EQ(r.report.ranks[5].status, pm::exit_status::signaled(SIGKILL));
  EXPECT_EQ(r.stats.sigkills, 1u);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1], "received SIGINT again; sending SIGKILL to 1 rank");
  EXPECT_LT(r.finish_time, 2600ms);  // the 3 s grace did not run out
}

TEST(SimScenario, SigintDuringAFailureAbortIsForwardedAndTheFailureStaysTheCause) {
  auto s = cluster(4, 2);
  s.set_script(2, parse_script("exit:7@1s"));
  s.set_script(6, parse_script("hang+ignore-term"));
  s.faults.push_back(parse_fault("launcher-signal:INT@1.5s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 7);
  EXPECT_EQ(r.report.cause, pm::cause_kind::rank_failed);
  // Rank 6 ignores SIGTERM and SIGINT: it ends by SIGKILL when the grace of the abort runs out.
  EXPECT_EQ(r.report.ranks[6].status, pm::exit_status::signaled(SIGKILL));
  EXPECT_GE(r.finish_time, 4s);
}

TEST(SimScenario, LauncherSigusr1IsForwardedToTheRanks) {
  auto s = cluster(2, 2);
  s.control.abort_on_failure = false;
  s.faults.push_back(parse_fault("launcher-signal:USR1@1s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  // The ranks do not handle SIGUSR1, so it kills them: that is their own failure.
  for (const auto& rr : r.report.ranks) EXPECT_EQ(rr.status, pm::exit_status::signaled(SIGUSR1));
  EXPECT_EQ(r.report.exit_code, 128 + SIGUSR1);
  EXPECT_EQ(r.report.cause, pm::cause_kind::rank_failed);
}

TEST(SimScenario, MpmdAppsNumberRanksAcrossAppsAndRunTheirScripts) {
  auto s = cluster(4, 4);
  s.control.abort_on_failure = false;
  s.apps = {pm::sim::parse_app("2"), pm::sim::parse_app("6=exit:3@1s"), pm::sim::parse_app("8")};
  s.set_script(4, parse_script("exit:0@1s"));  // a rank's own script wins over its app's
  const auto map = pm::map_job(pm::sim::make_job(s), pm::sim::make_allocation(s));
  ASSERT_EQ(map.size(), 16u);
  EXPECT_EQ(map.at(1).app, 0u);
  EXPECT_EQ(map.at(2).app, 1u);
  EXPECT_EQ(map.at(7).app, 1u);
  EXPECT_EQ(map.at(8).app, 2u);
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 3);
  for (std::uint32_t rank = 0; rank < 16; ++rank) {
    const bool fails = rank >= 2 && rank < 8 && rank != 4;
    EXPECT_EQ(r.report.ranks[rank].status, pm::exit_status::exited(fails ? 3 : 0)) << rank;
  }
  EXPECT_EQ(r.report.ranks_failed, 5u);
  EXPECT_NE(r.replay.find("--app 2 --app 6=exit:3@1s --app 8"), std::string::npos) << r.replay;
  EXPECT_EQ(r.replay.find("--np"), std::string::npos);
}

TEST(SimScenario, GeneratedFaultPlansAreValuesThatReplay) {
  auto s = cluster(8, 4);
  const auto plan = pm::sim::generate_faults(s, 5, 6);
  EXPECT_EQ(plan, pm::sim::generate_faults(s, 5, 6));  // the same seed, the same plan
  EXPECT_NE(plan, pm::sim::generate_faults(s, 6, 6));
  std::array<int, pm::sim::fault_kind_count> kinds{};
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    auto t = cluster(8, 4, seed);
    t.faults = pm::sim::generate_faults(t, seed, 3);
    for (const auto& f : t.faults) {
      ++kinds[static_cast<int>(f.kind)];
      EXPECT_EQ(parse_fault(to_string(f)), f);  // printable
    }
    const auto r = pm::sim::run(t);
    EXPECT_EQ(r.outcome, verdict::ok) << r.explain();
    EXPECT_TRUE(r.finished);
    // The replay command names every generated fault, so it replays without the generator.
    for (const auto& f : t.faults)
      EXPECT_NE(r.replay.find("--fault " + to_string(f)), std::string::npos) << r.replay;
  }
  EXPECT_EQ(kinds[static_cast<int>(pm::sim::fault_kind::lost_exit)], 0);
  EXPECT_EQ(kinds[static_cast<int>(pm::sim::fault_kind::stall)], 0);
  for (auto k : {pm::sim::fault_kind::host_crash, pm::sim::fault_kind::partition,
                 pm::sim::fault_kind::spawn_failure, pm::sim::fault_kind::agent_failure,
                 pm::sim::fault_kind::launcher_signal})
    EXPECT_GT(kinds[static_cast<int>(k)], 5) << to_string(k);
}

TEST(SimScenario, PrngIsPinned) {
  // xoshiro256** seeded by splitmix64: these numbers must never change (replays depend on them).
  pm::sim::prng g(42);
  EXPECT_EQ(g.next(), 1546998764402558742ull);
  EXPECT_EQ(g.next(), 6990951692964543102ull);
  pm::sim::prng k(1);
  std::uint64_t counts[4] = {};
  for (int i = 0; i < 4000; ++i) ++counts[k.below(4)];
  for (auto c : counts) EXPECT_NEAR(static_cast<double>(c), 1000.0, 150.0);
}

}  // namespace
