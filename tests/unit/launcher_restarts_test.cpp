// The launcher machine (launch/launcher.hpp) driven with no process, no descriptor and no clock
// (support/launcher_world.hpp): restarts in place, rank recovery, spare hosts, fewer hosts and
// hosts found by a discovery command (docs/resilience.md).
#include "launch/launcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/launcher_world.hpp"

namespace {

using namespace pm::test::launcher_world;

// ---- restarts in place (docs/resilience.md) ----

std::string env_of(const link::rank_spec& r, const std::string& name) {
  for (const auto& v : r.env) {
    if (v.starts_with(name + "=")) return v.substr(name.size() + 1);
  }
  return "<unset>";
}

TEST(Launcher, AFailedIncarnationRestartsOnTheSameAgentsWithFreshFacts) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.code_in[{0, 3}] = 7;  // fails once, then succeeds
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.report->cause, pm::cause_kind::none);
  // No new ssh: the agents that ran incarnation 0 ran incarnation 1.
  EXPECT_EQ(w.opens[0], 1);
  EXPECT_EQ(w.opens[1], 1);
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].number, 0u);
  EXPECT_EQ(w.report->incarnations[0].exit_code, 7);
  EXPECT_EQ(w.report->incarnations[0].cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(w.report->incarnations[0].failed_rank, 3u);
  EXPECT_EQ(w.report->incarnations[1].number, 1u);
  EXPECT_EQ(w.report->incarnations[1].exit_code, 0);
  ASSERT_EQ(w.restarts.size(), 1u);
  EXPECT_EQ(w.restarts[0], w.report->incarnations[0]);
  EXPECT_TRUE(w.said("restarting the job (1 of 3): rank 3 on h1 exited with code 7")) << w.lines[0];
  for (std::uint32_t h = 0; h < 2; ++h) {
    // One restart request, between the incarnations' spawns; the shutdown after the last.
    const auto restarts = w.received<link::restart_request>(h);
    ASSERT_EQ(restarts.size(), 1u);
    EXPECT_EQ(restarts[0].incarnation, 1u);
    EXPECT_FALSE(restarts[0].pmix);  // --no-pmix here
    const auto spawns = w.received<link::spawn_request>(h);
    ASSERT_EQ(spawns.size(), 2u);
    for (std::uint32_t i = 0; i < 2; ++i) {
      for (const auto& r : spawns[i].ranks) {
        EXPECT_EQ(env_of(r, "TORCHELASTIC_RESTART_COUNT"), std::to_string(i));
        EXPECT_EQ(env_of(r, "TORCHELASTIC_MAX_RESTARTS"), "3");
        EXPECT_EQ(env_of(r, "TORCHELASTIC_RUN_ID"), "pmrun.test");
        // A fresh MASTER_PORT: rank 0's agent's answer to the restart.
        EXPECT_EQ(env_of(r, "MASTER_PORT"), i == 0 ? "29500" : "29501");
      }
    }
    EXPECT_TRUE(std::holds_alternative<link::shutdown_request>(w.agents[h].got.back()));
  }
}

TEST(Launcher, TheBudgetIsTheLaunchsAndTheLastFailureDecides) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 2;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.code_in[{1, 1}] = 8;
  w.code_in[{2, 1}] = 9;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 9);
  EXPECT_EQ(w.report->failed_rank, 1u);
  ASSERT_EQ(w.report->incarnations.size(), 3u);
  EXPECT_EQ(w.report->incarnations[1].exit_code, 8);
  EXPECT_EQ(w.restarts.size(), 2u);
  EXPECT_TRUE(w.said("restarting the job (2 of 2): rank 1 on h1 exited with code 8"));
  EXPECT_FALSE(w.said("(3 of 2)"));
  // The first restart at once, the second after 50 ms.
  EXPECT_NE(std::find(w.timer_lengths.begin(), w.timer_lengths.end(), 50ms), w.timer_lengths.end());
  EXPECT_EQ(w.received<link::restart_request>(1).size(), 2u);
  // Without restarts a report has no incarnations (its JSON keeps its schema).
  world plain(remote_job(1, 1));
  plain.start();
  plain.run();
  ASSERT_TRUE(plain.report);
  EXPECT_TRUE(plain.report->incarnations.empty());
  EXPECT_EQ(pm::to_json(*plain.report).find("incarnations"), std::string::npos);
  EXPECT_NE(pm::to_json(*w.report).find("\"restarts\": 2"), std::string::npos);
}

// --enable-recovery (docs/resilience.md, "Recovering single ranks"): the failed rank alone is
// asked for again, from the same agent, with its own restart count; the job never restarts.
TEST(LauncherRecovery, AFailedRankIsSpawnedAgainAloneWithItsOwnCount) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.per_rank = true;
  world w(std::move(c));
  w.fail_times[3] = 2;  // rank 3 (on h1) fails twice, then succeeds
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.report->cause, pm::cause_kind::none);
  EXPECT_TRUE(w.report->incarnations.empty());
  EXPECT_TRUE(w.restarts.empty());
  EXPECT_TRUE(w.received<link::restart_request>(1).empty());
  ASSERT_EQ(w.rank_restarts.size(), 2u);
  EXPECT_EQ(w.rank_restarts, w.report->rank_restarts);
  EXPECT_EQ(w.rank_restarts[1].number, 2u);
  EXPECT_EQ(w.rank_restarts[1].count, 2u);
  EXPECT_TRUE(w.said("restarting rank 3 on h1 (1 of 3): rank 3 on h1 exited with code 7"));
  EXPECT_TRUE(w.said("restarting rank 3 on h1 (2 of 3): rank 3 on h1 exited with code 7"));
  EXPECT_EQ(w.started_times[3], 3);
  EXPECT_EQ(w.started_times[2], 1);  // the other rank of h1 ran once
  const auto spawns = w.received<link::spawn_request>(1);
  ASSERT_EQ(spawns.size(), 3u);
  for (std::uint32_t i = 1; i < 3; ++i) {
    ASSERT_EQ(spawns[i].ranks.size(), 1u);
    EXPECT_EQ(spawns[i].ranks[0].rank, 3u);
    EXPECT_EQ(env_of(spawns[i].ranks[0], "TORCHELASTIC_RESTART_COUNT"), std::to_string(i));
    EXPECT_EQ(env_of(spawns[i].ranks[0], "TORCHELASTIC_MAX_RESTARTS"), "3");
    EXPECT_FALSE(spawns[i].ranks[0].stdin_from_launcher);
  }
  EXPECT_EQ(env_of(spawns[0].ranks[0], "TORCHELASTIC_RESTART_COUNT"), "0");
  // Every change of rank 3 is told, also the ends that a restart followed at once.
  std::vector<std::string> told;
  for (const auto& r : w.changes) {
    if (r.rank != 3) continue;
    told.push_back(std::string(pm::to_string(r.state)) +
                   (r.status ? " " + std::to_string(r.status->shell_code()) : ""));
  }
  EXPECT_EQ(told, (std::vector<std::string>{"running", "exited 7", "running", "exited 7", "running",
                                            "exited 0"}));
  const auto json = pm::to_json(*w.report);
  EXPECT_NE(json.find("\"restarts\": 2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rank_restarts\""), std::string::npos) << json;
  EXPECT_EQ(json.find("incarnations"), std::string::npos) << json;
}

// Each rank's stdin is pumped from the launcher while it runs and released when it ended, once; a
// rank restarted alone reads /dev/null (its first process had the input).
TEST(LauncherRecovery, AStdinIsReleasedOnceItsRankEndedAndARestartDoesNotGetIt) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 1;
  c.request.restarts.per_rank = true;
  c.stdin_of.assign(4, launch::stdin_source::own);
  world w(std::move(c));
  w.fail_times[3] = 1;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  auto pumped = w.pumped;
  auto released = w.released;
  std::sort(pumped.begin(), pumped.end());
  std::sort(released.begin(), released.end());
  EXPECT_EQ(pumped, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(released, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  const auto spawns = w.received<link::spawn_request>(1);
  ASSERT_EQ(spawns.size(), 2u);
  EXPECT_TRUE(spawns[0].ranks[1].stdin_from_launcher);
  ASSERT_EQ(spawns[1].ranks.size(), 1u);
  EXPECT_EQ(spawns[1].ranks[0].rank, 3u);
  EXPECT_FALSE(spawns[1].ranks[0].stdin_from_launcher);
}

// --enable-recovery without a budget (PRRTE's default): nothing restarts and the others run on
// past the failed rank, decided by the launcher for every embedder; keep_abort (pmrun's explicit
// -mca orte_abort_on_non_zero_status 1) keeps the abort.
TEST(LauncherRecovery, WithoutABudgetTheOthersRunOnUnlessTheAbortIsKept) {
  for (const bool keep : {false, true}) {
    auto c = remote_job(2, 1);
    c.request.restarts.per_rank = true;
    c.request.restarts.keep_abort = keep;
    world w(std::move(c));
    w.exit_code[1] = 7;
    w.keep_running = {0};
    w.start();
    w.run(2s);
    if (keep) {
      ASSERT_TRUE(w.report);
      EXPECT_EQ(w.report->ranks_killed, 1u);
    } else {
      EXPECT_FALSE(w.report) << "the others were stopped";
      EXPECT_TRUE(w.received<link::signal_request>(0).empty());
    }
    EXPECT_TRUE(w.rank_restarts.empty());
  }
}

TEST(LauncherRecovery, TheSpentBudgetLeavesTheFailureToThePolicy) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 1;
  c.request.restarts.per_rank = true;
  world w(std::move(c));
  w.fail_times[1] = 5;
  w.keep_running = {0};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->failed_rank, 1u);
  EXPECT_EQ(w.rank_restarts.size(), 1u);
  EXPECT_EQ(w.started_times[1], 2);
  EXPECT_FALSE(w.said("(2 of 1)"));
}

TEST(Launcher, ASignalOrATimeoutIsNeverRestarted) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.keep_running = {0, 1};
  w.start();
  w.run(1s);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGTERM, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  EXPECT_TRUE(w.restarts.empty());
  EXPECT_TRUE(w.received<link::restart_request>(0).empty());

  auto t = remote_job(2, 1);
  t.request.restarts.max_restarts = 3;
  t.request.control.timeout = 2000ms;
  world timed(std::move(t));
  timed.keep_running = {0, 1};
  timed.start();
  timed.run();
  ASSERT_TRUE(timed.report);
  EXPECT_EQ(timed.report->cause, pm::cause_kind::timeout);
  EXPECT_TRUE(timed.restarts.empty());
}

TEST(Launcher, TheTimeoutBoundsEveryIncarnationTogether) {
  auto c = remote_job(1, 1);
  c.request.restarts.max_restarts = 5;
  c.request.control.timeout = 3000ms;
  world w(std::move(c));
  w.code_in[{0, 0}] = 7;
  w.keep_running_in[1] = {0};  // incarnation 0 fails at once, incarnation 1 runs for ever
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::timeout);
  EXPECT_LE(w.t, 3500ms);
}

TEST(Launcher, AHostLostWhileRestartingEndsTheLaunchWithTheFailure) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.silent_restart.insert(1);
  w.start();
  w.settle();
  // Host 1 falls silent after its failure: its restart answer never comes, then it is lost.
  w.agents[1].gone = true;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->cause, pm::cause_kind::rank_failed);
  EXPECT_TRUE(w.said("cannot restart the job: host h1 was lost"));
  ASSERT_EQ(w.report->incarnations.size(), 1u);
  EXPECT_EQ(w.received<link::spawn_request>(0).size(), 1u);  // no second incarnation anywhere
}

TEST(Launcher, AnInterruptBetweenIncarnationsEndsTheLaunchByIt) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.backoff_base = 1000ms;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.code_in[{1, 1}] = 7;
  w.start();
  w.run(700ms);  // incarnation 1 failed too; the second restart waits its 1 s
  ASSERT_EQ(w.restarts.size(), 2u);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  EXPECT_EQ(w.report->exit_code, 128 + SIGINT);
  EXPECT_TRUE(w.said("interrupted by SIGINT while restarting"));
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.received<link::spawn_request>(1).size(), 2u);  // incarnation 2 never started
}

TEST(Launcher, WithPmixEachIncarnationHasItsOwnNamespace) {
  auto c = remote_job(2, 1);
  c.request.pmix = true;
  c.request.restarts.max_restarts = 1;
  world w(std::move(c));
  w.code_in[{0, 0}] = 3;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto setups = w.received<link::job_setup>(h);
    ASSERT_EQ(setups.size(), 1u);
    ASSERT_TRUE(setups[0].pmix);
    EXPECT_EQ(setups[0].pmix->nspace, "pmrun.test");
    const auto restarts = w.received<link::restart_request>(h);
    ASSERT_EQ(restarts.size(), 1u);
    ASSERT_TRUE(restarts[0].pmix);
    EXPECT_EQ(restarts[0].pmix->nspace, "pmrun.test.r1");
    EXPECT_EQ(restarts[0].pmix->node, h);
  }
}

// ---- spare hosts and fewer hosts (docs/resilience.md) ----

// `hosts` job hosts of `per_host` ranks and `spares` more hosts the map leaves empty.
launch::launch_config spare_job(std::uint32_t hosts, std::uint32_t spares, std::uint32_t per_host) {
  auto c = remote_job(hosts + spares, per_host);
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"app"}, hosts * per_host, {}, {}});
  c.request.map = pm::map_job(spec, c.request.map.allocation());
  c.request.apps = spec.apps;
  c.request.restarts.max_restarts = 2;
  return c;
}

// Host h's agent and everything on it die: its link breaks.
void crash(world& w, std::uint32_t h) {
  w.agents[h].gone = true;
  w.feed([&](auto& a) { w.m.stream_broken(w.t, h, "Connection reset by peer", a); });
}

std::vector<std::uint32_t> spawned_ranks(const world& w, std::uint32_t h, std::size_t request) {
  std::vector<std::uint32_t> v;
  const auto spawns = w.received<link::spawn_request>(h);
  if (request >= spawns.size()) return v;
  for (const auto& r : spawns[request].ranks) v.push_back(r.rank);
  return v;
}

// On hosts shared with other jobs (a DVM's: launch_config::claims_spawn_slots) a spawn's slots
// are claimed before any of its ranks is announced: refused, the caller hears why and nothing
// starts; claimed, its ranks start there.
TEST(LauncherSpares, ASpawnOnSharedHostsClaimsItsSlotsFirst) {
  auto c = spare_job(1, 1, 2);  // h0 runs ranks 0 and 1; h1's 2 slots are free
  c.request.restarts.max_restarts = 0;
  c.request.pmix = true;
  c.claims_spawn_slots = true;
  world w(std::move(c));
  w.keep_running = {0, 1};
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  const auto ask = [&](std::uint64_t id) {
    link::pmix_spawn q;
    q.id = id;
    q.apps.push_back(link::spawn_app_spec{{"child"}, {}, {}, 2, {}});
    w.agents[0].ep->send(q);
    w.flush_agent(0);
    w.settle();
  };
  const auto answer = [&](std::size_t claim, std::string refusal) {
    w.feed([&](auto& a) { w.m.slots_claimed(w.t, w.claims.at(claim).id, refusal, a); });
    w.settle();
  };
  ask(1);
  ASSERT_EQ(w.claims.size(), 1u);
  EXPECT_EQ(w.claims[0].slots, (std::vector<std::pair<std::string, std::uint32_t>>{{"h1", 2}}));
  EXPECT_FALSE(w.claims[0].share);
  const auto added_on_h1 = [&] {
    return w.agents.contains(1) ? w.received<link::job_add>(1).size() : std::size_t{0};
  };
  EXPECT_EQ(added_on_h1(), 0u);
  answer(0, "host h1 has 0 free slots, not 2");
  auto replies = w.received<link::pmix_spawn_reply>(0);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_FALSE(replies[0].ok);
  EXPECT_EQ(replies[0].error, "its slots could not be claimed: host h1 has 0 free slots, not 2");
  EXPECT_TRUE(w.said("MPI_Comm_spawn (PMIx_Spawn) refused: its slots could not be claimed"));
  EXPECT_EQ(added_on_h1(), 0u);
  // The next spawn asks for the same places (the refused one holds none) and gets them.
  ask(2);
  ASSERT_EQ(w.claims.size(), 2u);
  EXPECT_EQ(w.claims[1].slots, w.claims[0].slots);
  answer(1, "");
  w.run(w.t + 1s);
  EXPECT_EQ(added_on_h1(), 1u);
  EXPECT_EQ(spawned_ranks(w, 1, 0), (std::vector<std::uint32_t>{2, 3}));
  replies = w.received<link::pmix_spawn_reply>(0);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[1].ok) << replies[1].error;
}

TEST(LauncherSpares, ALostHostsRanksMoveToASpareWithTheirNumbers) {
  world w(spare_job(2, 1, 2));
  w.keep_running_in[0] = {0, 1, 2, 3};
  w.start();
  w.run(1s);
  // The spare's agent is up from the start, with no rank.
  EXPECT_EQ(w.opens[2], 1);
  EXPECT_TRUE(w.received<link::spawn_request>(2).empty());
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(w.said("restarting the job (1 of 2): host h1 was lost")) << w.lines.front();
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
  EXPECT_EQ(w.opens[1], 1);  // never opened again: quarantined
  ASSERT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(spawned_ranks(w, 0, 1), (std::vector<std::uint32_t>{0, 1}));
  const auto spawns = w.received<link::spawn_request>(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& r = spawns[0].ranks[i];
    EXPECT_EQ(env_of(r, "RANK"), std::to_string(2 + i));
    EXPECT_EQ(env_of(r, "LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(env_of(r, "NODE_RANK"), "1");  // the lost host's node number
    EXPECT_EQ(env_of(r, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_of(r, "MASTER_ADDR"), "10.0.0.1");  // rank 0 stayed on h0
  }
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].cause, pm::cause_kind::host_lost);
  EXPECT_EQ(w.report->incarnations[1].hosts, 2u);
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
  EXPECT_EQ(w.report->quarantined[0].incarnation, 0u);
  const auto json = pm::to_json(*w.report);
  const auto at = json.find("\"quarantined\": [");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_NE(json.find("\"host\": \"h1\"", at), std::string::npos) << json;
}

TEST(LauncherSpares, RankZerosHostLostMovesMasterAddrToTheSpare) {
  world w(spare_job(2, 1, 1));
  w.keep_running_in[0] = {0, 1};
  w.start();
  w.run(1s);
  crash(w, 0);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  const auto spawns = w.received<link::spawn_request>(2);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "RANK"), "0");
  EXPECT_EQ(env_of(spawns[0].ranks[0], "MASTER_ADDR"), "10.0.0.3");
  // The spare's answer to the restart gave the port.
  EXPECT_EQ(env_of(spawns[0].ranks[0], "MASTER_PORT"), "29501");
  const auto other = w.received<link::spawn_request>(1);
  ASSERT_EQ(other.size(), 2u);
  EXPECT_EQ(env_of(other[1].ranks[0], "MASTER_ADDR"), "10.0.0.3");
}

TEST(LauncherSpares, WithoutASpareMinHostsGoesOnWithFewerRanks) {
  auto c = remote_job(3, 2);
  c.request.restarts.max_restarts = 2;
  c.request.restarts.min_hosts = 2;
  world w(std::move(c));
  w.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  w.start();
  w.run(1s);
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(w.said("going on with 2 hosts and 4 ranks (--min-hosts 2)"));
  EXPECT_EQ(spawned_ranks(w, 0, 1), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(spawned_ranks(w, 2, 1), (std::vector<std::uint32_t>{2, 3}));
  const auto spawns = w.received<link::spawn_request>(2);
  EXPECT_EQ(env_of(spawns[1].ranks[0], "WORLD_SIZE"), "4");
  EXPECT_EQ(env_of(spawns[1].ranks[0], "NODE_RANK"), "1");
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].size, 6u);
  EXPECT_EQ(w.report->incarnations[1].size, 4u);
  EXPECT_EQ(w.report->ranks.size(), 4u);

  // Fewer than --min-hosts would be left: the loss ends the launch.
  auto d = remote_job(3, 2);
  d.request.restarts.max_restarts = 2;
  d.request.restarts.min_hosts = 3;
  world few(std::move(d));
  few.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  few.start();
  few.run(1s);
  crash(few, 1);
  few.run();
  ASSERT_TRUE(few.report);
  EXPECT_EQ(few.report->cause, pm::cause_kind::host_lost);
  EXPECT_EQ(few.report->exit_code, pm::exit_codes::host_lost);
  EXPECT_TRUE(few.restarts.empty());
}

TEST(LauncherSpares, AHostLostWhileRestartingIsReplacedAndEveryAgentAskedAgain) {
  auto c = spare_job(2, 1, 1);
  c.request.pmix = true;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.silent_restart.insert(1);
  w.start();
  w.settle();
  // Host 1 falls silent after its rank's failure, then is lost while the launch waits for it.
  w.agents[1].gone = true;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("rank 1 moves from h1 to spare h2"));
  EXPECT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{1}));
  // Asked once for where it ran, again (with the new facts) for where it runs now.
  const auto asked = w.received<link::restart_request>(0);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0].incarnation, asked[1].incarnation);
  const auto spare = w.received<link::restart_request>(2);
  ASSERT_EQ(spare.size(), 2u);
  ASSERT_TRUE(spare[0].pmix && spare[1].pmix);
  EXPECT_EQ(spare[0].pmix->node, link::no_node);
  EXPECT_EQ(spare[1].pmix->node, 1u);  // the lost host's node
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
}

TEST(LauncherSpares, ALostSpareIsQuarantinedAndTheJobGoesOn) {
  world w(spare_job(1, 1, 1));
  w.keep_running_in[0] = {0};
  w.start();
  w.run(1s);
  crash(w, 1);
  w.run(2s);
  EXPECT_TRUE(w.said("spare host h1 was lost (")) << (w.lines.empty() ? "" : w.lines.back());
  EXPECT_FALSE(w.report);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGTERM, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
}

// How often the one spare of a 1-host job was opened when the job ran with `policy`.
int spare_opens(void (*policy)(pm::restart_policy&)) {
  auto c = spare_job(1, 1, 1);
  policy(c.request.restarts);
  world w(std::move(c));
  w.start();
  w.run();
  EXPECT_TRUE(w.report);
  return w.opens[1];
}

// A lost host's ranks' stdin goes with the host, the others' at the restart; the next
// incarnation (on the spare too) reads /dev/null.
TEST(LauncherSpares, StdinIsReleasedWithALostHostAndAtTheRestart) {
  auto c = spare_job(2, 1, 2);
  c.stdin_of.assign(4, launch::stdin_source::own);
  world w(std::move(c));
  w.keep_running_in[0] = {0, 1, 2, 3};
  w.start();
  w.run(1s);
  EXPECT_TRUE(w.released.empty());
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  ASSERT_GE(w.released.size(), 2u);
  auto first = std::vector<std::uint32_t>(w.released.begin(), w.released.begin() + 2);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<std::uint32_t>{2, 3}));  // with the host, before the restart
  auto released = w.released;
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  auto pumped = w.pumped;
  std::sort(pumped.begin(), pumped.end());
  EXPECT_EQ(pumped, (std::vector<std::uint32_t>{0, 1, 2, 3}));  // incarnation 0 only
  for (std::uint32_t h : {0u, 2u}) {
    const auto spawns = w.received<link::spawn_request>(h);
    ASSERT_FALSE(spawns.empty());
    for (const auto& r : spawns.back().ranks) EXPECT_FALSE(r.stdin_from_launcher) << r.rank;
  }
}

TEST(LauncherSpares, NoSpareStartsWithoutRestartsOrWhenTurnedOff) {
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.max_restarts = 0; }), 0);
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.spares = false; }), 0);
  // --enable-recovery never restarts the whole job: a spare would never be used.
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.per_rank = true; }), 0);
  EXPECT_EQ(spare_opens([](pm::restart_policy&) {}), 1);
}

}  // namespace

// ---- hosts that join at a restart: --host-discovery-script (docs/resilience.md) ----

namespace {

launch::launcher::discovery found(std::vector<std::pair<std::string, std::uint32_t>> hosts) {
  launch::launcher::discovery d;
  for (auto& [name, slots] : hosts) d.hosts.push_back(pm::host{name, slots, 0, true, false});
  return d;
}

// Runs the job until its hosts are up, crashes host `h`, runs it to its end.
void crash_midrun(world& w, std::uint32_t h) {
  w.start();
  w.run(1s);
  crash(w, h);
  w.run();
}

// Every ssh to host `h` fails for good.
void unreachable(world& w, std::uint32_t h) {
  for (int i = 0; i < 20; ++i)  // every try, retries included
    w.ssh_fails[h].push_back(pm::agent_end{"ssh exited with code 255: No route to host", false});
}

launch::launch_config discovering_job(std::uint32_t hosts, std::uint32_t per_host) {
  auto c = remote_job(hosts, per_host);
  c.request.restarts.max_restarts = 2;
  c.request.restarts.host_discovery = "./hosts.sh";
  return c;
}

TEST(LauncherDiscovery, ALostHostsRanksMoveToAHostTheCommandNames) {
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({{"h0", 2}, {"h2", 2}}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  w.start();
  w.run(1s);
  EXPECT_TRUE(w.commands.empty());  // run at a restart only
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_EQ(w.commands, std::vector<std::string>{"./hosts.sh"});
  EXPECT_EQ(w.bounds, std::vector<std::chrono::milliseconds>{10s});  // restart_policy's default
  EXPECT_TRUE(w.said("host h2 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
  EXPECT_EQ(w.opens[2], 1);
  EXPECT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{2, 3}));
  const auto spawns = w.received<link::spawn_request>(2);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "NODE_RANK"), "1");
  EXPECT_EQ(env_of(spawns[0].ranks[0], "WORLD_SIZE"), "4");
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
  EXPECT_EQ(w.report->incarnations.back().hosts, 2u);
}

TEST(LauncherDiscovery, WhenItNamesNoHostTheRestartEndsInOneLine) {
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::host_lost);
  EXPECT_EQ(w.report->exit_code, pm::exit_codes::host_lost);
  EXPECT_TRUE(
      w.said("cannot restart the job: no spare or discovered host takes the ranks of lost host h1"))
      << w.lines.back();
  // Never "restarting the job" before it: that restart had no place yet, and did not come.
  EXPECT_FALSE(w.said("restarting the job")) << ::testing::PrintToString(w.lines);
  EXPECT_TRUE(w.said("; the job's restart (1 of 2) waits for --host-discovery-script"))
      << ::testing::PrintToString(w.lines);
}

// A host lost with budget left but nowhere for its ranks (no spare, no --min-hosts): the launch
// ends with the loss, and says why it did not restart (it ended in silence).
TEST(LauncherSpares, ALossWithNoPlaceSaysWhyItIsNotRestarted) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 2;
  world w(std::move(c));
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, pm::exit_codes::host_lost);
  EXPECT_TRUE(w.said("cannot restart the job: no spare takes the ranks of lost host h1"))
      << ::testing::PrintToString(w.lines);
  EXPECT_FALSE(w.said("restarting the job")) << ::testing::PrintToString(w.lines);
}

TEST(LauncherDiscovery, AFailedCommandIsOneLineAndTheSpareTakesTheRanks) {
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world w(std::move(c));
  w.discoveries.push_back(launch::launcher::discovery{{}, "'./hosts.sh' exited with code 3"});
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(
      w.said("host discovery failed: './hosts.sh' exited with code 3; going on with the "
             "hosts there are"));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
}

TEST(LauncherDiscovery, AShrunkJobGrowsBackOntoAHostThatJoins) {
  auto c = discovering_job(3, 2);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.min_hosts = 2;
  world w(std::move(c));
  w.discoveries.push_back(found({}));           // at the first restart: nothing new
  w.discoveries.push_back(found({{"h3", 2}}));  // at the second: h3 is there
  w.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  w.code_in[{1, 0}] = 7;  // the shrunk job fails once more
  w.keep_running_in[1] = {1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("going on with 2 hosts and 4 ranks (--min-hosts 2)"));
  EXPECT_TRUE(w.said("host h3 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("growing back to 3 hosts and 6 ranks (--min-hosts 2)"));
  ASSERT_EQ(w.report->incarnations.size(), 3u);
  EXPECT_EQ(w.report->incarnations[0].size, 6u);
  EXPECT_EQ(w.report->incarnations[1].size, 4u);
  EXPECT_EQ(w.report->incarnations[2].size, 6u);
  EXPECT_EQ(w.report->incarnations[2].hosts, 3u);
  EXPECT_EQ(w.commands.size(), 2u);
  const auto spawns = w.received<link::spawn_request>(3);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].ranks.size(), 2u);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "WORLD_SIZE"), "6");
}

TEST(LauncherDiscovery, AQuarantinedHostComesBackOnlyWhenNothingElseIsLeft) {
  // Nothing else: the lost host, named again, gets a new agent and its ranks back.
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({{"h0", 2}, {"h1", 2}}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said(
      "nothing else is left: lost host h1 is tried again (--host-discovery-script named it)"));
  EXPECT_EQ(w.opens[1], 2);
  EXPECT_EQ(spawned_ranks(w, 1, 0), (std::vector<std::uint32_t>{2, 3}));  // its new agent's first

  // A spare is there: the lost host stays out.
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world s(std::move(c));
  s.discoveries.push_back(found({{"h1", 2}}));
  s.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(s, 1);
  ASSERT_TRUE(s.report);
  EXPECT_EQ(s.report->exit_code, 0);
  EXPECT_EQ(s.opens[1], 1);
  EXPECT_TRUE(s.said("ranks 2-3 move from h1 to spare h2"));
}

TEST(LauncherDiscovery, AHostThatJoinsButNeverComesUpIsQuarantinedAndTheRestartGoesOn) {
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world w(std::move(c));
  w.discoveries.push_back(found({{"h3", 2}}));
  unreachable(w, 3);
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("host h3 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("spare host h3 was lost ("));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
}

}  // namespace

namespace {

// A host whose ssh is retrying when another host's failure comes is not given up when the launch
// may restart: the restart waits for it, then places the ranks with what came up.
TEST(LauncherSpares, AHostStillBeingSetUpWhenTheFailureComesIsAwaitedNotLost) {
  world w(spare_job(2, 1, 1));
  w.ssh_fails[0] = {pm::agent_end{"ssh exited with code 255: Connection refused", true}};
  unreachable(w, 1);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_EQ(w.opens[0], 2);  // its retry went on
  EXPECT_TRUE(w.said("rank 1 moves from h1 to spare h2")) << w.lines.back();
  EXPECT_EQ(spawned_ranks(w, 0, 0), (std::vector<std::uint32_t>{0}));
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);

  // Without restarts the set-up is given up at once, as before.
  auto c = spare_job(2, 1, 1);
  c.request.restarts.max_restarts = 0;
  world once(std::move(c));
  once.ssh_fails[0] = {pm::agent_end{"ssh exited with code 255: Connection refused", true}};
  unreachable(once, 1);
  once.start();
  once.run();
  ASSERT_TRUE(once.report);
  EXPECT_NE(once.report->exit_code, 0);
  EXPECT_EQ(once.opens[0], 1);
}

}  // namespace
