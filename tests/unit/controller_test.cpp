// The controller, driven directly: exact actions, exit codes and lines for each failure rule.
#include <signal.h>

#include <gtest/gtest.h>

#include "pm/controller.hpp"

namespace {

using namespace std::chrono_literals;

pm::rank_map make_map(std::uint32_t hosts, std::uint32_t slots) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  for (std::uint32_t h = 0; h < hosts; ++h)
    a.hosts.push_back(pm::host{"node" + std::to_string(h), slots});
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, hosts * slots, {}, {}});
  return pm::map_job(j, a);
}

// A small driver: feeds events, keeps every action, tracks timers.
struct harness {
  pm::rank_map map;
  pm::controller ctl;
  std::vector<pm::action> actions;
  pm::job_time now{0};

  harness(std::uint32_t hosts, std::uint32_t slots, pm::controller_options o = {})
      : map(make_map(hosts, slots)), ctl(map, o) {}

  std::vector<pm::action> feed(const pm::event& e) {
    std::vector<pm::action> out;
    now += 1ms;
    ctl.handle(now, e, out);
    actions.insert(actions.end(), out.begin(), out.end());
    return out;
  }
  void start_all() {
    feed(pm::job_start{});
    for (std::uint32_t r = 0; r < map.size(); ++r) feed(pm::rank_started{r, 1000 + r});
  }
  void close_streams(std::uint32_t rank) {
    feed(pm::stream_closed{rank, pm::stream_kind::out, 0});
    feed(pm::stream_closed{rank, pm::stream_kind::err, 0});
  }
  std::vector<pm::action> end(std::uint32_t rank, pm::exit_status st) {
    close_streams(rank);
    return feed(pm::rank_exited{rank, st});
  }
  template <class T>
  std::vector<T> all(const std::vector<pm::action>& list) const {
    std::vector<T> out;
    for (const auto& a : list) {
      if (auto* p = std::get_if<T>(&a)) out.push_back(*p);
    }
    return out;
  }
  std::optional<pm::job_report> finished_report() const {
    auto f = all<pm::finish>(actions);
    if (f.empty()) return std::nullopt;
    EXPECT_EQ(f.size(), 1u);
    return f[0].report;
  }
};

TEST(Controller, SpawnsPerHostAndFinishesWhenAllSucceeded) {
  harness h(2, 2);
  auto out = h.feed(pm::job_start{});
  auto spawns = h.all<pm::spawn>(out);
  ASSERT_EQ(spawns.size(), 2u);
  EXPECT_EQ(spawns[1].host, 1u);
  EXPECT_EQ(spawns[1].ranks, (std::vector<std::uint32_t>{2, 3}));
  for (std::uint32_t r = 0; r < 4; ++r) h.feed(pm::rank_started{r, 1});
  for (std::uint32_t r = 0; r < 4; ++r) h.end(r, pm::exit_status::exited(0));
  auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_EQ(report->cause, pm::cause_kind::none);
  EXPECT_TRUE(h.ctl.finished());
}

TEST(Controller, WaitsForEveryStreamBeforeFinishing) {
  harness h(1, 1);
  h.start_all();
  h.feed(pm::rank_exited{0, pm::exit_status::exited(0)});  // exit before the last output
  h.feed(pm::stream_closed{0, pm::stream_kind::out, 10});
  EXPECT_FALSE(h.finished_report());
  h.feed(pm::stream_closed{0, pm::stream_kind::out, 10});  // a duplicate changes nothing
  EXPECT_FALSE(h.finished_report());
  h.feed(pm::stream_closed{0, pm::stream_kind::err, 0});
  EXPECT_TRUE(h.finished_report());
}

TEST(Controller, FirstFailureAbortsWithContThenTermThenKill) {
  harness h(2, 4);
  h.start_all();
  auto out = h.end(3, pm::exit_status::exited(7));
  auto sigs = h.all<pm::signal_ranks>(out);
  ASSERT_EQ(sigs.size(), 4u);  // CONT and TERM for each of the two hosts
  EXPECT_EQ(sigs[0].signo, SIGCONT);
  EXPECT_EQ(sigs[1].signo, SIGTERM);
  EXPECT_EQ(sigs[0].ranks, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(sigs[3].ranks, (std::vector<std::uint32_t>{4, 5, 6, 7}));
  auto lines = h.all<pm::emit>(out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].line,
            "rank 3 on node0 exited with code 7; aborting the job (SIGTERM to 7 ranks)");
  auto timers = h.all<pm::start_timer>(out);
  ASSERT_EQ(timers.size(), 1u);
  EXPECT_EQ(timers[0].after, 3000ms);
  // Ranks 0..5 obey SIGTERM; 6 and 7 ignore it: the grace timer sends SIGKILL to them only.
  for (std::uint32_t r : {0u, 1u, 2u, 4u, 5u}) h.end(r, pm::exit_status::signaled(SIGTERM));
  out = h.feed(pm::timer_fired{timers[0].timer});
  sigs = h.all<pm::signal_ranks>(out);
  ASSERT_EQ(sigs.size(), 1u);
  EXPECT_EQ(sigs[0].signo, SIGKILL);
  EXPECT_EQ(sigs[0].ranks, (std::vector<std::uint32_t>{6, 7}));
  h.end(6, pm::exit_status::signaled(SIGKILL));
  h.end(7, pm::exit_status::signaled(SIGKILL));
  auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 7);
  EXPECT_EQ(report->cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(report->failed_rank, 3u);
  EXPECT_EQ(report->summary, "rank 3 on node0 exited with code 7");
  EXPECT_EQ(report->ranks_failed, 1u);
  EXPECT_EQ(report->ranks_killed, 7u);
  EXPECT_EQ(report->ranks[6].state, pm::rank_state::killed);
}

TEST(Controller, GraceTimerIsCancelledWhenEveryoneObeys) {
  harness h(1, 2);
  h.start_all();
  auto out = h.end(0, pm::exit_status::signaled(SIGSEGV));
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "rank 0 on node0 was killed by SIGSEGV; aborting the job (SIGTERM to 1 rank)");
  const auto timer = h.all<pm::start_timer>(out)[0].timer;
  out = h.end(1, pm::exit_status::exited(143));  // killed by the abort: not a failure
  auto cancels = h.all<pm::cancel_timer>(out);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].timer, timer);
  auto report = h.finished_report();
  EXPECT_EQ(report->exit_code, 128 + SIGSEGV);
  EXPECT_EQ(report->ranks_failed, 1u);
  // A timer that fires after its cancel is ignored.
  EXPECT_TRUE(h.feed(pm::timer_fired{timer}).empty());
}

TEST(Controller, NoAbortLetsTheOthersRun) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(1, 3, o);
  h.start_all();
  auto out = h.end(1, pm::exit_status::exited(3));
  EXPECT_TRUE(h.all<pm::signal_ranks>(out).empty());
  EXPECT_EQ(h.all<pm::emit>(out)[0].line, "rank 1 on node0 exited with code 3");
  h.end(2, pm::exit_status::exited(4));  // a later failure does not change the outcome
  h.end(0, pm::exit_status::exited(0));
  auto report = h.finished_report();
  EXPECT_EQ(report->exit_code, 3);
  EXPECT_EQ(report->ranks_failed, 2u);
  EXPECT_EQ(report->ranks[0].state, pm::rank_state::exited);
}

TEST(Controller, SpawnFailure) {
  harness h(1, 2);
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 5});
  auto out =
      h.feed(pm::rank_spawn_failed{1, 127, "cannot execute '/x': No such file or directory"});
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "rank 1 on node0 could not start: cannot execute '/x': No such file or directory; "
            "aborting the job (SIGTERM to 1 rank)");
  h.end(0, pm::exit_status::signaled(SIGTERM));
  auto report = h.finished_report();
  EXPECT_EQ(report->exit_code, 127);
  EXPECT_EQ(report->cause, pm::cause_kind::spawn_failed);
}

TEST(Controller, HostLoss) {
  harness h(2, 2);
  h.start_all();
  auto out = h.feed(pm::host_lost{1, "agent channel closed"});
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "host node1 was lost (agent channel closed); its 2 ranks failed; aborting the job "
            "(SIGTERM to 2 ranks)");
  h.end(0, pm::exit_status::signaled(SIGTERM));
  h.end(1, pm::exit_status::signaled(SIGTERM));
  auto report = h.finished_report();  // the lost ranks' streams do not hold the job
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, pm::exit_codes::host_lost);
  EXPECT_EQ(report->ranks[2].state, pm::rank_state::lost);
}

TEST(Controller, HostLossDropsTheStreamsOfRanksThatHadEnded) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(2, 1, o);
  h.start_all();
  h.end(0, pm::exit_status::exited(0));
  h.feed(pm::rank_exited{1, pm::exit_status::exited(0)});  // its output is still on the way...
  EXPECT_FALSE(h.finished_report());
  h.feed(pm::host_lost{1, "agent channel closed"});  // ...when its host is lost
  auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);  // it had ended by itself, successfully
}

TEST(Controller, SignalToTheLauncherAndEscalation) {
  harness h(1, 2);
  h.start_all();
  auto out = h.feed(pm::signal_received{SIGINT});
  auto sigs = h.all<pm::signal_ranks>(out);
  ASSERT_EQ(sigs.size(), 2u);
  EXPECT_EQ(sigs[1].signo, SIGINT);
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "interrupted by SIGINT; aborting the job (SIGINT to 2 ranks)");
  out = h.feed(pm::signal_received{SIGINT});  // a second Ctrl-C
  sigs = h.all<pm::signal_ranks>(out);
  ASSERT_EQ(sigs.size(), 1u);
  EXPECT_EQ(sigs[0].signo, SIGKILL);
  h.end(0, pm::exit_status::signaled(SIGKILL));
  h.end(1, pm::exit_status::signaled(SIGKILL));
  auto report = h.finished_report();
  EXPECT_EQ(report->cause, pm::cause_kind::signal);
  EXPECT_EQ(report->signal, SIGINT);
  EXPECT_EQ(report->exit_code, 128 + SIGINT);
}

TEST(Controller, ForwardedSignals) {
  harness h(1, 2);
  h.start_all();
  for (int signo : {SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) {
    auto sigs = h.all<pm::signal_ranks>(h.feed(pm::signal_received{signo}));
    ASSERT_EQ(sigs.size(), 1u);
    EXPECT_EQ(sigs[0].signo, signo);
    EXPECT_EQ(sigs[0].ranks.size(), 2u);
  }
  EXPECT_FALSE(h.finished_report());
}

TEST(Controller, Timeout) {
  pm::controller_options o;
  o.timeout = 2500ms;
  harness h(1, 1, o);
  auto out = h.feed(pm::job_start{});
  auto timer = h.all<pm::start_timer>(out);
  ASSERT_EQ(timer.size(), 1u);
  EXPECT_EQ(timer[0].after, 2500ms);
  h.feed(pm::rank_started{0, 1});
  out = h.feed(pm::timer_fired{timer[0].timer});
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "job timed out after 2.5 s; aborting the job (SIGTERM to 1 rank)");
  h.end(0, pm::exit_status::signaled(SIGTERM));
  EXPECT_EQ(h.finished_report()->exit_code, pm::exit_codes::timeout);
}

TEST(Controller, AbortRequestedByARank) {
  harness h(1, 3);
  h.start_all();
  auto out = h.feed(pm::abort_requested{2, 42, "bad input"});
  EXPECT_EQ(h.all<pm::emit>(out)[0].line,
            "rank 2 on node0 called abort with status 42: bad input; aborting the job (SIGTERM to "
            "3 ranks)");
  for (std::uint32_t r = 0; r < 3; ++r) h.end(r, pm::exit_status::signaled(SIGTERM));
  EXPECT_EQ(h.finished_report()->exit_code, 42);
}

TEST(Controller, RankStartingDuringTheAbortIsSignalledAtOnce) {
  harness h(1, 2);
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 1});
  h.end(0, pm::exit_status::exited(1));
  auto sigs = h.all<pm::signal_ranks>(h.feed(pm::rank_started{1, 2}));
  ASSERT_EQ(sigs.size(), 2u);
  EXPECT_EQ(sigs[1].signo, SIGTERM);
  EXPECT_EQ(sigs[1].ranks, (std::vector<std::uint32_t>{1}));
}

TEST(Controller, ImpossibleEventsAreIgnored) {
  harness h(1, 1);
  EXPECT_TRUE(h.feed(pm::rank_started{0, 1}).empty());  // before job_start
  h.start_all();
  EXPECT_TRUE(h.feed(pm::rank_exited{99, pm::exit_status::exited(1)}).empty());
  EXPECT_TRUE(h.feed(pm::stream_closed{99, pm::stream_kind::out, 1}).empty());
  EXPECT_TRUE(h.feed(pm::timer_fired{12345}).empty());
  EXPECT_TRUE(h.feed(pm::host_lost{7, "x"}).empty());
  h.end(0, pm::exit_status::exited(0));
  ASSERT_TRUE(h.finished_report());
  // Nothing after the finish.
  EXPECT_TRUE(h.feed(pm::rank_exited{0, pm::exit_status::exited(9)}).empty());
  EXPECT_TRUE(h.feed(pm::signal_received{SIGINT}).empty());
  EXPECT_EQ(h.ctl.report().exit_code, 0);
}

TEST(Controller, ReportJson) {
  harness h(1, 2);
  h.start_all();
  h.end(1, pm::exit_status::exited(5));
  h.end(0, pm::exit_status::signaled(SIGTERM));
  const auto json = pm::to_json(*h.finished_report());
  EXPECT_NE(json.find("\"exit_code\": 5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"cause\": \"rank_failed\""), std::string::npos);
  EXPECT_NE(json.find("\"signal\": \"SIGTERM\""), std::string::npos);
  EXPECT_NE(json.find("\"state\": \"killed\""), std::string::npos);
}

}  // namespace
