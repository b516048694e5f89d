// A scheduler author's own unit test: simulate a 512-rank launch on 64 hosts, with failures, in
// milliseconds, against the controller and node agent that run in production (docs/simulator.md).
//
// Build it like any GoogleTest against the installed package:
//   find_package(libpm CONFIG REQUIRED)
//   target_link_libraries(my_test PRIVATE libpm::sim GTest::gtest_main)
#include <signal.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pm/sim/world.hpp"

namespace {

using namespace std::chrono_literals;

// The cluster this scheduler manages: 64 hosts with 8 slots each, one rank per slot.
pm::sim::scenario cluster(std::uint64_t seed) {
  pm::sim::scenario s;
  s.hosts = 64;
  s.slots = 8;
  s.seed = seed;  // every random choice of the world comes from it: a run replays exactly
  return s;
}

TEST(MySchedulerSim, OneFailingRankEndsTheJobWithItsExitCode) {
  auto s = cluster(42);
  s.set_script(17, pm::sim::parse_script("exit:7@1s"));  // rank 17 exits 7 after 1 s
  const auto r = pm::sim::run(s);

  // explain() prints the seed, what broke and the pmsim command that replays this run.
  ASSERT_EQ(r.outcome, pm::sim::verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 7);
  EXPECT_EQ(r.report.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.report.failed_rank, 17u);
  EXPECT_EQ(r.report.summary, "rank 17 on node2 exited with code 7");
  EXPECT_EQ(r.report.ranks_killed, 511u);  // the abort reached every other rank
  EXPECT_LT(r.finish_time, 1100ms);        // virtual time: the job ended soon after the failure
}

TEST(MySchedulerSim, AHostCrashIsDetectedAndReportedAsHostLost) {
  auto s = cluster(7);
  s.faults.push_back(pm::sim::parse_fault("crash:5@2s"));  // node5 dies at 2 s, silently
  const auto r = pm::sim::run(s);

  ASSERT_EQ(r.outcome, pm::sim::verdict::ok) << r.explain();
  EXPECT_EQ(r.report.cause, pm::cause_kind::host_lost);
  EXPECT_EQ(r.report.exit_code, pm::exit_codes::host_lost);
  EXPECT_EQ(r.report.failed_host, 5u);
  // Its 8 ranks count as lost once the link heard nothing for the silence timeout (3 s by
  // default), counted from the last heartbeat (one a second): 2 to 3 s after the crash.
  std::uint32_t lost = 0;
  for (const auto& rank : r.report.ranks) lost += rank.state == pm::rank_state::lost ? 1 : 0;
  EXPECT_EQ(lost, 8u);
  EXPECT_GT(r.finish_time, 4s);
  EXPECT_LT(r.finish_time, 5s + 200ms);
}

TEST(MySchedulerSim, WithoutAbortTheOtherRanksFinishTheirWork) {
  auto s = cluster(3);
  s.control.abort_on_failure = false;  // mpirun's --no-abort-on-failure... as a scheduler option
  s.set_script(100, pm::sim::parse_script("signal:11@2s"));  // a segfault
  const auto r = pm::sim::run(s);

  ASSERT_EQ(r.outcome, pm::sim::verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 128 + SIGSEGV);
  EXPECT_EQ(r.report.ranks_killed, 0u);
  std::uint32_t succeeded = 0;
  for (const auto& rank : r.report.ranks)
    succeeded += rank.status && rank.status->success() ? 1 : 0;
  EXPECT_EQ(succeeded, 511u);
}

TEST(MySchedulerSim, TheTraceIsReadableAndTheSameSeedGivesTheSameRun) {
  auto s = cluster(9);
  s.hosts = 2;
  s.set_script(3, pm::sim::parse_script("abort:4@500ms"));  // MPI_Abort(MPI_COMM_WORLD, 4)
  std::vector<std::string> trace;
  pm::sim::run_options o;
  o.trace = [&](std::string_view line) { trace.emplace_back(line); };
  const auto r = pm::sim::run(s, o);

  ASSERT_EQ(r.outcome, pm::sim::verdict::ok) << r.explain();
  EXPECT_EQ(r.report.cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.report.exit_code, 4);
  // "<-" is an event into the controller, "->" an action out of it, "!!" a fault.
  bool saw_abort = false;
  for (const auto& line : trace)
    saw_abort |= line.find("<- abort_requested rank=3 status=4") != std::string::npos;
  EXPECT_TRUE(saw_abort);
  // The trace hash identifies the run: same seed, same hash; another seed, another run.
  EXPECT_EQ(pm::sim::run(s).trace_hash, r.trace_hash);
  s.seed = 10;
  EXPECT_NE(pm::sim::run(s).trace_hash, r.trace_hash);
}

}  // namespace
