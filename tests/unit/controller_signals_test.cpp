// The controller, driven directly: how a job ends from outside it (signals, the timeout, a
// stall), impossible events, and ranks started again (--enable-recovery); the rest of
// docs/failure-semantics.md's rules are in controller_test.cpp.
#include <signal.h>

#include <gtest/gtest.h>

#include <sstream>

#include "pm/controller.hpp"
#include "support/controller_harness.hpp"
#include "support/describe_action.hpp"

namespace {

using namespace std::chrono_literals;
using strings = std::vector<std::string>;

using pm::test::describe;
using pm::test::make_map;
using pm::test::ranks_text;
using harness = pm::test::controller_harness;

const auto ok = pm::exit_status::exited(0);
const auto by_term = pm::exit_status::signaled(SIGTERM);
const auto by_kill = pm::exit_status::signaled(SIGKILL);

// ---- signals to the launcher ----

TEST(Controller, InterruptIsForwardedAndASecondOneKills) {
  for (int signo : {SIGINT, SIGTERM, SIGHUP}) {
    harness h(make_map({{"a", 2}, {"b", 1}}));
    h.start_all();
    const auto name = pm::signal_name(signo);
    EXPECT_EQ(
        h.feed(pm::signal_received{signo}),
        (strings{"signal 0 [0 1] SIGCONT", "signal 0 [0 1] " + name, "signal 1 [2] SIGCONT",
                 "signal 1 [2] " + name, "start_timer 1 3000ms",
                 "emit interrupted by " + name + "; aborting the job (" + name + " to 3 ranks)"}));
    h.end(2, pm::exit_status::signaled(signo));
    EXPECT_EQ(h.feed(pm::signal_received{signo}),
              (strings{"cancel_timer 1", "signal 0 [0 1] SIGKILL",
                       "emit received " + name + " again; sending SIGKILL to 2 ranks"}));
    h.end(0, by_kill);
    h.end(1, by_kill);
    const auto r = *h.finished_report();
    EXPECT_EQ(r.cause, pm::cause_kind::signal);
    EXPECT_EQ(r.signal, signo);
    EXPECT_EQ(r.exit_code, 128 + signo);
    EXPECT_EQ(r.summary, "interrupted by " + name);
    EXPECT_EQ(r.ranks_killed, 3u);
    EXPECT_EQ(r.ranks_failed, 0u);
  }
}

TEST(Controller, RankStartingAfterAnInterruptGetsThatSignal) {
  harness h(make_map({{"a", 2}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 1});
  h.feed(pm::signal_received{SIGHUP});
  EXPECT_EQ(h.feed(pm::rank_started{1, 2}),
            (strings{"signal 0 [1] SIGCONT", "signal 0 [1] SIGHUP"}));
}

TEST(Controller, InterruptDuringAFailureAbortKeepsTheFailureAsTheCause) {
  harness h(make_map({{"a", 3}}));
  h.start_all();
  h.end(0, pm::exit_status::exited(7));
  EXPECT_EQ(h.feed(pm::signal_received{SIGINT}),
            (strings{"signal 0 [1 2] SIGCONT", "signal 0 [1 2] SIGINT",
                     "emit received SIGINT while aborting; sent it to 2 ranks (send it again to "
                     "kill them at once)"}));
  h.end(1, pm::exit_status::signaled(SIGINT));
  EXPECT_EQ(h.feed(pm::signal_received{SIGTERM}),
            (strings{"cancel_timer 1", "signal 0 [2] SIGKILL",
                     "emit received SIGTERM again; sending SIGKILL to 1 rank"}));
  h.end(2, by_kill);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.signal, 0);  // the launcher ends by its exit code, not by the signal
}

TEST(Controller, InterruptAfterAFailureWithoutAbortKeepsTheFailure) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  h.end(0, pm::exit_status::exited(5));
  EXPECT_EQ(h.feed(pm::signal_received{SIGINT}).back(),
            "emit interrupted by SIGINT; aborting the job (SIGINT to 1 rank)");
  h.end(1, pm::exit_status::signaled(SIGINT));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.signal, 0);
}

TEST(Controller, OtherSignalsAreOnlyForwarded) {
  harness h(make_map({{"a", 2}, {"b", 1}}));
  h.start_all();
  h.end(2, ok);
  for (int signo : {SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) {
    EXPECT_EQ(h.feed(pm::signal_received{signo}),
              (strings{"signal 0 [0 1] " + pm::signal_name(signo)}));
  }
  EXPECT_TRUE(h.feed(pm::signal_received{SIGWINCH}).empty());  // not one we forward
  EXPECT_TRUE(h.all<pm::start_timer>().empty());
  h.end(0, ok);
  h.end(1, ok);
  EXPECT_EQ(h.finished_report()->exit_code, 0);
}

// ---- timers ----

TEST(Controller, Timeout) {
  pm::controller_options o;
  o.timeout = 2500ms;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  h.end(1, ok);
  EXPECT_EQ(h.feed(pm::timer_fired{1}),
            (strings{"signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "start_timer 2 3000ms",
                     "emit job timed out after 2.5 s; aborting the job (SIGTERM to 1 rank)"}));
  h.close_streams(0);
  EXPECT_EQ(h.feed(pm::rank_exited{0, by_term}), (strings{"cancel_timer 2", "finish 124 timeout"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.summary, "job timed out after 2.5 s");
  EXPECT_FALSE(r.failed_rank);
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::killed);
  EXPECT_EQ(r.ranks[1].state, pm::rank_state::exited);
}

TEST(Controller, TimeoutTimerIsCancelledAtTheFinish) {
  pm::controller_options o;
  o.timeout = 60000ms;
  harness h(make_map({{"a", 1}}), o);
  h.start_all();
  h.close_streams(0);
  EXPECT_EQ(h.feed(pm::rank_exited{0, ok}), (strings{"cancel_timer 1", "finish 0 none"}));
}

TEST(Controller, TimeoutOnceEveryRankEndedChangesNothing) {
  pm::controller_options o;
  o.timeout = 1000ms;
  harness h(make_map({{"a", 1}}), o);
  h.start_all();
  EXPECT_EQ(h.feed(pm::rank_exited{0, ok}), (strings{"clear_leftovers"}));
  EXPECT_TRUE(h.feed(pm::timer_fired{1}).empty());
  h.close_streams(0);
  EXPECT_EQ(h.finished_report()->exit_code, 0);
}

// ---- --stall-timeout: the launcher named the ranks; the job ends as a timeout does ----

TEST(Controller, AStalledJobIsAbortedWithCauseStalledAnd214) {
  pm::controller_options o;
  o.stall_timeout = 5000ms;
  harness h(make_map({{"a", 2}, {"b", 1}}), o);
  h.start_all();
  h.end(2, ok);
  EXPECT_EQ(h.feed(pm::job_stalled{}),
            (strings{"signal 0 [0 1] SIGCONT", "signal 0 [0 1] SIGTERM", "start_timer 1 3000ms",
                     "emit no rank progressed for 5 s (--stall-timeout); aborting the job "
                     "(SIGTERM to 2 ranks)"}));
  h.close_streams(0);
  h.close_streams(1);
  h.feed(pm::rank_exited{0, by_term});
  EXPECT_EQ(h.feed(pm::rank_exited{1, by_term}), (strings{"cancel_timer 1", "finish 214 stalled"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, pm::exit_codes::stalled);
  EXPECT_EQ(r.cause, pm::cause_kind::stalled);
  EXPECT_EQ(r.summary, "no rank progressed for 5 s (--stall-timeout)");
  EXPECT_FALSE(r.failed_rank);
  EXPECT_EQ(r.ranks_killed, 2u);
  EXPECT_EQ(r.ranks[2].state, pm::rank_state::exited);
  EXPECT_NE(pm::to_json(r).find("\"stalled\""), std::string::npos) << pm::to_json(r);
}

TEST(Controller, AStallEndsTheJobAlsoWithTheAbortPolicyOff) {
  pm::controller_options o;
  o.stall_timeout = 1500ms;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 1}}), o);
  h.start_all();
  EXPECT_EQ(h.feed(pm::job_stalled{}),
            (strings{"signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "start_timer 1 3000ms",
                     "emit no rank progressed for 1.5 s (--stall-timeout); aborting the job "
                     "(SIGTERM to 1 rank)"}));
}

TEST(Controller, AStallDuringAnAbortOrAfterTheLastRankChangesNothing) {
  pm::controller_options o;
  o.stall_timeout = 1000ms;
  {
    harness h(make_map({{"a", 2}}), o);
    h.start_all();
    h.end(0, pm::exit_status::exited(3));
    EXPECT_TRUE(h.feed(pm::job_stalled{}).empty());
    h.end(1, by_term);
    EXPECT_EQ(h.finished_report()->exit_code, 3);
    EXPECT_EQ(h.finished_report()->cause, pm::cause_kind::rank_failed);
  }
  {
    harness h(make_map({{"a", 1}}), o);
    h.start_all();
    EXPECT_EQ(h.feed(pm::rank_exited{0, ok}), (strings{"clear_leftovers"}));
    EXPECT_TRUE(h.feed(pm::job_stalled{}).empty());
    h.close_streams(0);
    EXPECT_EQ(h.finished_report()->exit_code, 0);
  }
}

TEST(Controller, TimeoutDuringAFailureAbortKeepsTheFailure) {
  pm::controller_options o;
  o.timeout = 1000ms;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  h.end(0, pm::exit_status::exited(3));
  EXPECT_TRUE(h.feed(pm::timer_fired{1}).empty());
  h.end(1, by_term);
  EXPECT_EQ(h.finished_report()->exit_code, 3);
}

TEST(Controller, TimerIdsAreUniqueAndUnknownTimersAreIgnored) {
  pm::controller_options o;
  o.timeout = 1000ms;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  EXPECT_TRUE(h.feed(pm::timer_fired{0}).empty());
  EXPECT_TRUE(h.feed(pm::timer_fired{99}).empty());
  h.feed(pm::timer_fired{1});                       // the timeout: starts grace timer 2
  EXPECT_TRUE(h.feed(pm::timer_fired{1}).empty());  // fired already
  const auto timers = h.all<pm::start_timer>();
  ASSERT_EQ(timers.size(), 2u);
  EXPECT_NE(timers[0].timer, timers[1].timer);
  h.feed(pm::timer_fired{2});
  EXPECT_TRUE(h.feed(pm::timer_fired{2}).empty());  // fired already
}

// ---- impossible events ----

TEST(Controller, DuplicateAndImpossibleEventsChangeNothing) {
  harness h(make_map({{"a", 2}}));
  h.start_all();
  EXPECT_TRUE(h.feed(pm::rank_started{0, 999}).empty());            // started twice
  EXPECT_TRUE(h.feed(pm::rank_spawn_failed{0, 127, "x"}).empty());  // after its start
  EXPECT_TRUE(h.feed(pm::rank_started{99, 1}).empty());
  EXPECT_TRUE(h.feed(pm::rank_exited{99, pm::exit_status::exited(1)}).empty());
  EXPECT_TRUE(h.feed(pm::rank_spawn_failed{99, 127, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::stream_closed{99, pm::stream_kind::out, 1}).empty());
  EXPECT_TRUE(h.feed(pm::stream_closed{0, static_cast<pm::stream_kind>(7), 1}).empty());
  EXPECT_TRUE(h.feed(pm::host_lost{7, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::abort_requested{99, 1, "x"}).empty());
  h.end(0, ok);
  EXPECT_TRUE(h.end(0, pm::exit_status::exited(9)).empty());  // exited twice, streams closed twice
  EXPECT_TRUE(h.feed(pm::abort_requested{0, 1, "x"}).empty());  // abort from an ended rank
  EXPECT_FALSE(h.ctl.finished());  // rank 1's streams are still open: the counters are intact
  h.end(1, ok);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.ranks[0].pid, 1000);
  EXPECT_EQ(r.ranks[0].status, ok);
}

TEST(Controller, MovedControllerKeepsItsState) {
  auto map = make_map({{"a", 1}});
  pm::controller a(map, {});
  std::vector<pm::action> out;
  a.handle(1ms, pm::job_start{}, out);
  a.handle(2ms, pm::rank_started{0, 1}, out);
  pm::controller b(std::move(a));
  out.clear();
  b.handle(3ms, pm::rank_exited{0, ok}, out);
  b.handle(4ms, pm::stream_closed{0, pm::stream_kind::out, 0}, out);
  b.handle(5ms, pm::stream_closed{0, pm::stream_kind::err, 0}, out);
  ASSERT_EQ(out.size(), 2u);  // clear_leftovers, then finish
  EXPECT_TRUE(b.finished());
}

}  // namespace

// ---- recovery: single ranks started again (controller_options::rank_restarts) ----

namespace {

pm::controller_options recovering(std::uint32_t budget) {
  pm::controller_options o;
  o.rank_restarts = budget;
  return o;
}

}  // namespace

TEST(ControllerRecovery, AFailedRankStartsAgainAloneOnceItsOutputEnded) {
  harness h(recovering(2));
  h.start_all();
  h.feed(pm::stream_closed{3, pm::stream_kind::out, 0});
  // Its exit: the line, SIGKILL to its group; no spawn while its stderr is open.
  EXPECT_EQ(h.feed(pm::rank_exited{3, pm::exit_status::exited(7)}),
            (strings{"restart_rank 3 on 0 #1 (its 1)",
                     "emit restarting rank 3 on a (1 of 2): rank 3 on a exited with code 7",
                     "signal 0 [3] SIGKILL"}));
  EXPECT_EQ(h.ctl.restarts_of(3), 1u);
  EXPECT_EQ(h.ctl.report().ranks[3].state, pm::rank_state::pending);
  EXPECT_EQ(h.feed(pm::stream_closed{3, pm::stream_kind::err, 0}), (strings{"spawn 0 [3]"}));
  // The other ranks were not touched; the new process runs and succeeds: the job succeeds.
  EXPECT_TRUE(h.all<pm::signal_ranks>().size() == 1);
  h.feed(pm::rank_started{3, 2003});
  for (std::uint32_t r = 0; r < 8; ++r) h.end(r, ok);
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_EQ(report->cause, pm::cause_kind::none);
  EXPECT_EQ(report->ranks_failed, 0u);
  ASSERT_EQ(report->rank_restarts.size(), 1u);
  EXPECT_EQ(report->rank_restarts[0].rank, 3u);
  EXPECT_EQ(report->rank_restarts[0].status, pm::exit_status::exited(7));
  EXPECT_EQ(report->rank_restarts[0].summary, "rank 3 on a exited with code 7");
  EXPECT_EQ(report->ranks[3].pid, 2003);
}

TEST(ControllerRecovery, OneBudgetForEveryRankThenTheFailurePolicy) {
  harness h(recovering(2));
  h.start_all();
  h.end(1, pm::exit_status::exited(3));  // restart 1 of 2
  EXPECT_EQ(h.all<pm::spawn>().back().ranks, (std::vector<std::uint32_t>{1}));
  h.feed(pm::rank_started{1, 2001});
  h.close_streams(6);
  EXPECT_EQ(h.feed(pm::rank_exited{6, by_kill}),  // a signal not ours: restart 2 of 2
            (strings{"restart_rank 6 on 1 #2 (its 1)",
                     "emit restarting rank 6 on b (2 of 2): rank 6 on b was killed by SIGKILL",
                     "signal 1 [6] SIGKILL", "spawn 1 [6]"}));
  h.feed(pm::rank_started{6, 2006});
  // The budget is spent: rank 1's second failure aborts the job as without recovery.
  const auto out = h.end(1, pm::exit_status::exited(4));
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(),
            "emit rank 1 on a exited with code 4; aborting the job (SIGTERM to 7 ranks)");
  for (std::uint32_t r = 0; r < 8; ++r) {
    if (r != 1) h.end(r, by_term);
  }
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 4);
  EXPECT_EQ(report->failed_rank, 1u);
  EXPECT_EQ(report->rank_restarts.size(), 2u);
  EXPECT_EQ(h.ctl.restarts_of(1), 1u);
  EXPECT_EQ(h.ctl.restarts_of(6), 1u);
}

TEST(ControllerRecovery, ProgramsThatCannotRunAndForwardedSignalsAreNotRecovered) {
  {
    harness h(recovering(5));
    h.start_all();
    const auto out = h.end(2, pm::exit_status::exited(127));
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.back(),
              "emit rank 2 on a exited with code 127; aborting the job (SIGTERM to 7 ranks)");
  }
  {
    harness h(recovering(5));
    h.start_all();
    h.feed(pm::signal_received{SIGUSR1});
    const auto out = h.end(2, pm::exit_status::signaled(SIGUSR1));
    ASSERT_FALSE(out.empty());
    EXPECT_TRUE(out.back().starts_with("emit rank 2 on a was killed by SIGUSR1; aborting"))
        << out.back();
  }
  {
    harness h(recovering(5));  // a spawn failure is never recovered either
    h.feed(pm::job_start{});
    const auto out = h.feed(pm::rank_spawn_failed{2, 127, "cannot execute 'app'"});
    ASSERT_FALSE(out.empty());
    EXPECT_TRUE(h.all<pm::rank_restarting>().empty());
  }
}

TEST(ControllerRecovery, AnAbortEndsARankWaitingForItsNextProcess) {
  harness h(recovering(3));
  h.start_all();
  h.feed(pm::rank_exited{5, pm::exit_status::exited(9)});  // its streams are still open
  EXPECT_EQ(h.all<pm::rank_restarting>().size(), 1u);
  h.feed(pm::signal_received{SIGINT});
  EXPECT_EQ(h.ctl.report().ranks[5].state, pm::rank_state::exited);
  h.close_streams(5);
  EXPECT_TRUE(h.all<pm::spawn>().size() == 2u);  // the two of job_start: no respawn
  for (std::uint32_t r = 0; r < 8; ++r) {
    if (r != 5) h.end(r, by_term);
  }
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->cause, pm::cause_kind::signal);
  EXPECT_EQ(report->exit_code, 128 + SIGINT);
}

TEST(ControllerRecovery, ARankEndingWithoutFinalizeStartsAgain) {
  harness h(recovering(1));
  h.start_all();
  h.end(0, ok);
  EXPECT_EQ(h.feed(pm::rank_unfinalized{0, ok}),
            (strings{"restart_rank 0 on 0 #1 (its 1)",
                     "emit restarting rank 0 on a (1 of 1): rank 0 on a exited with code 0 "
                     "without calling MPI_Finalize (PMIx_Finalize)",
                     "signal 0 [0] SIGKILL", "spawn 0 [0]"}));
  h.feed(pm::rank_started{0, 2000});
  for (std::uint32_t r = 0; r < 8; ++r) h.end(r, ok);
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);
}

// The real order: the agent sends the notice with the process's end, before its exit report.
// The rank starts again at the notice; the exit report that follows is the failed process's,
// dropped (taken for the new process's, it ended the rank at once).
TEST(ControllerRecovery, ARankEndingWithoutFinalizeStartsAgainWhenTheNoticeComesFirst) {
  harness h(recovering(1));
  h.start_all();
  EXPECT_EQ(h.feed(pm::rank_unfinalized{0, ok}),
            (strings{"restart_rank 0 on 0 #1 (its 1)",
                     "emit restarting rank 0 on a (1 of 1): rank 0 on a exited with code 0 "
                     "without calling MPI_Finalize (PMIx_Finalize)",
                     "signal 0 [0] SIGKILL"}));
  // Its streams' ends let the spawn go; the failed process's own report that follows is dropped.
  const auto before = h.all<pm::spawn>().size();
  EXPECT_TRUE(h.end(0, ok).empty());
  EXPECT_EQ(h.all<pm::spawn>().size(), before + 1);
  EXPECT_EQ(h.ctl.rank_report_of(0).state, pm::rank_state::pending);
  h.feed(pm::rank_started{0, 2000});
  for (std::uint32_t r = 0; r < 8; ++r) h.end(r, ok);
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_EQ(report->ranks_failed, 0u);
}

TEST(ControllerRecovery, WithoutABudgetNothingChanges) {
  harness h;
  h.start_all();
  const auto out = h.end(3, pm::exit_status::exited(7));
  EXPECT_TRUE(h.all<pm::rank_restarting>().empty());
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(),
            "emit rank 3 on a exited with code 7; aborting the job (SIGTERM to 7 ranks)");
}

// A process that crashed without MPI_Finalize: its exit is recovered first, and the notice that
// follows (about the same process) changes nothing, also once the next spawn went out.
TEST(ControllerRecovery, TheUnfinalizedNoticeOfARecoveredProcessIsIgnored) {
  harness h(recovering(1));
  h.start_all();
  h.end(2, pm::exit_status::signaled(SIGSEGV));
  EXPECT_EQ(h.all<pm::spawn>().back().ranks, (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(h.feed(pm::rank_unfinalized{2, pm::exit_status::signaled(SIGSEGV)}).empty());
  h.feed(pm::rank_started{2, 2002});
  for (std::uint32_t r = 0; r < 8; ++r) h.end(r, ok);
  const auto report = h.finished_report();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_EQ(report->rank_restarts.size(), 1u);
}
