// The controller, driven directly: exact actions, exit codes and lines for every rule of
// docs/failure-semantics.md.
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

// ---- the start ----

TEST(Controller, JobStartSpawnsOncePerHostInGlobalRankOrder) {
  harness h(make_map({{"a", 4}, {"b", 4}}, 8, pm::map_by::node));
  EXPECT_EQ(h.feed(pm::job_start{}), (strings{"spawn 0 [0 2 4 6]", "spawn 1 [1 3 5 7]"}));
  EXPECT_FALSE(h.ctl.finished());
  EXPECT_TRUE(h.feed(pm::job_start{}).empty());  // a second start changes nothing
}

TEST(Controller, HostsWithoutRanksGetNoSpawn) {
  harness h(make_map({{"a", 2}, {"b", 2}, {"c", 2}}, 2));
  EXPECT_EQ(h.feed(pm::job_start{}), (strings{"spawn 0 [0 1]"}));
}

TEST(Controller, JobStartStartsTheTimeoutTimer) {
  pm::controller_options o;
  o.timeout = 2500ms;
  harness h(make_map({{"a", 1}}), o);
  EXPECT_EQ(h.feed(pm::job_start{}), (strings{"spawn 0 [0]", "start_timer 1 2500ms"}));
}

TEST(Controller, EventsBeforeJobStartAreIgnored) {
  harness h(make_map({{"a", 2}}));
  EXPECT_TRUE(h.feed(pm::rank_started{0, 5}).empty());
  EXPECT_TRUE(h.feed(pm::rank_exited{1, pm::exit_status::exited(3)}).empty());
  EXPECT_TRUE(h.feed(pm::rank_spawn_failed{1, 127, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::host_lost{0, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::signal_received{SIGINT}).empty());
  EXPECT_TRUE(h.feed(pm::abort_requested{0, 3, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::abort_requested{std::nullopt, 3, "x"}).empty());
  EXPECT_TRUE(h.feed(pm::timer_fired{1}).empty());
  const auto before = h.ctl.report();
  EXPECT_EQ(before.cause, pm::cause_kind::none);
  EXPECT_EQ(before.ranks[0].state, pm::rank_state::pending);
  EXPECT_EQ(before.ranks[1].state, pm::rank_state::pending);
  // The job then runs as if nothing had come.
  h.start_all();
  h.end(0, ok);
  h.end(1, ok);
  ASSERT_TRUE(h.finished_report());
  EXPECT_EQ(h.finished_report()->exit_code, 0);
}

// ---- success and the finish ----

TEST(Controller, AllSucceededFinishesWithZeroAndAFullReport) {
  harness h;
  h.start_all();
  for (std::uint32_t r = 0; r < 7; ++r) h.end(r, ok);
  EXPECT_FALSE(h.ctl.finished());
  h.close_streams(7);
  EXPECT_EQ(h.feed(pm::rank_exited{7, ok}), (strings{"finish 0 none"}));
  EXPECT_TRUE(h.ctl.finished());
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.cause, pm::cause_kind::none);
  EXPECT_EQ(r.summary, "");
  EXPECT_FALSE(r.failed_rank);
  EXPECT_FALSE(r.failed_host);
  EXPECT_FALSE(r.failed_status);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.ranks_failed, 0u);
  EXPECT_EQ(r.ranks_killed, 0u);
  EXPECT_EQ(r.host_names, (strings{"a", "b"}));
  ASSERT_EQ(r.ranks.size(), 8u);
  for (std::uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(r.ranks[i].rank, i);
    EXPECT_EQ(r.ranks[i].host, i / 4);
    EXPECT_EQ(r.ranks[i].state, pm::rank_state::exited);
    EXPECT_EQ(r.ranks[i].status, ok);
    EXPECT_EQ(r.ranks[i].pid, 1000 + i);
    EXPECT_EQ(r.ranks[i].reason, "");
  }
  // Rank 0 started at 2 ms (job_start at 1 ms) and exited at 12 ms (after its two closes).
  EXPECT_EQ(r.ranks[0].started_at, 2ms);
  EXPECT_EQ(r.ranks[0].ended_at, 12ms);
}

TEST(Controller, FinishWaitsForEveryStreamOfEveryStartedRank) {
  harness h(make_map({{"a", 1}}));
  h.start_all();
  // The exit before the last output: the driver is told to clear what could hold the streams.
  EXPECT_EQ(h.feed(pm::rank_exited{0, ok}), (strings{"clear_leftovers"}));
  EXPECT_TRUE(h.feed(pm::stream_closed{0, pm::stream_kind::out, 10}).empty());
  EXPECT_TRUE(h.feed(pm::stream_closed{0, pm::stream_kind::out, 10}).empty());  // a duplicate
  EXPECT_EQ(h.feed(pm::stream_closed{0, pm::stream_kind::err, 0}), (strings{"finish 0 none"}));
}

TEST(Controller, AStreamMayCloseBeforeTheStartIsReported) {
  harness h(make_map({{"a", 1}}));
  h.feed(pm::job_start{});
  h.feed(pm::stream_closed{0, pm::stream_kind::err, 0});
  h.feed(pm::rank_started{0, 1});
  h.feed(pm::rank_exited{0, ok});
  EXPECT_FALSE(h.ctl.finished());
  EXPECT_EQ(h.feed(pm::stream_closed{0, pm::stream_kind::out, 0}), (strings{"finish 0 none"}));
}

TEST(Controller, AnExitMayComeBeforeItsStart) {
  harness h(make_map({{"a", 1}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_exited{0, ok});
  h.feed(pm::rank_started{0, 77});  // late: only its pid is kept
  EXPECT_FALSE(h.ctl.finished());   // its streams are still open
  h.close_streams(0);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::exited);
  EXPECT_EQ(r.ranks[0].pid, 77);
}

TEST(Controller, StreamsPerRankOneAndZero) {
  pm::controller_options one;
  one.streams_per_rank = 1;
  harness h1(make_map({{"a", 1}}), one);
  h1.start_all();
  h1.feed(pm::rank_exited{0, ok});
  EXPECT_TRUE(h1.feed(pm::stream_closed{0, pm::stream_kind::err, 0}).empty());  // not one of its
  EXPECT_EQ(h1.feed(pm::stream_closed{0, pm::stream_kind::out, 0}), (strings{"finish 0 none"}));

  pm::controller_options none;
  none.streams_per_rank = 0;
  harness h0(make_map({{"a", 1}}), none);
  h0.start_all();
  EXPECT_EQ(h0.feed(pm::rank_exited{0, ok}), (strings{"finish 0 none"}));
}

TEST(Controller, LeftoversHoldingStreamsAreClearedOnce) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  h.feed(pm::rank_exited{0, ok});
  EXPECT_EQ(h.feed(pm::rank_exited{1, ok}), (strings{"clear_leftovers"}));
  EXPECT_TRUE(h.feed(pm::stream_closed{0, pm::stream_kind::out, 0}).empty());
  h.feed(pm::stream_closed{0, pm::stream_kind::err, 0});
  h.feed(pm::stream_closed{1, pm::stream_kind::out, 0});
  EXPECT_EQ(h.feed(pm::stream_closed{1, pm::stream_kind::err, 0}), (strings{"finish 0 none"}));
}

TEST(Controller, NothingAfterTheFinish) {
  harness h(make_map({{"a", 1}}));
  h.start_all();
  h.end(0, ok);
  ASSERT_TRUE(h.ctl.finished());
  for (const pm::event& e :
       std::vector<pm::event>{pm::job_start{}, pm::rank_started{0, 1}, pm::rank_exited{0, by_kill},
                              pm::rank_spawn_failed{0, 127, "x"}, pm::host_lost{0, "x"},
                              pm::stream_closed{0, pm::stream_kind::out, 1}, pm::timer_fired{1},
                              pm::signal_received{SIGINT}, pm::abort_requested{0, 1, "x"},
                              pm::abort_requested{std::nullopt, 1, "x"}}) {
    EXPECT_TRUE(h.feed(e).empty());
  }
  EXPECT_EQ(h.all<pm::finish>().size(), 1u);
  EXPECT_EQ(h.ctl.report().exit_code, 0);
  EXPECT_EQ(h.ctl.report().ranks[0].status, ok);
}

// ---- failures and the abort ----

TEST(Controller, FirstFailureAbortsWithContThenTermThenKillAfterTheGrace) {
  harness h;
  h.start_all();
  h.close_streams(3);
  EXPECT_EQ(
      h.feed(pm::rank_exited{3, pm::exit_status::exited(7)}),
      (strings{"signal 0 [0 1 2] SIGCONT", "signal 0 [0 1 2] SIGTERM", "signal 1 [4 5 6 7] SIGCONT",
               "signal 1 [4 5 6 7] SIGTERM", "start_timer 1 3000ms",
               "emit rank 3 on a exited with code 7; aborting the job (SIGTERM to 7 ranks)"}));
  // Ranks 0..5 obey; 6 and 7 ignore SIGTERM: the grace timer sends SIGKILL to them only.
  for (std::uint32_t r : {0u, 1u, 2u, 4u, 5u}) EXPECT_TRUE(h.end(r, by_term).empty());
  EXPECT_EQ(h.feed(pm::timer_fired{1}),
            (strings{"signal 1 [6 7] SIGKILL",
                     "emit 2 ranks still running after the 3 s grace; sending SIGKILL"}));
  h.end(6, by_kill);
  h.close_streams(7);
  EXPECT_EQ(h.feed(pm::rank_exited{7, by_kill}), (strings{"finish 7 rank_failed"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.failed_rank, 3u);
  EXPECT_EQ(r.failed_host, 0u);
  EXPECT_EQ(r.failed_status, pm::exit_status::exited(7));
  EXPECT_EQ(r.summary, "rank 3 on a exited with code 7");
  EXPECT_EQ(r.ranks_failed, 1u);
  EXPECT_EQ(r.ranks_killed, 7u);
  EXPECT_EQ(r.ranks[3].state, pm::rank_state::exited);
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::killed);
  EXPECT_EQ(r.ranks[0].status, by_term);
  EXPECT_EQ(r.ranks[7].state, pm::rank_state::killed);
  EXPECT_EQ(r.ranks[7].status, by_kill);
}

TEST(Controller, KillGraceComesFromTheOptions) {
  pm::controller_options o;
  o.kill_grace = 250ms;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  const auto out = h.end(0, pm::exit_status::exited(1));
  EXPECT_EQ(out[2], "start_timer 1 250ms");
  EXPECT_EQ(h.feed(pm::timer_fired{1}),
            (strings{"signal 0 [1] SIGKILL",
                     "emit 1 rank still running after the 0.25 s grace; sending SIGKILL"}));
}

// finish_without_ranks: the finish carries the report but its ranks (the counts and the cause as
// always); report() has them, and they stay final after the finish whatever comes.
TEST(Controller, AFinishWithoutRanksLeavesThemToReport) {
  pm::controller_options o;
  o.finish_without_ranks = true;
  harness h(make_map({{"a", 4}}), o);
  h.start_all();
  h.end(0, pm::exit_status::exited(2));
  for (std::uint32_t i = 1; i < 4; ++i) h.end(i, by_term);
  ASSERT_TRUE(h.ctl.finished());
  const auto f = *h.finished_report();
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_EQ(f.failed_rank, 0u);
  EXPECT_EQ(f.ranks_failed, 1u);
  EXPECT_EQ(f.ranks_killed, 3u);
  EXPECT_EQ(f.host_names, (strings{"a"}));
  EXPECT_TRUE(f.ranks.empty());
  h.feed(pm::rank_exited{1, ok});  // after the finish: taken by nothing
  const auto r = h.ctl.report();
  EXPECT_EQ(r.ranks_failed, 1u);
  ASSERT_EQ(r.ranks.size(), 4u);
  EXPECT_EQ(r.ranks[0].status, pm::exit_status::exited(2));
  for (std::uint32_t i = 1; i < 4; ++i) {
    EXPECT_EQ(r.ranks[i].state, pm::rank_state::killed);
    EXPECT_EQ(r.ranks[i].status, by_term);
  }
}

TEST(Controller, KilledBySignalFailsWith128PlusSignal) {
  harness h(make_map({{"a", 2}}));
  h.start_all();
  EXPECT_EQ(h.end(0, pm::exit_status::signaled(SIGSEGV)).back(),
            "emit rank 0 on a was killed by SIGSEGV; aborting the job (SIGTERM to 1 rank)");
  h.end(1, pm::exit_status::exited(143));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  EXPECT_EQ(r.summary, "rank 0 on a was killed by SIGSEGV");
  EXPECT_EQ(r.failed_status, pm::exit_status::signaled(SIGSEGV));
}

TEST(Controller, RanksEndingDuringTheAbortAreKilledWhateverTheirStatus) {
  harness h(make_map({{"a", 4}}));
  h.start_all();
  h.end(0, pm::exit_status::exited(2));
  EXPECT_TRUE(h.end(1, pm::exit_status::exited(9)).empty());  // no second line, no new cause
  EXPECT_TRUE(h.end(2, pm::exit_status::signaled(SIGSEGV)).empty());
  h.end(3, ok);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.ranks_failed, 1u);
  EXPECT_EQ(r.ranks_killed, 3u);
  for (std::uint32_t i = 1; i < 4; ++i) EXPECT_EQ(r.ranks[i].state, pm::rank_state::killed);
  EXPECT_EQ(r.ranks[1].status, pm::exit_status::exited(9));
  EXPECT_EQ(h.all<pm::emit>().size(), 1u);
}

TEST(Controller, GraceTimerIsCancelledWhenEveryRankEnded) {
  harness h(make_map({{"a", 2}}));
  h.start_all();
  h.end(0, pm::exit_status::exited(1));
  h.close_streams(1);
  EXPECT_EQ(h.feed(pm::rank_exited{1, by_term}),
            (strings{"cancel_timer 1", "finish 1 rank_failed"}));
  EXPECT_TRUE(h.feed(pm::timer_fired{1}).empty());  // fires after its cancel: ignored
}

TEST(Controller, GraceTimerIsCancelledBeforeTheLastStreamCloses) {
  harness h(make_map({{"a", 2}}));
  h.start_all();
  h.end(0, pm::exit_status::exited(1));
  EXPECT_EQ(h.feed(pm::rank_exited{1, by_term}), (strings{"cancel_timer 1", "clear_leftovers"}));
  h.feed(pm::stream_closed{1, pm::stream_kind::out, 0});
  EXPECT_EQ(h.feed(pm::stream_closed{1, pm::stream_kind::err, 0}),
            (strings{"finish 1 rank_failed"}));
}

TEST(Controller, RankStartingDuringTheAbortIsSignalledAtOnce) {
  harness h(make_map({{"a", 3}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 1});
  // Ranks 1 and 2 are still being spawned: nothing runs, so nothing is signalled now and the line
  // counts nobody (they get the signals when their start is reported).
  EXPECT_EQ(h.end(0, pm::exit_status::exited(1)),
            (strings{"start_timer 1 3000ms", "emit rank 0 on a exited with code 1"}));
  EXPECT_EQ(h.feed(pm::rank_started{1, 2}),
            (strings{"signal 0 [1] SIGCONT", "signal 0 [1] SIGTERM"}));
  EXPECT_EQ(h.feed(pm::timer_fired{1}),
            (strings{"signal 0 [1] SIGKILL",
                     "emit 1 rank still running after the 3 s grace; sending SIGKILL"}));
  // After the grace: SIGKILL at once.
  EXPECT_EQ(h.feed(pm::rank_started{2, 3}), (strings{"signal 0 [2] SIGKILL"}));
  h.end(1, by_kill);
  h.end(2, by_kill);
  EXPECT_EQ(h.finished_report()->ranks_killed, 2u);
}

TEST(Controller, AbortSignalsLiveRanksAlsoWhenTheFailureIsOnAnotherHost) {
  harness h(make_map({{"a", 4}, {"b", 4}}, 8, pm::map_by::node));
  h.start_all();
  h.end(6, ok);  // rank 6 (on a) is done: not signalled
  EXPECT_EQ(
      h.end(1, pm::exit_status::exited(5)),
      (strings{"signal 0 [0 2 4] SIGCONT", "signal 0 [0 2 4] SIGTERM", "signal 1 [3 5 7] SIGCONT",
               "signal 1 [3 5 7] SIGTERM", "start_timer 1 3000ms",
               "emit rank 1 on b exited with code 5; aborting the job (SIGTERM to 6 ranks)"}));
}

TEST(Controller, SpawnFailure) {
  harness h(make_map({{"a", 2}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 5});
  EXPECT_EQ(h.feed(pm::rank_spawn_failed{1, 127, "cannot execute '/x': No such file or directory"}),
            (strings{"signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 1 on a could not start: cannot execute '/x': No such file or "
                     "directory; aborting the job (SIGTERM to 1 rank)"}));
  h.end(0, by_term);
  const auto r = *h.finished_report();  // rank 1 never started: it has no streams to wait for
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.cause, pm::cause_kind::spawn_failed);
  EXPECT_EQ(r.failed_rank, 1u);
  EXPECT_EQ(r.failed_status, pm::exit_status::exited(127));
  EXPECT_EQ(r.summary,
            "rank 1 on a could not start: cannot execute '/x': No such file or directory");
  EXPECT_EQ(r.ranks[1].state, pm::rank_state::spawn_failed);
  EXPECT_EQ(r.ranks[1].reason, "cannot execute '/x': No such file or directory");
  EXPECT_EQ(r.ranks[1].pid, 0);
  EXPECT_FALSE(r.ranks[1].started_at);
  EXPECT_EQ(r.ranks_failed, 1u);
}

TEST(Controller, SpawnFailureNotExecutableIs126AndEveryRankFailingFinishes) {
  harness h(make_map({{"a", 2}}));
  h.feed(pm::job_start{});
  // Synchronous failures: nothing runs yet, so nothing to signal; rank 1 is still being spawned.
  EXPECT_EQ(h.feed(pm::rank_spawn_failed{0, 126, "cannot execute '/x': Permission denied"}),
            (strings{"start_timer 1 3000ms",
                     "emit rank 0 on a could not start: cannot execute '/x': Permission denied"}));
  EXPECT_EQ(h.feed(pm::rank_spawn_failed{1, 126, "cannot execute '/x': Permission denied"}),
            (strings{"cancel_timer 1", "finish 126 spawn_failed"}));
  EXPECT_EQ(h.finished_report()->ranks_failed, 2u);
}

TEST(Controller, SpawnFailureDuringTheAbortIsNotACause) {
  harness h(make_map({{"a", 2}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 5});
  h.end(0, pm::exit_status::exited(4));
  EXPECT_EQ(h.feed(pm::rank_spawn_failed{1, 127, "gone"}),
            (strings{"cancel_timer 1", "finish 4 rank_failed"}));
}

// An exit code holds 8 bits: an abort status of 256 must not read as 0, a success.
TEST(Controller, AnAbortStatusAnExitCodeCannotHoldIsOne) {
  for (const int status : {256, 512, 300, -1, 0}) {
    harness h(make_map({{"a", 2}}));
    h.start_all();
    h.feed(pm::abort_requested{1, status, ""});
    for (std::uint32_t r = 0; r < 2; ++r) h.end(r, by_term);
    const auto r = *h.finished_report();
    EXPECT_EQ(r.exit_code, 1) << status;
    EXPECT_EQ(r.summary, "rank 1 on a called abort with status " + std::to_string(status))
        << status;
  }
}

TEST(Controller, AbortRequestedByARank) {
  harness h(make_map({{"a", 3}}));
  h.start_all();
  EXPECT_EQ(h.feed(pm::abort_requested{2, 42, "bad input"}),
            (strings{"signal 0 [0 1 2] SIGCONT", "signal 0 [0 1 2] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 2 on a called abort with status 42: bad input; aborting the job "
                     "(SIGTERM to 3 ranks)"}));
  for (std::uint32_t r = 0; r < 3; ++r) h.end(r, by_term);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 42);
  EXPECT_EQ(r.cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.failed_rank, 2u);
  EXPECT_EQ(r.failed_status, pm::exit_status::exited(42));
  EXPECT_EQ(r.summary, "rank 2 on a called abort with status 42: bad input");
  // The rank that called abort ended by its own request: exited, failed, with its message.
  EXPECT_EQ(r.ranks[2].state, pm::rank_state::exited);
  EXPECT_EQ(r.ranks[2].reason, "bad input");
  EXPECT_EQ(r.ranks_failed, 1u);
  EXPECT_EQ(r.ranks_killed, 2u);
}

TEST(Controller, AbortWithStatusZeroExitsOne) {
  harness h(make_map({{"a", 1}}));
  h.start_all();
  EXPECT_EQ(h.feed(pm::abort_requested{0, 0, ""}).back(),
            "emit rank 0 on a called abort with status 0; aborting the job (SIGTERM to 1 rank)");
  h.end(0, by_term);
  EXPECT_EQ(h.finished_report()->exit_code, 1);
  EXPECT_EQ(h.finished_report()->failed_status, pm::exit_status::exited(1));
}

TEST(Controller, AbortByARankEndsTheJobAlsoWithoutAbortOnFailure) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 2}}), o);
  h.start_all();
  EXPECT_EQ(
      h.feed(pm::abort_requested{1, 3, "x"}).back(),
      "emit rank 1 on a called abort with status 3: x; aborting the job (SIGTERM to 2 ranks)");
  EXPECT_EQ(h.all<pm::signal_ranks>().size(), 2u);
}

TEST(Controller, EmbedderCancel) {
  harness h(make_map({{"a", 2}}));
  h.start_all();
  EXPECT_EQ(h.feed(pm::abort_requested{std::nullopt, 0, "by the scheduler"}),
            (strings{"signal 0 [0 1] SIGCONT", "signal 0 [0 1] SIGTERM", "start_timer 1 3000ms",
                     "emit the job was cancelled: by the scheduler; aborting the job (SIGTERM to "
                     "2 ranks)"}));
  EXPECT_TRUE(h.feed(pm::abort_requested{std::nullopt, 5, "again"}).empty());
  h.end(0, by_term);
  h.end(1, by_term);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.cause, pm::cause_kind::abort_requested);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(r.failed_rank);
  EXPECT_EQ(r.summary, "the job was cancelled: by the scheduler");
  EXPECT_EQ(r.ranks_killed, 2u);
}

TEST(Controller, HostLoss) {
  harness h;
  h.start_all();
  h.end(5, ok);  // ended before its host was lost: stays exited
  EXPECT_EQ(
      h.feed(pm::host_lost{1, "agent channel closed"}),
      (strings{"signal 0 [0 1 2 3] SIGCONT", "signal 0 [0 1 2 3] SIGTERM", "start_timer 1 3000ms",
               "emit host b was lost (agent channel closed); its 3 ranks failed; aborting the "
               "job (SIGTERM to 4 ranks)"}));
  EXPECT_TRUE(h.feed(pm::host_lost{1, "again"}).empty());
  EXPECT_TRUE(h.feed(pm::rank_exited{4, ok}).empty());  // too late: lost
  for (std::uint32_t r = 0; r < 4; ++r) h.end(r, by_term);
  const auto r = *h.finished_report();  // the lost ranks' streams do not hold the job
  EXPECT_EQ(r.exit_code, pm::exit_codes::host_lost);
  EXPECT_EQ(r.cause, pm::cause_kind::host_lost);
  EXPECT_EQ(r.failed_host, 1u);
  EXPECT_EQ(r.failed_rank, 4u);  // its lowest lost rank
  EXPECT_FALSE(r.failed_status);
  EXPECT_EQ(r.summary, "host b was lost (agent channel closed); its 3 ranks failed");
  EXPECT_EQ(r.ranks[4].state, pm::rank_state::lost);
  EXPECT_FALSE(r.ranks[4].status);
  EXPECT_EQ(r.ranks[4].reason, "agent channel closed");
  EXPECT_EQ(r.ranks[5].state, pm::rank_state::exited);
  EXPECT_EQ(r.ranks[5].reason, "");
  EXPECT_EQ(r.ranks_failed, 3u);
  EXPECT_EQ(r.ranks_killed, 4u);
}

TEST(Controller, HostLossOfRanksNotYetStarted) {
  harness h(make_map({{"a", 1}, {"b", 1}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 1});
  EXPECT_EQ(h.feed(pm::host_lost{1, "its agent did not start"}).back(),
            "emit host b was lost (its agent did not start); its 1 rank failed; aborting the job "
            "(SIGTERM to 1 rank)");
  EXPECT_TRUE(h.feed(pm::rank_started{1, 2}).empty());  // a late start of a lost rank
  h.end(0, by_term);
  EXPECT_EQ(h.finished_report()->ranks[1].state, pm::rank_state::lost);
}

TEST(Controller, HostLossDropsTheStreamsOfRanksThatHadEnded) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 1}, {"b", 1}}), o);
  h.start_all();
  h.end(0, ok);
  h.feed(pm::rank_exited{1, ok});  // its output is still on the way...
  EXPECT_FALSE(h.ctl.finished());
  EXPECT_EQ(h.feed(pm::host_lost{1, "agent channel closed"}), (strings{"finish 0 none"}));
  EXPECT_EQ(h.finished_report()->ranks[1].state, pm::rank_state::exited);  // it had succeeded
}

TEST(Controller, HostLossDuringTheAbortIsNotACause) {
  harness h(make_map({{"a", 1}, {"b", 2}}));
  h.start_all();
  h.end(0, pm::exit_status::exited(6));
  EXPECT_EQ(h.feed(pm::host_lost{1, "x"}), (strings{"cancel_timer 1", "finish 6 rank_failed"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.ranks[1].state, pm::rank_state::lost);
  EXPECT_EQ(r.ranks_failed, 3u);  // the failed rank and the two lost ones
}

// ---- a host whose agent never said hello, and ranks the driver gives up on ----

TEST(Controller, AnAgentThatNeverSaidHelloIsALaunchFailure125NotALostHost) {
  harness h(make_map({{"a", 2}, {"b", 2}}));
  h.feed(pm::job_start{});
  // b's agent never answered (ssh refused): its ranks could not start; nothing runs, so the
  // line has no abort tail.
  EXPECT_EQ(h.feed(pm::host_lost{1, "ssh: Connection refused", true}),
            (strings{"start_timer 1 3000ms",
                     "emit the agent on b did not start (ssh: Connection refused); its 2 ranks "
                     "could not start"}));
  EXPECT_TRUE(h.feed(pm::host_lost{1, "again", true}).empty());
  // a's ranks were never sent (the launch facts waited for b): the driver gives them up.
  EXPECT_EQ(h.feed(pm::spawn_withdrawn{{0, 1}}),
            (strings{"cancel_timer 1", "finish 125 spawn_failed"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, pm::exit_codes::launch_failed);
  EXPECT_EQ(r.cause, pm::cause_kind::spawn_failed);
  EXPECT_EQ(r.failed_host, 1u);
  EXPECT_EQ(r.failed_rank, 2u);
  EXPECT_EQ(r.summary,
            "the agent on b did not start (ssh: Connection refused); its 2 ranks could not start");
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::not_started);
  EXPECT_FALSE(r.ranks[0].status);
  EXPECT_EQ(r.ranks[2].state, pm::rank_state::spawn_failed);
  EXPECT_EQ(r.ranks[2].status, pm::exit_status::exited(125));
  EXPECT_EQ(r.ranks[2].reason, "ssh: Connection refused");
  EXPECT_EQ(r.ranks_failed, 2u);
  EXPECT_EQ(r.ranks_killed, 0u);
}

TEST(Controller, AnAgentThatNeverSaidHelloEndsTheJobAlsoWithAbortOff) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 1}, {"b", 1}}), o);
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 7});
  EXPECT_EQ(h.feed(pm::host_lost{1, "no key accepted", true}),
            (strings{"signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "start_timer 1 3000ms",
                     "emit the agent on b did not start (no key accepted); its 1 rank could not "
                     "start; aborting the job (SIGTERM to 1 rank)"}));
  h.end(0, by_term);
  EXPECT_EQ(h.finished_report()->exit_code, 125);
}

TEST(Controller, AnAgentThatNeverSaidHelloDuringTheAbortLeavesItsRanksNotStarted) {
  harness h(make_map({{"a", 1}, {"b", 1}}));
  h.feed(pm::job_start{});
  h.feed(pm::signal_received{SIGINT});
  EXPECT_EQ(h.feed(pm::host_lost{1, "the job ended before its agent answered", true}), strings{});
  EXPECT_EQ(h.feed(pm::spawn_withdrawn{{0}}), (strings{"cancel_timer 1", "finish 130 signal"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::not_started);
  EXPECT_EQ(r.ranks[1].state, pm::rank_state::not_started);
  EXPECT_EQ(r.ranks_failed, 0u);
}

TEST(Controller, SpawnWithdrawnOnlyWhileTheJobEndsAndOnlyForPendingRanks) {
  harness h(make_map({{"a", 3}}));
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 1});
  EXPECT_TRUE(h.feed(pm::spawn_withdrawn{{1, 2}}).empty());  // a running job gives up on nothing
  EXPECT_EQ(h.ctl.rank_report_of(1).state, pm::rank_state::pending);
  EXPECT_EQ(h.feed(pm::signal_received{SIGTERM}),
            (strings{"signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "start_timer 1 3000ms",
                     "emit interrupted by SIGTERM; aborting the job (SIGTERM to 1 rank)"}));
  EXPECT_TRUE(h.feed(pm::spawn_withdrawn{{0, 1, 2, 99}}).empty());  // rank 0 runs: not withdrawn
  EXPECT_EQ(h.ctl.rank_report_of(0).state, pm::rank_state::running);
  EXPECT_EQ(h.ctl.rank_report_of(2).state, pm::rank_state::not_started);
  EXPECT_TRUE(h.feed(pm::rank_started{1, 5}).empty());  // too late: it was given up
  EXPECT_EQ(h.end(0, by_term), (strings{"cancel_timer 1", "finish 143 signal"}));
}

// ---- without abort on failure ----

TEST(Controller, NoAbortRecordsFailuresAndLetsTheOthersRun) {
  pm::controller_options o;
  o.abort_on_failure = false;
  harness h(make_map({{"a", 3}, {"b", 1}}), o);
  h.start_all();
  EXPECT_EQ(h.end(1, pm::exit_status::exited(3)), (strings{"emit rank 1 on a exited with code 3"}));
  EXPECT_EQ(h.end(2, pm::exit_status::signaled(SIGSEGV)),
            (strings{"emit rank 2 on a was killed by SIGSEGV"}));
  EXPECT_EQ(h.feed(pm::host_lost{1, "gone"}),
            (strings{"emit host b was lost (gone); its 1 rank failed"}));
  h.end(0, ok);
  const auto r = *h.finished_report();
  EXPECT_TRUE(h.all<pm::signal_ranks>().empty());
  EXPECT_TRUE(h.all<pm::start_timer>().empty());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.summary, "rank 1 on a exited with code 3");
  EXPECT_EQ(r.ranks_failed, 3u);
  EXPECT_EQ(r.ranks_killed, 0u);
  EXPECT_EQ(r.ranks[0].state, pm::rank_state::exited);
  EXPECT_EQ(r.ranks[0].status, ok);
}

// ---- telling the survivors (notify_failures, abort policy off) ----

pm::controller_options notifying() {
  pm::controller_options o;
  o.abort_on_failure = false;
  o.notify_failures = true;
  return o;
}

TEST(Controller, NoAbortTellsEveryHostWithRanksNotEndedOfEachFailure) {
  harness h(make_map({{"a", 2}, {"b", 2}, {"c", 1}}), notifying());
  h.start_all();
  // Rank 1 (on a) exits 7: a still has rank 0, b ranks 2 and 3, c rank 4.
  EXPECT_EQ(h.end(1, pm::exit_status::exited(7)),
            (strings{"notify 0 rank_exited [1] 7", "notify 1 rank_exited [1] 7",
                     "notify 2 rank_exited [1] 7", "emit rank 1 on a exited with code 7"}));
  EXPECT_EQ(h.all<pm::notify_ranks>()[0].line, "rank 1 on a exited with code 7");
  // A rank that exits 0 is no failure: nobody is told.
  EXPECT_TRUE(h.end(0, ok).empty());
  // Host a has nothing left alive: it is not told of rank 4's signal.
  EXPECT_EQ(h.end(4, pm::exit_status::signaled(SIGKILL)),
            (strings{"notify 1 rank_signaled [4] 9", "emit rank 4 on c was killed by SIGKILL"}));
  // A lost host: its ranks that had not ended, one notice for them all, to the others.
  h.end(2, ok);
  // Nobody is left to tell (and the job finishes).
  EXPECT_EQ(h.feed(pm::host_lost{1, "gone"}),
            (strings{"emit host b was lost (gone); its 1 rank failed", "finish 7 rank_failed"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_TRUE(h.all<pm::signal_ranks>().empty());
}

TEST(Controller, NoAbortNoticeOfALostHostNamesItsRanksAndReachesPendingOnes) {
  harness h(make_map({{"a", 2}, {"b", 3}, {"c", 1}}), notifying());
  h.feed(pm::job_start{});
  for (std::uint32_t r : {0u, 1u, 2u, 3u, 4u}) h.feed(pm::rank_started{r, 100 + r});
  h.end(3, ok);  // rank 3 on b had ended: it is not among the lost
  // Rank 5 on c is still pending: c is told too (its rank may be about to start).
  EXPECT_EQ(h.feed(pm::host_lost{1, "gone"}),
            (strings{"notify 0 host_lost [2 4] 0", "notify 2 host_lost [2 4] 0",
                     "emit host b was lost (gone); its 2 ranks failed"}));
}

TEST(Controller, NoAbortSpawnFailureIsNotified) {
  harness h(make_map({{"a", 1}, {"b", 1}}), notifying());
  h.feed(pm::job_start{});
  h.feed(pm::rank_started{0, 10});
  EXPECT_EQ(
      h.feed(pm::rank_spawn_failed{1, 126, "denied"}),
      (strings{"notify 0 rank_spawn_failed [1] 126", "emit rank 1 on b could not start: denied"}));
}

// A rank that left PMIx without PMIx_Finalize ends the job also with the policy off (its peers
// could wait for it in a fence for ever), named as the cause; the survivors are told first.
TEST(Controller, AnUnfinalizedRankEndsTheJobNamedAsItsCause) {
  harness h(make_map({{"a", 2}, {"b", 1}}), notifying());
  h.start_all();
  EXPECT_EQ(h.end(1, ok), strings{});  // an exit 0 is no failure by itself
  EXPECT_EQ(h.feed(pm::rank_unfinalized{1, ok}),
            (strings{"notify 0 rank_unfinalized [1] 0", "notify 1 rank_unfinalized [1] 0",
                     "signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "signal 1 [2] SIGCONT",
                     "signal 1 [2] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 1 on a exited with code 0 without calling MPI_Finalize "
                     "(PMIx_Finalize); aborting the job (SIGTERM to 2 ranks)"}));
  EXPECT_TRUE(h.feed(pm::rank_unfinalized{0, ok}).empty());  // the job is ending already
  h.end(0, pm::exit_status::signaled(SIGTERM));
  h.end(2, pm::exit_status::signaled(SIGTERM));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 1);  // an exit 0 without finalize still fails the job
  EXPECT_EQ(r.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.failed_rank, 1u);
  EXPECT_EQ(r.summary,
            "rank 1 on a exited with code 0 without calling MPI_Finalize (PMIx_Finalize)");
  EXPECT_EQ(r.ranks_failed, 1u);  // the cause, though its exit said 0
  EXPECT_EQ(r.ranks_killed, 2u);
  // By a signal: 128 + the signal, with the abort policy on as well. The notice comes before the
  // exit's report: the rank ended then, by its own failure, and is neither signalled nor counted
  // a victim.
  harness k(make_map({{"a", 2}}), pm::controller_options{});
  k.start_all();
  EXPECT_EQ(k.feed(pm::rank_unfinalized{0, pm::exit_status::signaled(SIGKILL)}),
            (strings{"signal 0 [1] SIGCONT", "signal 0 [1] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 0 on a was killed by SIGKILL without calling MPI_Finalize "
                     "(PMIx_Finalize); aborting the job (SIGTERM to 1 rank)"}));
  k.end(0, pm::exit_status::signaled(SIGKILL));
  k.end(1, pm::exit_status::signaled(SIGTERM));
  const auto kr = *k.finished_report();
  EXPECT_EQ(kr.exit_code, 128 + SIGKILL);
  EXPECT_EQ(kr.ranks_failed, 1u);
  EXPECT_EQ(kr.ranks_killed, 1u);
  EXPECT_EQ(kr.ranks[0].state, pm::rank_state::exited);
  harness u(make_map({{"a", 1}}), pm::controller_options{});
  u.start_all();
  EXPECT_TRUE(u.feed(pm::rank_unfinalized{7, ok}).empty());  // no such rank
}

TEST(Controller, NoAbortJobEndingIsNotifiedBeforeTheSignals) {
  // An explicit abort by a rank: the notice names it, then the stop sequence.
  {
    harness h(make_map({{"a", 2}, {"b", 1}}), notifying());
    h.start_all();
    EXPECT_EQ(h.feed(pm::abort_requested{1, 42, "bye"}),
              (strings{"notify 0 rank_aborted [1] 42", "notify 1 rank_aborted [1] 42",
                       "signal 0 [0 1] SIGCONT", "signal 0 [0 1] SIGTERM", "signal 1 [2] SIGCONT",
                       "signal 1 [2] SIGTERM", "start_timer 1 3000ms",
                       "emit rank 1 on a called abort with status 42: bye; aborting the job "
                       "(SIGTERM to 3 ranks)"}));
  }
  // The launcher's signal, a cancel (a rank that left PMIx unfinalized), the timeout.
  {
    harness h(make_map({{"a", 1}, {"b", 1}}), notifying());
    h.start_all();
    const auto out = h.feed(pm::signal_received{SIGINT});
    ASSERT_GE(out.size(), 2u);
    EXPECT_EQ(out[0], "notify 0 job_ending [] 130");
    EXPECT_EQ(out[1], "notify 1 job_ending [] 130");
    EXPECT_EQ(h.all<pm::notify_ranks>()[0].line, "interrupted by SIGINT");
    // A second interrupt escalates without another notice.
    const auto again = h.feed(pm::signal_received{SIGINT});
    for (const auto& line : again) EXPECT_EQ(line.rfind("notify", 0), std::string::npos) << line;
  }
  {
    harness h(make_map({{"a", 1}, {"b", 1}}), notifying());
    h.start_all();
    h.end(0, pm::exit_status::exited(3));  // a failure first: the job's code stays 3
    const auto out = h.feed(pm::abort_requested{std::nullopt, 5, "rank 1 left"});
    ASSERT_GE(out.size(), 1u);
    EXPECT_EQ(out[0], "notify 1 job_ending [] 3");
  }
  {
    pm::controller_options o = notifying();
    o.timeout = 1000ms;
    harness h(make_map({{"a", 1}}), o);
    h.start_all();
    const auto out = h.feed(pm::timer_fired{1});
    ASSERT_GE(out.size(), 1u);
    EXPECT_EQ(out[0], "notify 0 job_ending [] 124");
  }
}

TEST(Controller, AbortPolicyOnOrNoNotifyFailuresSendsNoNotice) {
  for (const bool abort : {true, false}) {
    pm::controller_options o;
    o.abort_on_failure = abort;
    o.notify_failures = abort;  // on with the abort policy: ignored; off: nothing asked
    harness h(make_map({{"a", 2}, {"b", 2}}), o);
    h.start_all();
    h.end(1, pm::exit_status::exited(7));
    h.feed(pm::host_lost{1, "gone"});
    h.feed(pm::signal_received{SIGTERM});
    EXPECT_TRUE(h.all<pm::notify_ranks>().empty()) << abort;
  }
}

TEST(Controller, SimultaneousFailuresTheFirstProcessedDecides) {
  for (bool abort : {true, false}) {
    for (bool seven_first : {true, false}) {
      pm::controller_options o;
      o.abort_on_failure = abort;
      harness h(make_map({{"a", 2}}), o);
      h.start_all();
      const auto first = seven_first ? 0u : 1u;
      h.end(first, pm::exit_status::exited(first == 0 ? 7 : 9));
      h.end(1 - first, pm::exit_status::exited(first == 0 ? 9 : 7));
      const auto r = *h.finished_report();
      EXPECT_EQ(r.exit_code, seven_first ? 7 : 9);
      EXPECT_EQ(r.failed_rank, first);
      EXPECT_EQ(r.ranks_failed, abort ? 1u : 2u);
    }
  }
}

}  // namespace
