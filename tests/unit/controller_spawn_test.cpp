// The controller with spawned jobs (job_spawned, MPI_Comm_spawn): their ranks are processes after
// the first job's, supervised under the same rules (docs/failure-semantics.md, "Spawned jobs").
#include <signal.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pm/controller.hpp"
#include "pm/error.hpp"
#include "support/controller_harness.hpp"
#include "support/describe_action.hpp"

namespace {

using namespace std::chrono_literals;
using strings = std::vector<std::string>;
using hosts = std::vector<std::uint32_t>;
using pm::test::describe;

using pm::test::make_map;
using harness = pm::test::controller_harness;

const auto ok = pm::exit_status::exited(0);
const auto by_term = pm::exit_status::signaled(SIGTERM);

pm::controller_options abort_off() {
  pm::controller_options o;
  o.abort_on_failure = false;
  return o;
}

// ---- joining ----

TEST(Controller, SpawnedJobGetsOneSpawnPerHostInFirstAppearanceOrder) {
  harness h(make_map({{"a", 4}, {"b", 4}, {"c", 4}}, 2));  // the first job: ranks 0, 1 on a
  h.start_all();
  EXPECT_EQ(h.feed(pm::job_spawned{{2, 0, 2, 1}}),
            (strings{"spawn 2 [2 4]", "spawn 0 [3]", "spawn 1 [5]"}));
  EXPECT_EQ(h.ctl.size(), 6u);
  EXPECT_EQ(h.ctl.jobs(), 2u);
  EXPECT_EQ(h.ctl.job_first(0), 0u);
  EXPECT_EQ(h.ctl.job_size(0), 2u);
  EXPECT_EQ(h.ctl.job_first(1), 2u);
  EXPECT_EQ(h.ctl.job_size(1), 4u);
  EXPECT_EQ(h.ctl.job_rank_of(1).job, 0u);
  EXPECT_EQ(h.ctl.job_rank_of(1).rank, 1u);
  EXPECT_EQ(h.ctl.job_rank_of(4).job, 1u);
  EXPECT_EQ(h.ctl.job_rank_of(4).rank, 2u);
  EXPECT_EQ(h.ctl.host_of(1), 0u);
  EXPECT_EQ(h.ctl.host_of(4), 2u);
  EXPECT_EQ(h.ctl.host_of(5), 1u);
  // A second spawned job is appended after the first one.
  EXPECT_EQ(h.feed(pm::job_spawned{{1}}), (strings{"spawn 1 [6]"}));
  EXPECT_EQ(h.ctl.jobs(), 3u);
  EXPECT_EQ(h.ctl.job_first(2), 6u);
  EXPECT_EQ(h.ctl.job_size(2), 1u);
  EXPECT_EQ(h.ctl.job_rank_of(6).job, 2u);
  EXPECT_EQ(h.ctl.job_rank_of(6).rank, 0u);
  // Out of range: an internal error, naming what was asked.
  EXPECT_THROW((void)h.ctl.job_first(3), pm::error);
  EXPECT_THROW((void)h.ctl.job_size(3), pm::error);
  EXPECT_THROW((void)h.ctl.job_rank_of(7), pm::error);
  EXPECT_THROW((void)h.ctl.host_of(7), pm::error);
  EXPECT_THROW((void)h.ctl.rank_report_of(7), pm::error);
}

TEST(Controller, SpawnedJobIsRefusedWhenEmptyOrOutsideTheAllocation) {
  harness h(make_map({{"a", 2}, {"b", 2}}, 2));
  h.start_all();
  EXPECT_TRUE(h.feed(pm::job_spawned{{}}).empty());
  EXPECT_TRUE(h.feed(pm::job_spawned{{0, 2}}).empty());  // host 2 does not exist
  EXPECT_EQ(h.ctl.size(), 2u);
  EXPECT_EQ(h.ctl.jobs(), 1u);
  EXPECT_EQ(h.ctl.live_on_host(1), 0u);  // nothing half-added
}

TEST(Controller, SpawnedJobIsRefusedBeforeTheStartDuringAnAbortAndAfterTheFinish) {
  harness h(make_map({{"a", 2}}, 2));
  EXPECT_TRUE(h.feed(pm::job_spawned{{0}}).empty());  // before job_start
  EXPECT_EQ(h.ctl.size(), 2u);
  h.start_all();
  h.end(0, pm::exit_status::exited(4));  // aborts: SIGTERM to rank 1
  EXPECT_TRUE(h.feed(pm::job_spawned{{0}}).empty());
  EXPECT_EQ(h.ctl.size(), 2u);
  h.end(1, by_term);
  ASSERT_TRUE(h.ctl.finished());
  EXPECT_TRUE(h.feed(pm::job_spawned{{0}}).empty());
  EXPECT_EQ(h.ctl.size(), 2u);
  EXPECT_EQ(h.ctl.jobs(), 1u);
}

TEST(Controller, SpawnedJobIsRefusedOnALostHostAndOnceEveryProcessEnded) {
  harness h(make_map({{"a", 2}, {"b", 2}}, 2, pm::map_by::node), abort_off());
  h.start_all();
  h.feed(pm::host_lost{1, "gone"});  // rank 1 lost; the policy is off: rank 0 runs on
  EXPECT_TRUE(h.feed(pm::job_spawned{{0, 1}}).empty());
  EXPECT_EQ(h.ctl.size(), 2u);
  EXPECT_EQ(h.feed(pm::job_spawned{{0}}), (strings{"spawn 0 [2]"}));
  h.start(2, 3);
  h.feed(pm::rank_exited{0, ok});  // streams still open: the job waits for them
  h.feed(pm::rank_exited{2, ok});
  ASSERT_FALSE(h.ctl.finished());
  EXPECT_TRUE(h.feed(pm::job_spawned{{0}}).empty());  // nobody is left to have asked
  EXPECT_EQ(h.ctl.size(), 3u);
}

// ---- the failure policy ----

TEST(Controller, SpawnedRankFailureAbortsEveryJobNamingItsJob) {
  harness h(make_map({{"vm", 4}}, 2));
  h.start_all();
  EXPECT_EQ(h.feed(pm::job_spawned{{0, 0}}), (strings{"spawn 0 [2 3]"}));
  h.start(2, 4);
  EXPECT_EQ(h.end(2, pm::exit_status::exited(3)),
            (strings{"signal 0 [0 1 3] SIGCONT", "signal 0 [0 1 3] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 0 of spawned job 1 on vm exited with code 3; aborting the job "
                     "(SIGTERM to 3 ranks)"}));
  for (std::uint32_t p : {0u, 1u, 3u}) h.end(p, by_term);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(r.failed_rank, 2u);  // the process number
  EXPECT_EQ(r.failed_host, 0u);
  EXPECT_EQ(r.summary, "rank 0 of spawned job 1 on vm exited with code 3");
  EXPECT_EQ(r.ranks_failed, 1u);
  EXPECT_EQ(r.ranks_killed, 3u);
  ASSERT_EQ(r.ranks.size(), 4u);
  EXPECT_EQ(r.ranks[3].state, pm::rank_state::killed);
}

// Every live rank is walked host by host: the first job's nodes in node order, then the hosts only
// spawned jobs use, ascending; on each host, processes ascending.
TEST(Controller, AbortSignalsSpawnedRanksAfterTheFirstJobsHosts) {
  harness h(make_map({{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}}, 2));  // ranks 0, 1 on a
  h.start_all();
  EXPECT_EQ(h.feed(pm::job_spawned{{3, 0, 1}}),
            (strings{"spawn 3 [2]", "spawn 0 [3]", "spawn 1 [4]"}));
  h.start(2, 5);
  EXPECT_EQ(h.feed(pm::signal_received{SIGINT}),
            (strings{"signal 0 [0 1 3] SIGCONT", "signal 0 [0 1 3] SIGINT", "signal 1 [4] SIGCONT",
                     "signal 1 [4] SIGINT", "signal 3 [2] SIGCONT", "signal 3 [2] SIGINT",
                     "start_timer 1 3000ms",
                     "emit interrupted by SIGINT; aborting the job (SIGINT to 5 ranks)"}));
  h.end(0, pm::exit_status::signaled(SIGINT));
  h.end(3, pm::exit_status::signaled(SIGINT));
  // The grace ends: SIGKILL to those still running, spawned ones too.
  EXPECT_EQ(h.feed(pm::timer_fired{1}),
            (strings{"signal 0 [1] SIGKILL", "signal 1 [4] SIGKILL", "signal 3 [2] SIGKILL",
                     "emit 3 ranks still running after the 3 s grace; sending SIGKILL"}));
}

TEST(Controller, SpawnedRankStartingDuringTheAbortGetsWhatTheOthersGot) {
  harness h(make_map({{"a", 2}}, 1));
  h.start_all();
  h.feed(pm::job_spawned{{0}});  // process 1, not started yet
  h.end(0, pm::exit_status::exited(2));
  EXPECT_EQ(h.feed(pm::rank_started{1, 77}),
            (strings{"signal 0 [1] SIGCONT", "signal 0 [1] SIGTERM"}));
}

TEST(Controller, WithAbortOffASpawnedFailureIsRecordedAndTheJobEndsWhenAllEnded) {
  harness h(make_map({{"a", 2}, {"b", 2}}, 2), abort_off());
  h.start_all();
  h.feed(pm::job_spawned{{1, 1}});
  h.start(2, 4);
  EXPECT_EQ(h.end(3, pm::exit_status::signaled(SIGSEGV)),
            (strings{"emit rank 1 of spawned job 1 on b was killed by SIGSEGV"}));
  h.end(0, ok);
  h.end(1, ok);
  EXPECT_FALSE(h.ctl.finished());
  EXPECT_EQ(h.end(2, ok), (strings{"finish 139 rank_failed"}));
  const auto r = *h.finished_report();
  EXPECT_EQ(r.failed_rank, 3u);
  EXPECT_EQ(r.failed_host, 1u);
  EXPECT_EQ(r.ranks_failed, 1u);
  EXPECT_EQ(r.ranks_killed, 0u);
  EXPECT_TRUE(h.all<pm::signal_ranks>().empty());
}

TEST(Controller, FinishWaitsForSpawnedRanksAndTheirStreams) {
  harness h(make_map({{"a", 2}}, 1));
  h.start_all();
  h.feed(pm::job_spawned{{0, 0}});
  h.end(0, ok);
  EXPECT_FALSE(h.ctl.finished());  // the spawned job has not started
  h.start(1, 3);
  h.end(1, ok);
  EXPECT_EQ(h.feed(pm::rank_exited{2, ok}), (strings{"clear_leftovers"}));  // its streams: open
  h.feed(pm::stream_closed{2, pm::stream_kind::out, 0});
  EXPECT_FALSE(h.ctl.finished());
  EXPECT_EQ(h.feed(pm::stream_closed{2, pm::stream_kind::err, 0}), (strings{"finish 0 none"}));
  EXPECT_EQ(h.finished_report()->ranks.size(), 3u);
}

TEST(Controller, ForwardedSignalReachesSpawnedRanks) {
  harness h(make_map({{"a", 1}, {"b", 1}, {"c", 1}}, 2, pm::map_by::node));  // 0 on a, 1 on b
  h.start_all();
  h.feed(pm::job_spawned{{2, 0}});  // 2 on c, 3 on a
  h.start(2, 4);
  EXPECT_EQ(h.feed(pm::signal_received{SIGUSR1}),
            (strings{"signal 0 [0 3] SIGUSR1", "signal 1 [1] SIGUSR1", "signal 2 [2] SIGUSR1"}));
  h.end(3, ok);  // an ended spawned rank gets nothing more
  EXPECT_EQ(h.feed(pm::signal_received{SIGUSR2}),
            (strings{"signal 0 [0] SIGUSR2", "signal 1 [1] SIGUSR2", "signal 2 [2] SIGUSR2"}));
}

TEST(Controller, HostLostEndsTheSpawnedRanksOnThatHost) {
  harness h(make_map({{"a", 2}, {"b", 2}}, 2));  // 0, 1 on a
  h.start_all();
  h.feed(pm::job_spawned{{1, 1, 0}});  // 2, 3 on b; 4 on a
  h.start(2, 5);
  EXPECT_EQ(h.feed(pm::host_lost{1, "gone"}),
            (strings{"signal 0 [0 1 4] SIGCONT", "signal 0 [0 1 4] SIGTERM", "start_timer 1 3000ms",
                     "emit host b was lost (gone); its 2 ranks failed; aborting the job (SIGTERM "
                     "to 3 ranks)"}));
  EXPECT_EQ(h.ctl.live_on_host(1), 0u);
  const auto r = h.ctl.report();
  EXPECT_EQ(r.failed_rank, 2u);  // the lowest lost process
  EXPECT_EQ(r.ranks[2].state, pm::rank_state::lost);
  EXPECT_EQ(r.ranks[3].state, pm::rank_state::lost);
  EXPECT_EQ(r.ranks[3].reason, "gone");
  EXPECT_EQ(r.ranks[4].state, pm::rank_state::running);
}

TEST(Controller, SpawnedRankCallingAbortEndsTheJobAlsoWithAbortOff) {
  harness h(make_map({{"a", 2}}, 1), abort_off());
  h.start_all();
  h.feed(pm::job_spawned{{0}});
  h.start(1, 2);
  EXPECT_EQ(h.feed(pm::abort_requested{1, 5, "bad"}),
            (strings{"signal 0 [0 1] SIGCONT", "signal 0 [0 1] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 0 of spawned job 1 on a called abort with status 5: bad; aborting "
                     "the job (SIGTERM to 2 ranks)"}));
  h.end(0, by_term);
  h.end(1, by_term);
  const auto r = *h.finished_report();
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.failed_rank, 1u);
  EXPECT_EQ(r.ranks[1].reason, "bad");
}

TEST(Controller, UnfinalizedSpawnedRankEndsTheJobNamedAsItsCause) {
  pm::controller_options o = abort_off();
  o.notify_failures = true;
  harness h(make_map({{"a", 2}, {"b", 2}}, 1), o);  // rank 0 on a
  h.start_all();
  h.feed(pm::job_spawned{{1, 1}});  // 1, 2 on b: a host only the spawned job uses
  h.start(1, 3);
  EXPECT_EQ(h.end(1, ok), strings{});
  EXPECT_EQ(h.feed(pm::rank_unfinalized{1, ok}),
            (strings{"notify 0 rank_unfinalized [1] 0", "notify 1 rank_unfinalized [1] 0",
                     "signal 0 [0] SIGCONT", "signal 0 [0] SIGTERM", "signal 1 [2] SIGCONT",
                     "signal 1 [2] SIGTERM", "start_timer 1 3000ms",
                     "emit rank 0 of spawned job 1 on b exited with code 0 without calling "
                     "MPI_Finalize (PMIx_Finalize); aborting the job (SIGTERM to 2 ranks)"}));
  EXPECT_EQ(h.all<pm::notify_ranks>()[0].line,
            "rank 0 of spawned job 1 on b exited with code 0 without calling MPI_Finalize "
            "(PMIx_Finalize)");
}

TEST(Controller, SurvivorsOnHostsOnlySpawnedJobsUseAreTold) {
  pm::controller_options o = abort_off();
  o.notify_failures = true;
  harness h(make_map({{"a", 2}, {"b", 2}, {"c", 2}}, 2), o);  // 0, 1 on a
  h.start_all();
  h.feed(pm::job_spawned{{2}});  // 2 on c
  h.start(2, 3);
  EXPECT_EQ(h.end(0, pm::exit_status::exited(6)),
            (strings{"notify 0 rank_exited [0] 6", "notify 2 rank_exited [0] 6",
                     "emit rank 0 on a exited with code 6"}));
}

// ---- what the driver asks ----

TEST(Controller, LiveOnHostAndProcessesOnHostCountEveryJob) {
  harness h(make_map({{"a", 2}, {"b", 2}, {"c", 2}}, 2, pm::map_by::node));  // 0 on a, 1 on b
  h.feed(pm::job_start{});
  EXPECT_EQ(h.ctl.live_on_host(0), 1u);  // pending counts
  h.feed(pm::job_spawned{{0, 2, 0}});    // 2 on a, 3 on c, 4 on a
  EXPECT_EQ(h.ctl.live_on_host(0), 3u);
  EXPECT_EQ(h.ctl.live_on_host(1), 1u);
  EXPECT_EQ(h.ctl.live_on_host(2), 1u);
  EXPECT_EQ(h.ctl.live_on_host(3), 0u);  // unknown host
  EXPECT_EQ(h.ctl.processes_on_host(0), (hosts{0, 2, 4}));
  EXPECT_EQ(h.ctl.processes_on_host(2), (hosts{3}));
  EXPECT_TRUE(h.ctl.processes_on_host(3).empty());
  h.start(0, 5);
  h.end(2, ok);
  EXPECT_EQ(h.ctl.live_on_host(0), 2u);
  EXPECT_EQ(h.ctl.processes_on_host(0), (hosts{0, 2, 4}));  // ended ones stay listed
}

// ---- the report ----

TEST(Controller, ReportEntriesCarryTheirJobAndJobRank) {
  harness h(make_map({{"a", 4}}, 2));
  h.start_all();
  h.feed(pm::job_spawned{{0, 0}});
  h.start(2, 4);
  h.end(3, pm::exit_status::exited(9));  // aborts
  const auto r = h.ctl.report();
  ASSERT_EQ(r.ranks.size(), 4u);
  EXPECT_EQ(r.ranks[1].rank, 1u);
  EXPECT_EQ(r.ranks[1].job, 0u);
  EXPECT_EQ(r.ranks[1].job_rank, 1u);
  EXPECT_EQ(r.ranks[3].rank, 3u);
  EXPECT_EQ(r.ranks[3].job, 1u);
  EXPECT_EQ(r.ranks[3].job_rank, 1u);
  EXPECT_EQ(r.ranks[3].pid, 1003);
  EXPECT_EQ(h.ctl.rank_report_of(2).job, 1u);
  EXPECT_EQ(h.ctl.rank_report_of(2).job_rank, 0u);

  // JSON: "job" and "job_rank" only for spawned jobs' ranks, so reports without spawns keep
  // their schema.
  const auto doc = nlohmann::json::parse(pm::to_json(r));
  EXPECT_EQ(doc["failed"]["rank"], 3);
  EXPECT_FALSE(doc["ranks"][1].contains("job"));
  EXPECT_FALSE(doc["ranks"][1].contains("job_rank"));
  EXPECT_EQ(doc["ranks"][3]["rank"], 3);
  EXPECT_EQ(doc["ranks"][3]["job"], 1);
  EXPECT_EQ(doc["ranks"][3]["job_rank"], 1);
  EXPECT_EQ(doc["ranks"][3]["exit_code"], 9);
  EXPECT_EQ(doc["summary"], "rank 1 of spawned job 1 on a exited with code 9");
}

}  // namespace
