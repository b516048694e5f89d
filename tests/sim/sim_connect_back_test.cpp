// The simulator's connect-back (docs/slurm.md, docs/simulator.md "Connect-back"): agents started by
// one srun step call the launcher with the job's token, and the launcher's real caller_gate
// decides which caller becomes which host's stream. Forged, duplicate, late and lost calls, alone
// and mixed with the other faults, against the contract the world checks.
#include <gtest/gtest.h>

#include "pm/error.hpp"
#include "pm/sim/random.hpp"
#include "pm/sim/world.hpp"

namespace {

using namespace std::chrono_literals;
using pm::sim::fault_kind;
using pm::sim::parse_fault;
using pm::sim::scenario;
using pm::sim::verdict;

scenario cluster(std::uint32_t hosts, std::uint64_t seed = 11) {
  scenario s;
  s.hosts = hosts;
  s.slots = 2;
  s.seed = seed;
  s.connect_back = true;
  s.latency.run_time = 2s;
  return s;
}

std::uint32_t fired(const pm::sim::run_result& r, fault_kind k) {
  return r.stats.faults_fired[static_cast<std::size_t>(k)];
}

TEST(SimConnectBack, EveryAgentCallsOnceAndTheJobRunsAsOverSsh) {
  const auto r = pm::sim::run(cluster(16));
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(r.stats.calls, 16u);
  EXPECT_EQ(r.stats.callers_refused, 0u);
  EXPECT_NE(r.replay.find("--connect-back"), std::string::npos) << r.replay;
  // One step starts them all: every rank runs within one hop and its spawns, not a tree's depth.
  for (const auto& rr : r.report.ranks) {
    ASSERT_TRUE(rr.started_at);
    EXPECT_LT(*rr.started_at, 40ms);
  }
}

TEST(SimConnectBack, ForgedCallersAreRefusedBeforeDuringAndAfterTheLaunch) {
  auto s = cluster(8);
  for (const char* f :
       {"forged-call:0@0s", "forged-call:3@10ms", "forged-call:7@1s", "forged-call:2@1500ms"})
    s.faults.push_back(parse_fault(f));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(fired(r, fault_kind::forged_call), 4u);
  EXPECT_EQ(r.stats.callers_refused, 4u);
  EXPECT_TRUE(r.hosts_lost.empty());
}

TEST(SimConnectBack, ADuplicateCallIsRefusedAndChangesNothing) {
  auto s = cluster(8);
  s.faults.push_back(parse_fault("dup-call:5"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_EQ(fired(r, fault_kind::duplicate_call), 1u);
  EXPECT_EQ(r.stats.callers_refused, 1u);
  EXPECT_EQ(r.stats.calls, 9u);
}

TEST(SimConnectBack, ALateCallWithinTheHelloDeadlineOnlyDelays) {
  auto s = cluster(8);
  s.faults.push_back(parse_fault("late-call:2@5s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 0);
  EXPECT_TRUE(r.hosts_lost.empty());
  EXPECT_GT(r.finish_time, 5s);
}

TEST(SimConnectBack, ACallAfterTheHelloDeadlineFindsTheJobOverItsHostLostAtTheDeadline) {
  // The launcher machine ends the launch at node2's hello deadline (20 s: a set-up failure ends
  // it whatever the policy) and hangs up on node2's caller slot; the job, and with it the srun
  // step that would run node2's agent, is over long before the call would come at 25 s. Nothing
  // is left to judge it: no refusal, no agent of the old job.
  auto s = cluster(8, 10);
  s.faults.push_back(parse_fault("late-call:2@25s"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_EQ(r.hosts_lost.size(), 1u);
  EXPECT_EQ(r.hosts_lost[0].host, 2u);
  EXPECT_EQ(r.hosts_lost[0].reason, "no hello from the agent within 20.0 s");
  // No hello: a set-up failure, not a lost host.
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::launch_failed);
  EXPECT_EQ(r.report.cause, pm::cause_kind::spawn_failed);
  EXPECT_LT(r.finish_time, 21s);
  EXPECT_EQ(r.stats.callers_refused, 0u);
  EXPECT_TRUE(r.agents_lost.empty());
}

TEST(SimConnectBack, ALostCallLosesItsHostAtTheHelloDeadline) {
  auto s = cluster(8);
  s.faults.push_back(parse_fault("lost-call:6"));
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  ASSERT_EQ(r.hosts_lost.size(), 1u);
  EXPECT_EQ(r.hosts_lost[0].host, 6u);
  EXPECT_EQ(r.hosts_lost[0].at, 20s + std::chrono::nanoseconds(0)) << r.hosts_lost[0].at.count();
  EXPECT_EQ(fired(r, fault_kind::lost_call), 1u);
}

TEST(SimConnectBack, CallFaultsNeedConnectBack) {
  scenario s;
  s.hosts = 4;
  s.faults.push_back(parse_fault("dup-call:1"));
  EXPECT_THROW(pm::sim::check(s), pm::error);
  EXPECT_THROW(parse_fault("late-call:1"), pm::error);  // needs a time
  EXPECT_EQ(pm::sim::to_string(parse_fault("late-call:1@25s")), "late-call:1@25s");
  EXPECT_EQ(pm::sim::to_string(parse_fault("lost-call:3")), "lost-call:3");
}

// Many seeds, each with a random mix of call faults and the usual ones (crashes, partitions,
// agent and spawn failures, launcher signals): the world's contract checks must hold, and the
// same seed must replay the same trace.
TEST(SimConnectBack, RandomMixesKeepTheContract) {
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    auto s = cluster(6, seed);
    s.latency.hello_timeout = 4s;
    pm::sim::prng rng(seed * 7919);
    s.faults = pm::sim::generate_faults(s, seed, static_cast<std::uint32_t>(rng.between(0, 2)), 2s);
    const auto calls = rng.between(1, 3);
    for (std::int64_t i = 0; i < calls; ++i) {
      const auto host = std::to_string(rng.between(0, 5));
      switch (rng.between(0, 3)) {
        case 0:
          s.faults.push_back(parse_fault("forged-call:" + host + "@" +
                                         std::to_string(rng.between(0, 3000)) + "ms"));
          break;
        case 1:
          s.faults.push_back(parse_fault("dup-call:" + host));
          break;
        case 2:
          s.faults.push_back(
              parse_fault("late-call:" + host + "@" + std::to_string(rng.between(0, 6000)) + "ms"));
          break;
        default:
          s.faults.push_back(parse_fault("lost-call:" + host));
          break;
      }
    }
    const auto r = pm::sim::run(s);
    ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
    ASSERT_TRUE(r.finished) << r.explain();
    const auto again = pm::sim::run(s);
    ASSERT_EQ(again.trace_hash, r.trace_hash) << r.explain();
  }
}

}  // namespace
