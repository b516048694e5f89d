// The node agent's state machine (what pmd decides), without processes.
#include "agent/agent.hpp"

#include <algorithm>
#include <csignal>

#include <gtest/gtest.h>

namespace pm::agent {
namespace {

using namespace std::chrono_literals;
namespace ch = pm::link;

struct harness {
  agent a{options{{"PATH=/usr/bin:/bin", "HOME=/root", "OMPI_COMM_WORLD_RANK=5"}, 5000ms, 20ms}};
  std::vector<action> out;
  agent_time now{0};

  std::vector<action> feed(const event& e) {
    out.clear();
    now += 1ms;
    a.handle(now, e, out);
    return out;
  }
  std::vector<action> msg(ch::message m) { return feed(received{std::move(m)}); }

  // The job's setup: a grace of 1 s, one app.
  static ch::job_setup setup() {
    ch::job_setup j;
    j.grace_ms = 1000;
    j.apps.push_back(ch::app_spec{{"true"}, "", {}});
    return j;
  }
  // setup + spawn of `n` ranks with pids 100+rank; returns nothing.
  void start(std::uint32_t n, ch::job_setup j = setup()) {
    msg(std::move(j));
    ch::spawn_request s;
    for (std::uint32_t r = 0; r < n; ++r) s.ranks.push_back(spec(r));
    msg(s);
    for (std::uint32_t r = 0; r < n; ++r) feed(rank_spawned{r, 100 + r});
  }
  static ch::rank_spec spec(std::uint32_t r) { return ch::rank_spec{r, 0, {}, false}; }
};

template <class T>
std::vector<T> all(const std::vector<action>& v) {
  std::vector<T> r;
  for (const auto& a : v) {
    if (const T* t = std::get_if<T>(&a)) r.push_back(*t);
  }
  return r;
}
std::vector<ch::message> sent(const std::vector<action>& v) {
  std::vector<ch::message> r;
  for (const auto& s : all<send>(v)) r.push_back(s.msg);
  return r;
}
std::vector<std::pair<std::int64_t, int>> signals(const std::vector<action>& v) {
  std::vector<std::pair<std::int64_t, int>> r;
  for (const auto& s : all<signal_group>(v)) r.emplace_back(s.pgid, s.signo);
  std::sort(r.begin(), r.end());
  return r;
}

TEST(Agent, RequiresTheJobSetupFirst) {
  harness h;
  const auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{"'spawn' message before 'job'"}}));
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  // Nothing runs, so it goes straight to the sweep, and exits once nothing is left.
  EXPECT_EQ(all<sweep>(a).size(), 1u);
  const auto b = h.feed(swept{0});
  ASSERT_EQ(all<exit_agent>(b).size(), 1u);
  EXPECT_EQ(all<exit_agent>(b)[0].code, exit_after_launcher_lost);
  EXPECT_TRUE(h.a.done());
}

TEST(Agent, RefusesASecondSetup) {
  harness h;
  EXPECT_TRUE(h.msg(harness::setup()).empty());
  EXPECT_EQ(sent(h.msg(harness::setup())),
            (std::vector<ch::message>{ch::agent_error{"second 'job' message"}}));
}

TEST(Agent, RefusesMessagesMeantForTheLauncher) {
  harness h;
  h.msg(harness::setup());
  const auto a = h.msg(ch::exited{{{0, exit_status::exited(0)}}});
  EXPECT_EQ(
      sent(a),
      (std::vector<ch::message>{ch::agent_error{"unexpected 'exited' message from the launcher"}}));
}

TEST(Agent, ComposesEachRankEnvironmentOnItsOwnHost) {
  harness h;
  auto j = harness::setup();
  j.base = {"OMPI_MCA_btl=self,tcp"};
  j.overrides = {"RANK_X=override", "HOME=/x"};
  j.apps[0].env = {"APP_ONLY=1", "HOME=/app"};
  j.apps[0].wdir = "/tmp";
  j.streams = 1;
  j.forward_output = true;
  h.msg(j);
  const auto a =
      h.msg(ch::spawn_request{{ch::rank_spec{0, 0, {"RANK=0", "RANK_X=profile"}, true}}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 1u);
  const auto p = all<spawn_rank>(a)[0].spec;
  // Its own environment without an outer job's identity, the job's base, the profile, the -x
  // overrides, the app's own variables; a later one wins, and stands where it wins (HOME: the
  // app's, after APP_ONLY), as pm::rank_environment has it (env/compose.hpp).
  EXPECT_EQ(p.environment(),
            (std::vector<std::string>{"OMPI_MCA_btl=self,tcp", "PATH=/usr/bin:/bin", "RANK=0",
                                      "RANK_X=override", "APP_ONLY=1", "HOME=/app"}));
  EXPECT_EQ(p.argv, (std::vector<std::string>{"true"}));
  EXPECT_EQ(p.wdir, "/tmp");
  EXPECT_EQ(p.streams, 1);
  EXPECT_TRUE(p.forward_output);
  EXPECT_TRUE(p.stdin_from_launcher);
}

// Without the driver's answers about the host's files (a simulated host) the program and the
// working directory stay as the job gave them; with them the machine decides both.
TEST(Agent, PlacesARankOnlyWithTheDriversAnswersAboutItsFiles) {
  harness h;
  auto j = harness::setup();
  j.cwd = "/launcher/dir";
  h.msg(j);
  auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 1u);
  EXPECT_EQ(all<spawn_rank>(a)[0].spec.program, "");
  EXPECT_EQ(all<spawn_rank>(a)[0].spec.wdir, "/launcher/dir");

  struct only_bin_true final : host_files {
    file_facts look(const std::string& path) const override {
      return path == "/bin/true" ? file_facts{file_facts::kind::executable, 0} : file_facts{};
    }
    std::string working_directory() const override { return "/"; }
  } files;
  agent b{options{{"PATH=/usr/bin:/bin", "HOME=/root"}, 1000ms, 20ms, &files}};
  std::vector<action> out;
  b.handle(1ms, received{j}, out);
  out.clear();
  b.handle(2ms, received{ch::spawn_request{{harness::spec(0)}}}, out);
  ASSERT_EQ(all<spawn_rank>(out).size(), 1u);
  EXPECT_EQ(all<spawn_rank>(out)[0].spec.program, "/bin/true");
  EXPECT_EQ(all<spawn_rank>(out)[0].spec.wdir, "/root");  // the launcher's is not on this host
}

// A spawn request for many ranks queues one action per rank; each holds its own profile variables
// and points at the job's shared parts: a 100 KB -x variable is held once, not once per rank.
TEST(Agent, QueuedSpawnsShareTheJobEnvironment) {
  harness h;
  auto j = harness::setup();
  j.overrides = {"BIG=" + std::string(100000, 'x')};
  h.msg(j);
  std::vector<ch::rank_spec> specs;
  for (std::uint32_t r = 0; r < 64; ++r)
    specs.push_back(ch::rank_spec{r, 0, {"RANK=" + std::to_string(r)}, false});
  const auto a = h.msg(ch::spawn_request{specs});
  const auto spawns = all<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 64u);
  std::size_t held = 0;
  for (const auto& s : spawns) {
    for (const auto& v : s.spec.profile) held += v.size();
    EXPECT_EQ(s.spec.overrides, spawns[0].spec.overrides);  // the one copy the agent keeps
  }
  EXPECT_LT(held, 1000u);
  const auto env = spawns[63].spec.environment();  // composed when the rank starts
  EXPECT_NE(std::find(env.begin(), env.end(), "RANK=63"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "BIG=" + std::string(100000, 'x')), env.end());
}

TEST(Agent, ARankOfAnAppTheJobDoesNotHaveFails) {
  harness h;
  h.msg(harness::setup());
  const auto a = h.msg(ch::spawn_request{{ch::rank_spec{3, 2, {}, false}}});
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  EXPECT_EQ(
      sent(a),
      (std::vector<ch::message>{ch::spawn_failed{3, 127, "rank 3 names app 2, the job has 1"}}));
}

TEST(Agent, AForwardedStreamThatEndsIsReported) {
  harness h;
  h.start(1);
  EXPECT_EQ(sent(h.feed(output_ended{0, output_stream::err, 42})),
            (std::vector<ch::message>{ch::stream_closed{{{0, output_stream::err, 42}}}}));
}

TEST(Agent, SpawnsReportsStartedAndExitsWithoutReaping) {
  harness h;
  h.msg(harness::setup());
  const auto a = h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 2u);
  EXPECT_EQ(all<spawn_rank>(a)[1].spec.rank, 1u);
  EXPECT_EQ(sent(h.feed(rank_spawned{0, 100})),
            (std::vector<ch::message>{ch::started{{{0, 100}}}}));
  EXPECT_EQ(sent(h.feed(rank_spawn_failed{1, 126, "cannot execute"})),
            (std::vector<ch::message>{ch::spawn_failed{1, 126, "cannot execute"}}));
  const auto x = h.feed(rank_exited{0, exit_status::signaled(9)});
  EXPECT_EQ(sent(x), (std::vector<ch::message>{ch::exited{{{0, exit_status::signaled(9)}}}}));
  // The leader stays a zombie: no sweep, no reap of it while the job runs.
  EXPECT_TRUE(all<sweep>(x).empty());
  EXPECT_TRUE(all<reap_orphans>(x).empty());
  // A duplicate exit report changes nothing.
  EXPECT_TRUE(h.feed(rank_exited{0, exit_status::exited(0)}).empty());
}

TEST(Agent, RefusesARankTwice) {
  harness h;
  h.start(1);
  const auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  EXPECT_EQ(sent(a), (std::vector<ch::message>{
                         ch::spawn_failed{0, 127, "rank 0 was already started by this agent"}}));
}

// --enable-recovery: a rank whose process ended is taken again; its group is swept first and the
// driver forgets the old leader before it starts the new one.
TEST(Agent, TakesARankAgainOnceItsProcessEnded) {
  harness h;
  h.start(2);
  h.feed(rank_exited{1, exit_status::exited(7)});
  const auto a = h.msg(ch::spawn_request{{harness::spec(1)}});
  ASSERT_EQ(a.size(), 3u);
  const auto* kill = std::get_if<signal_group>(&a[0]);
  ASSERT_NE(kill, nullptr);
  EXPECT_EQ(kill->pgid, 101);
  EXPECT_EQ(kill->signo, SIGKILL);
  ASSERT_NE(std::get_if<forget_rank>(&a[1]), nullptr);
  EXPECT_EQ(std::get<forget_rank>(a[1]).rank, 1u);
  ASSERT_NE(std::get_if<spawn_rank>(&a[2]), nullptr);
  EXPECT_EQ(std::get<spawn_rank>(a[2]).spec.rank, 1u);
  EXPECT_EQ(sent(h.feed(rank_spawned{1, 201})),
            (std::vector<ch::message>{ch::started{{{1, 201}}}}));
  // Signals reach the new process's group; the new exit is reported once.
  const auto sig = h.msg(ch::signal_request{{1}, SIGTERM});
  ASSERT_EQ(all<signal_group>(sig).size(), 1u);
  EXPECT_EQ(all<signal_group>(sig)[0].pgid, 201);
  EXPECT_EQ(sent(h.feed(rank_exited{1, exit_status::exited(0)})),
            (std::vector<ch::message>{ch::exited{{{1, exit_status::exited(0)}}}}));
  // A rank still running is refused as before.
  const auto again = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_TRUE(all<spawn_rank>(again).empty());
}

TEST(Agent, SignalsGroupsAlsoOfRanksThatEnded) {
  harness h;
  h.start(3);
  h.feed(rank_exited{1, exit_status::exited(0)});
  // Rank 1's leader is an unreaped zombie, so its group id is still safe to signal.
  const auto a = h.msg(ch::signal_request{{0, 1, 9}, SIGUSR1});
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGUSR1}, {101, SIGUSR1}}));
}

TEST(Agent, OrphansAreReapedWhileTheJobRuns) {
  harness h;
  h.start(1);
  EXPECT_EQ(all<reap_orphans>(h.feed(child_changed{})).size(), 1u);
}

TEST(Agent, ShutdownKillsEveryGroupThenSweepsUntilNoChildIsLeft) {
  harness h;
  h.start(2);
  h.feed(rank_exited{0, exit_status::exited(0)});
  const auto a = h.msg(ch::shutdown_request{});
  // SIGKILL to every group (the ended rank's too: its children may live on), then the sweep.
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  ASSERT_EQ(all<sweep>(a).size(), 1u);
  EXPECT_TRUE(std::holds_alternative<sweep>(a.back()));  // after the kills
  // Children remain (reparented orphans): sweep again on the next SIGCHLD or timer.
  const auto b = h.feed(swept{3});
  ASSERT_EQ(all<start_timer>(b).size(), 1u);
  EXPECT_EQ(all<start_timer>(b)[0].after, 20ms);
  EXPECT_EQ(all<sweep>(h.feed(child_changed{})).size(), 1u);
  EXPECT_EQ(all<sweep>(h.feed(timer_fired{all<start_timer>(b)[0].timer})).size(), 1u);
  const auto c = h.feed(swept{0});
  EXPECT_EQ(sent(c), (std::vector<ch::message>{ch::shutdown_done{}}));
  ASSERT_EQ(all<exit_agent>(c).size(), 1u);
  EXPECT_EQ(all<exit_agent>(c)[0].code, exit_after_shutdown);
  EXPECT_TRUE(h.a.done());
  EXPECT_TRUE(h.feed(child_changed{}).empty());  // nothing after the exit
}

TEST(Agent, LauncherLossTermsThenKillsAfterTheGrace) {
  harness h;
  h.start(2);
  const auto a = h.feed(channel_lost{"agent channel closed"});
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}, {101, SIGTERM}}));
  ASSERT_EQ(all<start_timer>(a).size(), 1u);
  EXPECT_EQ(all<start_timer>(a)[0].after, 1000ms);  // the job's grace, not the agent's 5 s
  // Nothing is sent any more, and launcher-side requests are gone with the channel.
  EXPECT_TRUE(sent(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})).empty());
  const auto b = h.feed(timer_fired{all<start_timer>(a)[0].timer});
  EXPECT_EQ(signals(b),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  EXPECT_EQ(all<sweep>(b).size(), 1u);
  const auto c = h.feed(swept{0});
  EXPECT_TRUE(sent(c).empty());
  EXPECT_EQ(all<exit_agent>(c).at(0).code, exit_after_launcher_lost);
}

TEST(Agent, LauncherLossDoesNotWaitTheGraceOnceEveryRankEnded) {
  harness h;
  h.start(2);
  const auto a = h.feed(channel_lost{"closed"});
  const auto timer = all<start_timer>(a).at(0).timer;
  EXPECT_TRUE(all<sweep>(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})).empty());
  const auto b = h.feed(rank_exited{1, exit_status::exited(0)});
  EXPECT_EQ(signals(b),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  EXPECT_EQ(all<sweep>(b).size(), 1u);
  // The grace timer, now stale, does nothing.
  EXPECT_TRUE(h.feed(timer_fired{timer}).empty());
}

TEST(Agent, ARankSpawnedAfterTheEndBeganIsKilledToo) {
  harness h;
  h.msg(harness::setup());
  h.msg(ch::spawn_request{{harness::spec(0)}});
  h.msg(ch::shutdown_request{});
  const auto a = h.feed(rank_spawned{0, 100});
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}}));
  EXPECT_EQ(sent(h.msg(ch::spawn_request{{harness::spec(1)}})),
            (std::vector<ch::message>{ch::spawn_failed{1, 127, "the agent is shutting down"}}));
}

TEST(Agent, ItsOwnSigtermIsSaidAndTreatedAsLauncherLoss) {
  harness h;
  h.start(1);
  const auto a = h.feed(terminate_requested{SIGTERM});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{
                         ch::agent_notice{"the agent received SIGTERM; it ends its ranks"}}));
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}}));
  // Exits are still reported while the channel is open.
  EXPECT_EQ(sent(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})),
            (std::vector<ch::message>{ch::exited{{{0, exit_status::signaled(SIGTERM)}}}}));
}

TEST(Agent, GarbageFromTheLauncherIsAnsweredAndEndsTheJob) {
  harness h;
  h.start(1);
  const auto a = h.feed(bad_message{"agent link: empty frame"});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{"agent link: empty frame"}}));
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}}));
}

TEST(Agent, LauncherSignalsAreIgnoredOnceTheAgentKillsOnItsOwn) {
  harness h;
  h.start(1);
  h.feed(terminate_requested{SIGTERM});
  EXPECT_TRUE(signals(h.msg(ch::signal_request{{0}, SIGCONT})).empty());
}

// A job a rank spawned (job_add): its apps count on from the first job's, so a spawn names them
// by their index among all apps; the jobs must come in order.
TEST(Agent, ASpawnedJobsAppsFollowTheFirstJobs) {
  harness h;
  h.msg(harness::setup());
  EXPECT_TRUE(
      h.msg(ch::job_add{1, 2, 1, {ch::app_spec{{"child", "x"}, "/w", {"C=1"}}}, std::nullopt})
          .empty());
  const auto a = h.msg(ch::spawn_request{{ch::rank_spec{2, 1, {"P=2"}, false}}});
  const auto spawns = all<spawn_rank>(a);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].spec.rank, 2u);
  EXPECT_EQ(spawns[0].spec.argv, (std::vector<std::string>{"child", "x"}));
  EXPECT_EQ(spawns[0].spec.wdir, "/w");
  const auto env = spawns[0].spec.environment();
  EXPECT_NE(std::find(env.begin(), env.end(), "C=1"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "P=2"), env.end());
  // An app past every job's is refused as before.
  EXPECT_EQ(
      sent(h.msg(ch::spawn_request{{ch::rank_spec{3, 2, {}, false}}})),
      (std::vector<ch::message>{ch::spawn_failed{3, 127, "rank 3 names app 2, the job has 2"}}));
}

TEST(Agent, AJobAddedOutOfOrderIsAProtocolError) {
  harness h;
  h.msg(harness::setup());
  const auto a = h.msg(ch::job_add{2, 1, 1, {ch::app_spec{{"child"}, "", {}}}, std::nullopt});
  EXPECT_EQ(sent(a),
            (std::vector<ch::message>{ch::agent_error{"'job_add' of job 2 out of order"}}));
}

// ---- restarts in place (docs/agent.md, "Restarts") ----

// A job whose output is forwarded (2 streams per rank): the restart waits for those too.
ch::job_setup forwarded_setup() {
  auto j = harness::setup();
  j.forward_output = true;
  j.streams = 2;
  return j;
}
// A job whose output pipes go to a local launcher: no stream to wait for.
ch::job_setup local_setup() {
  auto j = harness::setup();
  j.forward_output = false;
  return j;
}

TEST(Agent, RestartKillsEveryGroupThenSweepsRanksOnly) {
  harness h;
  h.start(3);
  h.feed(rank_exited{1, exit_status::exited(3)});  // its leftovers may live on
  const auto a = h.msg(ch::restart_request{1, std::nullopt});
  // SIGKILL to every group, the ended rank's too (its leader is an unreaped zombie), then the
  // ranks-only sweep: never the full sweep, no exit.
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{
                            {100, SIGKILL}, {101, SIGKILL}, {102, SIGKILL}}));
  ASSERT_EQ(all<sweep_ranks>(a).size(), 1u);
  EXPECT_TRUE(std::holds_alternative<sweep_ranks>(a.back()));
  EXPECT_TRUE(all<sweep>(a).empty());
  EXPECT_TRUE(sent(a).empty());
  // Children left: again on a timer and on SIGCHLD (which never reaps orphans alone now).
  const auto b = h.feed(ranks_swept{2, 0});
  ASSERT_EQ(all<start_timer>(b).size(), 1u);
  EXPECT_EQ(all<start_timer>(b)[0].after, 20ms);
  EXPECT_EQ(all<sweep_ranks>(h.feed(timer_fired{all<start_timer>(b)[0].timer})).size(), 1u);
  const auto c = h.feed(child_changed{});
  EXPECT_EQ(all<sweep_ranks>(c).size(), 1u);
  EXPECT_TRUE(all<reap_orphans>(c).empty());
  EXPECT_FALSE(h.a.done());
}

TEST(Agent, RestartedComesOnlyOnceNothingOfTheRanksIsLeft) {
  harness h;
  h.start(2, local_setup());
  h.msg(ch::restart_request{1, std::nullopt});
  // The sweep found nothing but the ranks' exits are not known yet: no answer.
  EXPECT_TRUE(sent(h.feed(ranks_swept{0, 4242})).empty());
  EXPECT_EQ(sent(h.feed(rank_exited{0, exit_status::signaled(SIGKILL)})),
            (std::vector<ch::message>{ch::exited{{{0, exit_status::signaled(SIGKILL)}}}}));
  const auto a = h.feed(rank_exited{1, exit_status::signaled(SIGKILL)});
  // The last exit is said first, then `restarted` with the port the clean sweep gave, then the
  // driver forgets the ranks.
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::exited{{{1, exit_status::signaled(SIGKILL)}}},
                                               ch::restarted{1, 4242}}));
  ASSERT_EQ(all<forget_ranks>(a).size(), 1u);
  EXPECT_TRUE(std::holds_alternative<forget_ranks>(a.back()));
}

TEST(Agent, RestartedWaitsForACleanSweepAfterTheExits) {
  harness h;
  h.start(1, local_setup());
  h.msg(ch::restart_request{1, std::nullopt});
  h.feed(rank_exited{0, exit_status::signaled(SIGKILL)});
  // A leftover is still there.
  EXPECT_TRUE(sent(h.feed(ranks_swept{1, 0})).empty());
  EXPECT_EQ(sent(h.feed(ranks_swept{0, 7})), (std::vector<ch::message>{ch::restarted{1, 7}}));
}

TEST(Agent, RestartedWaitsForEveryForwardedStreamOfTheRanks) {
  harness h;
  h.msg(forwarded_setup());
  h.msg(ch::spawn_request{{harness::spec(0)}});
  h.feed(rank_spawned{0, 100});
  h.feed(output_ended{0, output_stream::err, 0});  // one ended before the restart
  h.msg(ch::restart_request{1, std::nullopt});
  h.feed(rank_exited{0, exit_status::signaled(SIGKILL)});
  EXPECT_TRUE(sent(h.feed(ranks_swept{0, 9})).empty());  // stdout has not ended
  const auto a = h.feed(output_ended{0, output_stream::out, 12});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::stream_closed{{{0, output_stream::out, 12}}},
                                               ch::restarted{1, 9}}));
}

TEST(Agent, RestartForgetsTheRanksSoTheSameNumbersSpawnAgain) {
  harness h;
  h.msg(forwarded_setup());
  h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  h.feed(rank_spawned{0, 100});
  h.feed(rank_spawned{1, 101});
  // A spawned job's apps are forgotten too: the next job_add is job 1 again.
  h.msg(ch::job_add{1, 2, 1, {ch::app_spec{{"child"}, "", {}}}, std::nullopt});
  h.msg(ch::restart_request{1, std::nullopt});
  for (std::uint32_t r = 0; r < 2; ++r) {
    h.feed(rank_exited{r, exit_status::signaled(SIGKILL)});
    h.feed(output_ended{r, output_stream::out, 0});
    h.feed(output_ended{r, output_stream::err, 0});
  }
  EXPECT_EQ(sent(h.feed(ranks_swept{0, 5})), (std::vector<ch::message>{ch::restarted{1, 5}}));
  // The same rank numbers, with new pids; signals reach the new groups only.
  const auto a = h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 2u);
  EXPECT_TRUE(sent(a).empty());
  h.feed(rank_spawned{0, 200});
  EXPECT_EQ(signals(h.msg(ch::signal_request{{0, 1}, SIGTERM})),
            (std::vector<std::pair<std::int64_t, int>>{{200, SIGTERM}}));
  EXPECT_TRUE(
      sent(h.msg(ch::job_add{1, 2, 1, {ch::app_spec{{"child"}, "", {}}}, std::nullopt})).empty());
  // A second restart, after the first.
  h.feed(rank_spawned{1, 201});
  const auto b = h.msg(ch::restart_request{2, std::nullopt});
  EXPECT_EQ(signals(b),
            (std::vector<std::pair<std::int64_t, int>>{{200, SIGKILL}, {201, SIGKILL}}));
}

TEST(Agent, AStaleIncarnationIsAProtocolError) {
  harness h;
  h.start(1);
  const auto a = h.msg(ch::restart_request{0, std::nullopt});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{
                         "'restart' to incarnation 0, which is not after incarnation 0"}}));
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}}));
  EXPECT_TRUE(all<sweep_ranks>(a).empty());
}

TEST(Agent, ARestartBeforeTheLastWasAnsweredIsAProtocolError) {
  harness h;
  h.start(1);
  h.msg(ch::restart_request{2, std::nullopt});
  const auto a = h.msg(ch::restart_request{3, std::nullopt});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{
                         "'restart' to incarnation 3 before incarnation 2 was ready"}}));
  // The ranks had their SIGKILL: straight to the end.
  EXPECT_EQ(all<sweep>(a).size(), 1u);
}

// The launcher placed the next incarnation anew (a host was lost while it waited): it asks for
// the same restart again. Before the answer, one answer covers both; after it, with no rank of
// the new incarnation started, the agent answers again through a fresh sweep (a fresh port).
TEST(Agent, TheSameRestartAgainIsAnsweredOnceMoreOnlyAfterItsAnswer) {
  harness h;
  h.start(1, local_setup());
  h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_TRUE(h.msg(ch::restart_request{1, std::nullopt}).empty());
  h.feed(rank_exited{0, exit_status::signaled(SIGKILL)});
  EXPECT_EQ(sent(h.feed(ranks_swept{0, 7})), (std::vector<ch::message>{ch::restarted{1, 7}}));
  const auto a = h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_TRUE(sent(a).empty());
  ASSERT_EQ(all<sweep_ranks>(a).size(), 1u);
  EXPECT_TRUE(signals(a).empty());  // no rank to kill
  const auto b = h.feed(ranks_swept{0, 8});
  EXPECT_EQ(sent(b), (std::vector<ch::message>{ch::restarted{1, 8}}));
  EXPECT_EQ(all<forget_ranks>(b).size(), 1u);
  // Once a rank of it started, the same incarnation again is the launcher's mistake.
  h.msg(ch::spawn_request{{harness::spec(0)}});
  h.feed(rank_spawned{0, 300});
  const auto c = h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_EQ(sent(c), (std::vector<ch::message>{ch::agent_error{
                         "'restart' to incarnation 1, which is not after incarnation 1"}}));
}

TEST(Agent, ARestartWhileEndingIsIgnored) {
  harness h;
  h.start(1);
  h.feed(channel_lost{"closed"});  // terminating
  EXPECT_TRUE(h.msg(ch::restart_request{1, std::nullopt}).empty());
  harness g;
  g.start(1);
  g.msg(ch::shutdown_request{});  // clearing
  EXPECT_TRUE(g.msg(ch::restart_request{1, std::nullopt}).empty());
}

TEST(Agent, SpawnsWhileRestartingAreAProtocolErrorAndSignalsAreIgnored) {
  harness h;
  h.start(1);
  h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_TRUE(h.msg(ch::signal_request{{0}, SIGTERM}).empty());
  const auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_EQ(sent(a),
            (std::vector<ch::message>{ch::agent_error{"'spawn' before incarnation 1 was ready"}}));
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  EXPECT_EQ(all<sweep>(a).size(), 1u);  // the end: everything is killed and swept
}

TEST(Agent, ARankStillSpawningDuringARestartIsKilledWhenItsPidComes) {
  harness h;
  h.msg(local_setup());
  h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  h.feed(rank_spawned{0, 100});
  const auto a = h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}}));
  h.feed(rank_exited{0, exit_status::signaled(SIGKILL)});
  // A clean sweep before rank 1 came: no answer, rank 1 is not accounted for.
  EXPECT_TRUE(sent(h.feed(ranks_swept{0, 1})).empty());
  const auto b = h.feed(rank_spawned{1, 101});
  EXPECT_EQ(sent(b), (std::vector<ch::message>{ch::started{{{1, 101}}}}));
  EXPECT_EQ(signals(b), (std::vector<std::pair<std::int64_t, int>>{{101, SIGKILL}}));
  EXPECT_EQ(all<sweep_ranks>(b).size(), 1u);
  // Its exit alone is not enough: the sweep after it must find nothing.
  EXPECT_TRUE(sent(h.feed(rank_exited{1, exit_status::signaled(SIGKILL)})).size() == 1u);
  EXPECT_EQ(sent(h.feed(ranks_swept{0, 3})), (std::vector<ch::message>{ch::restarted{1, 3}}));
}

TEST(Agent, ARankThatFailsToSpawnDuringARestartIsReportedAndNotWaitedFor) {
  harness h;
  h.msg(harness::setup());
  h.msg(ch::spawn_request{{harness::spec(0)}});
  h.msg(ch::restart_request{1, std::nullopt});
  EXPECT_TRUE(sent(h.feed(ranks_swept{0, 8})).empty());
  EXPECT_EQ(sent(h.feed(rank_spawn_failed{0, 127, "gone"})),
            (std::vector<ch::message>{ch::spawn_failed{0, 127, "gone"}, ch::restarted{1, 8}}));
}

TEST(Agent, TheLauncherLostDuringARestartEndsTheAgent) {
  harness h;
  h.start(1);
  h.msg(ch::restart_request{1, std::nullopt});
  const auto a = h.feed(channel_lost{"closed"});
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}}));
  EXPECT_EQ(all<sweep>(a).size(), 1u);
  EXPECT_TRUE(h.feed(ranks_swept{0, 1}).empty());  // the restart's answer is void now
  h.feed(rank_exited{0, exit_status::signaled(SIGKILL)});
  const auto b = h.feed(swept{0});
  ASSERT_EQ(all<exit_agent>(b).size(), 1u);
  EXPECT_EQ(all<exit_agent>(b)[0].code, exit_after_launcher_lost);
}

// ---- --stall-timeout: the agent's quiet/active decisions (docs/resilience.md, "Stalls") ----

namespace stalls {

// A harness whose clock the test sets: the job watches stalls with a 1 s timeout, a look every
// 200 ms.
struct watch {
  agent a{options{{"PATH=/usr/bin:/bin"}, 5000ms, 20ms}};
  std::vector<action> out;
  agent_time now{0};

  std::vector<action> at(std::chrono::milliseconds t, event e) {
    out.clear();
    now = t;
    a.handle(now, std::move(e), out);
    return out;
  }
  void start(std::uint32_t n) {
    auto j = harness::setup();
    j.stall = ch::stall_watch{1000, 200};
    at(0ms, received{j});
    ch::spawn_request s;
    for (std::uint32_t r = 0; r < n; ++r) s.ranks.push_back(harness::spec(r));
    at(0ms, received{s});
  }
};

rank_sample sample(std::uint32_t rank, std::uint64_t cpu_ms, std::uint64_t written,
                   char state = 'S', std::string wchan = "futex_wait_queue") {
  rank_sample s;
  s.rank = rank;
  s.state = state;
  s.wchan = std::move(wchan);
  s.cpu_ms = cpu_ms;
  s.written = written;
  return s;
}

std::vector<std::pair<std::uint32_t, std::int64_t>> looked_at(const std::vector<action>& v) {
  const auto looks = all<sample_ranks>(v);
  return looks.empty() ? std::vector<std::pair<std::uint32_t, std::int64_t>>{} : looks[0].ranks;
}

TEST(AgentStall, LooksAtItsLiveRanksEverySamplePeriod) {
  watch w;
  w.start(2);
  // The first rank that runs starts the look timer; the second finds it running.
  const auto a = w.at(10ms, rank_spawned{0, 100});
  ASSERT_EQ(all<start_timer>(a).size(), 1u);
  EXPECT_EQ(all<start_timer>(a)[0].after, 200ms);
  EXPECT_TRUE(all<start_timer>(w.at(11ms, rank_spawned{1, 101})).empty());
  const auto b = w.at(210ms, timer_fired{all<start_timer>(a)[0].timer});
  EXPECT_EQ(looked_at(b),
            (std::vector<std::pair<std::uint32_t, std::int64_t>>{{0, 100}, {1, 101}}));
  EXPECT_TRUE(all<start_timer>(b).empty());  // the next look waits for this one's answer
  // The answer: both progressed (CPU grew from nothing); nothing to say, the next look in 200 ms.
  const auto c = w.at(210ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}});
  EXPECT_TRUE(sent(c).empty());
  ASSERT_EQ(all<start_timer>(c).size(), 1u);
  EXPECT_EQ(all<start_timer>(c)[0].after, 200ms);
}

TEST(AgentStall, TellsTheLauncherOnceWhenItsRanksTurnQuietAndOnceWhenOneProgresses) {
  watch w;
  w.start(2);
  w.at(0ms, rank_spawned{0, 100});
  w.at(0ms, rank_spawned{1, 101});
  // Both progress at 200 ms, then nothing grows.
  EXPECT_TRUE(sent(w.at(200ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}})).empty());
  EXPECT_TRUE(sent(w.at(1000ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}})).empty());
  // 999 ms after the last progress: not yet.
  EXPECT_TRUE(sent(w.at(1199ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}})).empty());
  EXPECT_EQ(sent(w.at(1200ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}})),
            (std::vector<ch::message>{ch::host_quiet{true, 2}}));
  // Still quiet: no second message.
  EXPECT_TRUE(sent(w.at(1400ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 5)}})).empty());
  // Rank 1 wrote: active again, once.
  EXPECT_EQ(sent(w.at(1600ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 9)}})),
            (std::vector<ch::message>{ch::host_quiet{false, 2}}));
  EXPECT_TRUE(sent(w.at(1800ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 9)}})).empty());
}

TEST(AgentStall, ARankThatExitsLeavesTheQuietOnesToDecide) {
  watch w;
  w.start(2);
  w.at(0ms, received{ch::spawn_request{{harness::spec(2)}}});  // starts later
  w.at(0ms, rank_spawned{0, 100});
  w.at(0ms, rank_spawned{1, 101});
  // Rank 0 stands still from the start; rank 1 keeps using CPU.
  w.at(200ms, ranks_sampled{{sample(0, 0, 0), sample(1, 10, 0)}});
  EXPECT_TRUE(sent(w.at(1200ms, ranks_sampled{{sample(0, 0, 0), sample(1, 20, 0)}})).empty());
  // Rank 1 ends: the host's only live rank has been quiet since its start.
  const auto x = sent(w.at(1300ms, rank_exited{1, exit_status::exited(0)}));
  EXPECT_EQ(x, (std::vector<ch::message>{ch::exited{{{1, exit_status::exited(0)}}},
                                         ch::host_quiet{true, 1}}));
  // A rank that starts is progress: active again.
  EXPECT_EQ(sent(w.at(1400ms, rank_spawned{2, 102})),
            (std::vector<ch::message>{ch::started{{{2, 102}}}, ch::host_quiet{false, 2}}));
  EXPECT_EQ(sent(w.at(1500ms, rank_exited{0, exit_status::exited(0)})),
            (std::vector<ch::message>{ch::exited{{{0, exit_status::exited(0)}}}}));
  // The last live rank ending says nothing more: the launcher counts hosts with live ranks only.
  EXPECT_EQ(sent(w.at(1600ms, rank_exited{2, exit_status::exited(0)})),
            (std::vector<ch::message>{ch::exited{{{2, exit_status::exited(0)}}}}));
}

TEST(AgentStall, AnswersAStallQueryWithWhatItLastSaw) {
  watch w;
  w.start(3);
  w.at(0ms, rank_spawned{0, 100});
  w.at(0ms, rank_spawned{1, 101});
  w.at(0ms, rank_spawned{2, 102});
  w.at(200ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 7, 'D', "io_schedule"),
                             sample(2, 40, 0, 'R', "")}});
  w.at(400ms, ranks_sampled{{sample(0, 20, 0), sample(1, 30, 7, 'D', "io_schedule"),
                             sample(2, 41, 0, 'R', "")}});
  w.at(450ms, rank_exited{2, exit_status::exited(0)});
  const auto a = sent(w.at(1500ms, received{ch::stall_query{7}}));
  ch::stall_report want{7,
                        {ch::rank_activity{0, 100, "S", "futex_wait_queue", 20, -1, 1300},
                         ch::rank_activity{1, 101, "D", "io_schedule", 30, 1300, 1300}}};
  EXPECT_EQ(a, (std::vector<ch::message>{want}));
}

TEST(AgentStall, WithoutAWatchNothingIsSampledAndAQueryNamesThePids) {
  harness h;
  h.msg(harness::setup());
  h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  EXPECT_TRUE(all<start_timer>(h.feed(rank_spawned{0, 100})).empty());
  h.feed(rank_spawned{1, 101});
  h.feed(rank_exited{1, exit_status::exited(0)});
  ch::rank_activity only;
  only.rank = 0;
  only.pid = 100;
  only.state = "?";
  EXPECT_EQ(sent(h.msg(ch::stall_query{3})),
            (std::vector<ch::message>{ch::stall_report{3, {only}}}));
}

TEST(AgentStall, LookingEndsWhenTheLauncherIsLost) {
  watch w;
  w.start(1);
  const auto a = w.at(0ms, rank_spawned{0, 100});
  const auto look = all<start_timer>(a).at(0).timer;
  const auto lost = w.at(100ms, channel_lost{"agent channel closed"});
  ASSERT_EQ(all<start_timer>(lost).size(), 1u);
  EXPECT_EQ(all<start_timer>(lost)[0].after, 1000ms);  // the grace
  // The look timer is void; an answer in flight changes nothing.
  EXPECT_TRUE(w.at(200ms, timer_fired{look}).empty());
  EXPECT_TRUE(w.at(200ms, ranks_sampled{{sample(0, 0, 0)}}).empty());
}

}  // namespace stalls

}  // namespace
}  // namespace pm::agent
