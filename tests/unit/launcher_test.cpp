// The launcher machine (launch/launcher.hpp) driven with no process, no descriptor and no clock
// (support/launcher_world.hpp): launch, hosts lost and retried, the tree, fences, stalls.
#include "launch/launcher.hpp"

#include <gtest/gtest.h>

#include "support/launcher_world.hpp"

namespace {

using namespace pm::test::launcher_world;

TEST(Launcher, TwoRemoteHostsRunEveryRankAndTheFirstFailureDecides) {
  world w(remote_job(2, 2));
  w.exit_code[3] = 7;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->failed_rank, 3u);
  // Every rank's report, taken from the finished controller at `finished`.
  ASSERT_EQ(w.report->ranks.size(), 4u);
  EXPECT_EQ(w.report->ranks[3].state, pm::rank_state::exited);
  EXPECT_EQ(w.report->ranks[3].status, pm::exit_status::exited(7));
  EXPECT_EQ(w.report->ranks[3].host, 1u);
  EXPECT_EQ(w.opens[0], 1);
  EXPECT_EQ(w.opens[1], 1);
  EXPECT_EQ(w.output, "hello from rank 0\n");
  // Rank 0's agent said hello before any spawn went out: MASTER_ADDR is its address.
  const auto spawns = w.received<link::spawn_request>(1);
  ASSERT_EQ(spawns.size(), 1u);
  ASSERT_EQ(spawns[0].ranks.size(), 2u);
  bool master = false;
  for (const auto& v : spawns[0].ranks[0].env) master = master || v == "MASTER_ADDR=10.0.0.1";
  EXPECT_TRUE(master);
  // Each agent got the job's setup first, and the shutdown last.
  EXPECT_TRUE(std::holds_alternative<link::job_setup>(w.agents[1].got.front()));
  EXPECT_TRUE(std::holds_alternative<link::shutdown_request>(w.agents[1].got.back()));
}

// A host of 2 cores (one thread each) and 2 NVIDIA GPUs, on one NUMA node.
std::string small_gpu_host() {
  pm::topo::host_topology t;
  t.packages = 1;
  t.l3caches = 1;
  t.numa_os_index = {0};
  t.cores = {pm::topo::core{0, 0, 0, 0, 1}, pm::topo::core{0, 0, 0, 1, 1}};
  t.pu_os_index = {0, 1};
  t.gpus = {pm::topo::gpu{pm::topo::gpu_vendor::nvidia, 0, "0000:01:00.0", "", 0, 0},
            pm::topo::gpu{pm::topo::gpu_vendor::nvidia, 1, "0000:02:00.0", "", 0, 0}};
  return pm::topo::to_text(t);
}

// With GPUs asked, the spawns wait for every host's topology, then carry each rank's cpus and
// CUDA_VISIBLE_DEVICES; --report-bindings lines come before any spawn; the report has them.
TEST(Launcher, PlannedHostsGiveEachRankItsCoresAndGpu) {
  auto c = remote_job(2, 2);
  c.request.mapping.host.gpus.per_rank = 1;
  c.request.mapping.host.bind.to = pm::topo::object::core;
  c.request.mapping.report_bindings = true;
  std::vector<std::string> reported;
  c.report_binding = [&](const std::string& line) { reported.push_back(line); };
  world w(std::move(c));
  w.shapes[0] = w.shapes[1] = small_gpu_host();
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  ASSERT_EQ(reported.size(), 4u);
  EXPECT_EQ(reported[1].substr(reported[1].find(']')),
            "] MCW rank 1 bound to socket 0[core 1[hwt 0]]: [./B]");
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto spawns = w.received<link::spawn_request>(h);
    ASSERT_EQ(spawns.size(), 1u);
    for (std::uint32_t i = 0; i < 2; ++i) {
      const auto& r = spawns[0].ranks[i];
      ASSERT_TRUE(r.binding);
      EXPECT_EQ(r.binding->cpus, std::to_string(i));
      EXPECT_NE(std::find(r.env.begin(), r.env.end(), "CUDA_VISIBLE_DEVICES=" + std::to_string(i)),
                r.env.end());
    }
  }
  ASSERT_EQ(w.report->resources.size(), 4u);
  EXPECT_EQ(w.report->resources[3], (pm::rank_resources{"1", {1}, ""}));
}

// A host that cannot meet the job refuses it in one line, before any rank of any host starts.
TEST(Launcher, AHostThatCannotMeetTheJobRefusesItBeforeAnySpawn) {
  auto c = remote_job(2, 2);
  c.request.mapping.host.gpus.per_rank = 2;
  world w(std::move(c));
  w.shapes[0] = w.shapes[1] = small_gpu_host();
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 2);
  EXPECT_EQ(w.lines, (std::vector<std::string>{
                         "host 'h0' has 2 GPUs; 2 ranks x 2 GPUs asked (--gpus-per-rank 2; add "
                         ":shared to share GPUs)"}));
  for (std::uint32_t h = 0; h < 2; ++h) EXPECT_TRUE(w.received<link::spawn_request>(h).empty());
  ASSERT_EQ(w.report->ranks.size(), 4u);
  for (const auto& r : w.report->ranks) EXPECT_EQ(r.state, pm::rank_state::not_started);
}

// An agent without a topology (no hwloc there) refuses the job the same way.
TEST(Launcher, AHostWithoutATopologyRefusesAJobThatNeedsOne) {
  auto c = remote_job(1, 1);
  c.request.mapping.host.bind.to = pm::topo::object::core;
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 2);
  EXPECT_EQ(w.lines,
            (std::vector<std::string>{"host 'h0' cannot tell its topology: no topology here"}));
}

TEST(Launcher, AHostWhoseAgentNeverSaysHelloFailsTheLaunchWith125) {
  world w(remote_job(2, 1));
  w.ssh_fails[1] = {pm::agent_end{"ssh exited with code 255: Connection refused", false}};
  w.keep_running.insert(0);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 125);
  EXPECT_EQ(w.opens[1], 1);  // a refused connection is not retried
  EXPECT_TRUE(w.said("Connection refused")) << ::testing::PrintToString(w.lines);
  EXPECT_LT(w.t, 5s);  // rank 0 was ended at once, not waited for
}

// A login banner past the 64 KiB skipped before the link: the line says what came (it said only
// "ssh was killed by SIGTERM", our own stop), and the same banner is not tried again.
TEST(Launcher, NoiseInsteadOfTheLinkIsNamedAndNotRetried) {
  world w(remote_job(2, 1));
  w.noise_instead[1] = "Welcome to node1\n" + std::string(70000, 'x');
  w.keep_running.insert(0);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 125);
  EXPECT_EQ(w.opens[1], 1);
  EXPECT_TRUE(w.said("that are not the agent link (it began: 'Welcome to node1"))
      << ::testing::PrintToString(w.lines);
  EXPECT_TRUE(w.said("(ssh was killed by SIGTERM))")) << ::testing::PrintToString(w.lines);
}

TEST(Launcher, Ssh255BeforeTheHelloIsRetriedWithBackoffAndTheJobRuns) {
  world w(remote_job(2, 1));
  w.ssh_fails[1] = {pm::agent_end{"ssh exited with code 255", true},
                    pm::agent_end{"ssh exited with code 255", true}};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.opens[1], 3);
  // 100 ms then 200 ms, each plus up to half again.
  std::vector<std::chrono::milliseconds> backoff;
  for (const auto d : w.timer_lengths) {
    if (d >= 100ms && d < 300ms) backoff.push_back(d);
  }
  ASSERT_EQ(backoff.size(), 2u);
  EXPECT_LE(backoff[0], 150ms);
  EXPECT_GE(backoff[1], 200ms);
}

// The hello deadline runs from a host's first try, across ssh's retries: set-up is bounded by it
// (a host that went silent after its TCP connect held the launch 25-30 s: ssh gave up after 15 s
// with 255, was retried, and the retry got 20 s of its own).
TEST(Launcher, TheHelloDeadlineCountsFromTheFirstTryAcrossRetries) {
  world w(remote_job(2, 1));
  w.ssh_fails[1] = {pm::agent_end{"ssh exited with code 255", true}};
  w.mute.insert(1);
  w.keep_running.insert(0);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 125);
  EXPECT_EQ(w.opens[1], 2);  // retried once, within the deadline
  EXPECT_TRUE(w.said("no hello from the agent within 20.0 s")) << ::testing::PrintToString(w.lines);
  EXPECT_LT(w.t, 20s + 50ms);  // not 20 s after the retry (its backoff is at least 100 ms)
}

TEST(Launcher, TheTreeReachesEachHostThroughItsParentsAgent) {
  auto c = remote_job(4, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  // The launcher itself starts one host; each other is started by the one before it.
  EXPECT_EQ(w.opens.size(), 1u);
  ASSERT_EQ(w.child_opens.size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w.child_opens[i].first, i);
    EXPECT_EQ(w.child_opens[i].second.host, i + 1);
    bool names_host = false;
    for (const auto& word : w.child_opens[i].second.argv) {
      names_host = names_host || word == "h" + std::to_string(i + 1);
    }
    EXPECT_TRUE(names_host) << ::testing::PrintToString(w.child_opens[i].second.argv);
  }
  // The depth-3 host's own link ran end to end: its spawn and shutdown reached it.
  EXPECT_EQ(w.received<link::spawn_request>(3).size(), 1u);
  EXPECT_EQ(w.received<link::shutdown_request>(3).size(), 1u);
}

TEST(Launcher, ARelayedHostsSshCommandLineCarriesNoEnvironmentAndEndsInExit) {
  auto c = remote_job(2, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  c.request.remote.rsh_agent = {"ssh", "-F", "/cfg"};
  c.request.env.base = {{"SECRET", "launcher-only"}};
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_EQ(w.child_opens.size(), 1u);
  const auto& argv = w.child_opens[0].second.argv;
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_EQ(argv[argv.size() - 2], "h1");
  EXPECT_EQ(argv.back(), "/opt/pm/bin/pmd --stdio --nonce 0000000000005eed; exit");
  for (const auto& a : argv) EXPECT_EQ(a.find("SECRET"), std::string::npos);
}

TEST(Launcher, ARelayedHostsSsh255BeforeItsHelloIsRetriedThroughItsParent) {
  auto c = remote_job(2, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.child_ssh_fails[1] = {255};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.starts[1], 2u);
}

TEST(Launcher, AtMostMaxConcurrentChildrenOfAParentAreSetUpAtOnce) {
  // Fan-out 2: the launcher starts h0 and h1; h0 starts h2 and h3, one at a time.
  auto c = remote_job(4, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 2;
  c.request.remote.max_concurrent = 1;
  world w(std::move(c));
  w.slow_children = {2, 3};
  w.start();
  w.run(1s);
  ASSERT_EQ(w.child_opens.size(), 1u);
  EXPECT_EQ(w.child_opens[0].first, 0u);
  EXPECT_EQ(w.child_opens[0].second.host, 2u);
  w.bring_up(2, 0);  // its agent says hello: the next may start
  w.run(2s);
  ASSERT_EQ(w.child_opens.size(), 2u);
  EXPECT_EQ(w.child_opens[1].second.host, 3u);
  w.bring_up(3, 0);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
}

TEST(Launcher, ALostTreeParentIsReportedWithItsSubtreeInOneLine) {
  auto c = remote_job(3, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.keep_running = {0, 1, 2};
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  ASSERT_EQ(w.received<link::spawn_request>(2).size(), 1u);
  // h1 (which relays h2) is cut off: its stream breaks.
  w.agents[1].gone = true;
  w.agents[2].gone = true;
  w.feed([&](auto& a) { w.m.stream_broken(w.t, 1, "", a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 213);
  EXPECT_TRUE(w.said("with it the hosts it relayed: h2")) << ::testing::PrintToString(w.lines);
  // Its line counts the relayed host's rank as failed with its own, and signals only rank 0
  // (the others were lost: not "SIGTERM to 3 ranks").
  EXPECT_TRUE(w.said("); their 2 ranks failed; aborting the job (SIGTERM to 1 rank)"))
      << ::testing::PrintToString(w.lines);
  EXPECT_EQ(w.report->ranks_failed, 2u);
  EXPECT_EQ(w.report->ranks_killed, 1u);
}

TEST(Launcher, AFenceAcrossHostsIsAnsweredToEveryHostOnceAllContributed) {
  auto c = remote_job(2, 1);
  c.request.pmix = true;
  world w(std::move(c));
  w.fence = true;
  w.keep_running = {0, 1};
  w.start();
  w.run(2s);
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto results = w.received<link::fence_result>(h);
    ASSERT_EQ(results.size(), 1u) << "host " << h;
    EXPECT_TRUE(results[0].ok);
    EXPECT_EQ(results[0].data, "d0d1");
  }
}

TEST(Launcher, ASecondInterruptDoesNotWaitForAnAgentThatDoesNotAnswer) {
  world w(remote_job(2, 1));
  w.keep_running = {0, 1};
  w.deaf.insert(1);
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  const auto interrupted = w.t;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_LT(w.t - interrupted, 2s);
  // The silent host's rank counts as lost with it; the other was killed.
  EXPECT_EQ(w.report->ranks.at(1).state, pm::rank_state::lost);
  EXPECT_EQ(w.report->ranks.at(0).state, pm::rank_state::killed);
}

// ---- --stall-timeout: the launcher's stall decision (docs/resilience.md, "Stalls") ----

launch::launch_config stall_job(std::uint32_t hosts, std::uint32_t per_host) {
  auto c = remote_job(hosts, per_host);
  c.request.control.stall_timeout = 2s;
  return c;
}

// What the agent of `h` says of its ranks: one sample each, pids 1000 + rank.
link::stall_report quiet_ranks(std::vector<std::uint32_t> ranks) {
  link::stall_report r;
  for (const auto rank : ranks) {
    r.ranks.push_back(
        link::rank_activity{rank, 1000 + rank, "S", "futex_wait_queue", 20, -1, 2100});
  }
  return r;
}

void tell(world& w, std::uint32_t h, link::message m) {
  w.agents[h].ep->send(m);
  w.flush_agent(h);
  w.settle();
}

std::size_t queries(const world& w, std::uint32_t h) {
  return w.received<link::stall_query>(h).size();
}

TEST(LauncherStall, EveryAgentIsToldTheTimeoutAndItsSamplePeriod) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.start();
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto setup = w.received<link::job_setup>(h);
    ASSERT_EQ(setup.size(), 1u);
    EXPECT_EQ(setup[0].stall, (link::stall_watch{2000, 200}));
  }
  // Without the option the setup has none.
  world plain(remote_job(1, 1));
  plain.start();
  EXPECT_FALSE(plain.received<link::job_setup>(0).at(0).stall);
}

TEST(LauncherStall, TheJobIsStalledOnlyWhenEveryHostWithLiveRanksIsQuiet) {
  world w(stall_job(2, 2));
  w.keep_running = {0, 1, 2, 3};
  w.stall_answers[0] = quiet_ranks({0, 1});
  w.stall_answers[1] = quiet_ranks({2, 3});
  w.stall_answers[1].ranks[1] = link::rank_activity{3, 1003, "D", "", 1500, 2345, 2100};
  w.start();
  tell(w, 0, link::host_quiet{true, 2});
  EXPECT_EQ(queries(w, 0), 0u);  // h1 still progresses
  tell(w, 1, link::host_quiet{true, 2});
  EXPECT_EQ(queries(w, 0), 1u);
  EXPECT_EQ(queries(w, 1), 1u);
  // One line per host, ranks ascending, then the controller's line; the job is aborted.
  ASSERT_GE(w.lines.size(), 3u);
  EXPECT_EQ(w.lines[0],
            "stalled on h0: rank 0 (pid 1000, S in futex_wait_queue, cpu 0.02 s, no output yet); "
            "rank 1 (pid 1001, S in futex_wait_queue, cpu 0.02 s, no output yet)");
  EXPECT_EQ(w.lines[1],
            "stalled on h1: rank 2 (pid 1002, S in futex_wait_queue, cpu 0.02 s, no output yet); "
            "rank 3 (pid 1003, D, cpu 1.50 s, last output 2.3 s ago)");
  EXPECT_EQ(w.lines[2],
            "no rank progressed for 2 s (--stall-timeout); aborting the job (SIGTERM to 4 ranks)");
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, pm::exit_codes::stalled);
  EXPECT_EQ(w.report->cause, pm::cause_kind::stalled);
  EXPECT_EQ(w.report->summary, "no rank progressed for 2 s (--stall-timeout)");
  EXPECT_EQ(w.report->ranks_killed, 4u);
  EXPECT_FALSE(w.report->failed_rank);
}

TEST(LauncherStall, AHostThatTurnsActiveWhileAskedCallsTheStallOff) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.stall_answers[0] = quiet_ranks({0});  // h1 answers only when the test says
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  tell(w, 1, link::host_quiet{true, 1});
  ASSERT_EQ(queries(w, 1), 1u);
  tell(w, 1, link::host_quiet{false, 1});
  auto late = quiet_ranks({1});
  late.id = 1;
  tell(w, 1, late);
  EXPECT_TRUE(w.lines.empty());
  // The answer bound's timer is gone with the round: nothing happens later either.
  w.run(w.t + 5s);
  EXPECT_TRUE(w.lines.empty());
  EXPECT_FALSE(w.report);
  // Quiet again: a new round, with a new id.
  w.stall_answers[1] = quiet_ranks({1});
  tell(w, 1, link::host_quiet{true, 1});
  ASSERT_EQ(queries(w, 1), 2u);
  EXPECT_EQ(w.received<link::stall_query>(1)[1].id, 2u);
  EXPECT_EQ(w.lines.size(), 3u);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::stalled);
}

TEST(LauncherStall, AnAgentThatDoesNotAnswerIsNamedAfterOneSecond) {
  world w(stall_job(2, 2));
  w.keep_running = {0, 1, 2, 3};
  w.stall_answers[0] = quiet_ranks({0, 1});
  w.start();
  tell(w, 0, link::host_quiet{true, 2});
  tell(w, 1, link::host_quiet{true, 2});
  EXPECT_TRUE(w.lines.empty());
  // The answers are waited for 1 s.
  ASSERT_FALSE(w.timer_lengths.empty());
  EXPECT_EQ(w.timer_lengths.back(), 1s);
  const auto asked = w.t;
  w.run(asked + 1s);
  ASSERT_GE(w.lines.size(), 3u);
  EXPECT_TRUE(w.lines[0].starts_with("stalled on h0: rank 0 (pid 1000"));
  EXPECT_EQ(w.lines[1], "stalled on h1: its agent did not answer (ranks 2 3)");
  EXPECT_TRUE(w.lines[2].starts_with("no rank progressed for 2 s"));
}

TEST(LauncherStall, RanksThatEndLeaveOnlyTheQuietHostsToDecide) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.stall_answers[0] = quiet_ranks({0});
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  EXPECT_EQ(queries(w, 0), 0u);
  // h1's rank ends by itself: h0 is the only host with a live rank, and it is quiet.
  w.end_rank(1, 1, pm::exit_status::exited(0));
  w.flush_agent(1);
  w.settle();
  EXPECT_EQ(queries(w, 0), 1u);
  EXPECT_EQ(queries(w, 1), 0u);
  ASSERT_EQ(w.lines.size(), 2u);
  EXPECT_TRUE(w.lines[0].starts_with("stalled on h0: "));
  EXPECT_EQ(w.lines[1],
            "no rank progressed for 2 s (--stall-timeout); aborting the job (SIGTERM to 1 rank)");
}

TEST(LauncherStall, NoStallWithoutTheOption) {
  world w(remote_job(2, 1));
  w.keep_running = {0, 1};
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  tell(w, 1, link::host_quiet{true, 1});
  EXPECT_EQ(queries(w, 0), 0u);
  EXPECT_TRUE(w.lines.empty());
}

TEST(Launcher, NothingComesOutAfterFinished) {
  world w(remote_job(2, 1));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  launch::actions a;
  w.m.signal(w.t, SIGINT, a);
  w.m.timer_fired(w.t, launch::launcher_timers + 1, a);
  w.m.stream_broken(w.t, 0, "", a);
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(w.m.done());
}

}  // namespace
