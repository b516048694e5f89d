// pmrun --enable-recovery with real processes (docs/resilience.md, "Recovering single ranks"):
// a failed rank starts again alone, on its host, while the others run on; one budget for the
// launch; the report lists every rank restart; the output of every process is kept.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "support/command.hpp"
#include "support/processes.hpp"
#include "support/scratch_dir.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::count_of;
using pm::test::read_json;
using pm::test::run_command;
using scratch = pm::test::scratch_dir;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

// 100 independent tasks; 5 of them fail once (a task fails when its marker file does not exist
// yet, and creates it). Every task completes, the job succeeds, exactly those 5 were restarted,
// once each, and the output of both processes of each is there.
TEST(PmrunRecovery, OneHundredTasksFiveFailOnceAllComplete) {
  scratch s("pm-recovery");
  const std::set<int> failing = {3, 27, 50, 71, 99};
  const std::string task =
      "r=$OMPI_COMM_WORLD_RANK; case $r in 3|27|50|71|99) if [ ! -e " + s.dir.string() +
      "/m.$r ]; then : > " + s.dir.string() +
      "/m.$r; echo \"first $r\"; echo \"oops $r\" >&2; exit 7; fi;; esac; echo \"done $r "
      "${TORCHELASTIC_RESTART_COUNT:-unset}\"";
  auto r =
      run_command(pmrun({"-np", "100", "--oversubscribe", "--enable-recovery", "--max-restarts",
                         "10", "--report", s.file("r.json"), "sh", "-c", task}),
                  120s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "pmrun: restarting rank "), 5u) << r.err;
  for (int rank = 0; rank < 100; ++rank) {
    const bool fails = failing.contains(rank);
    const auto done = "done " + std::to_string(rank) + " " + (fails ? "1" : "0") + "\n";
    EXPECT_EQ(count_of(r.out, done), 1u) << rank << "\n" << r.out;
    if (fails) {
      EXPECT_EQ(count_of(r.out, "first " + std::to_string(rank) + "\n"), 1u) << r.out;
      EXPECT_EQ(count_of(r.err, "oops " + std::to_string(rank) + "\n"), 1u) << r.err;
      EXPECT_TRUE(std::regex_search(
          r.err, std::regex("pmrun: restarting rank " + std::to_string(rank) +
                            " on \\S+ \\([1-5] of 10\\): rank " + std::to_string(rank) +
                            " on \\S+ exited with code 7\n")))
          << r.err;
    }
  }
  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["cause"], "none");
  EXPECT_EQ(report["restarts"], 5);
  ASSERT_EQ(report["rank_restarts"].size(), 5u);
  std::set<int> restarted;
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& x = report["rank_restarts"][i];
    EXPECT_EQ(x["restart"], i + 1);
    EXPECT_EQ(x["count"], 1);
    EXPECT_EQ(x["exit_code"], 7);
    restarted.insert(x["rank"].get<int>());
  }
  EXPECT_EQ(restarted, failing);  // the other 95 ranks were never restarted
  ASSERT_EQ(report["ranks"].size(), 100u);
  for (const auto& rank : report["ranks"]) {
    EXPECT_EQ(rank["state"], "exited");
    EXPECT_EQ(rank["exit_code"], 0);
  }
  EXPECT_FALSE(report.contains("incarnations"));
}

// The budget is the launch's: a task that always fails spends it, and its last failure then ends
// the job by the failure policy (abort, its exit code).
TEST(PmrunRecovery, ATaskThatAlwaysFailsSpendsTheBudgetThenEndsTheJob) {
  scratch s("pm-recovery");
  auto r = run_command(
      pmrun({"-np", "3", "--enable-recovery", "--max-restarts", "3", "--report", s.file("r.json"),
             pm::test::payload_path(), "pid", "if-rank", "1", "exit", "9", "sleep", "30"}),
      60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 9) << r.err;
  EXPECT_EQ(count_of(r.err, "pmrun: restarting rank 1 "), 3u) << r.err;
  EXPECT_NE(r.err.find("(3 of 3)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(4 of 3)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 on "), std::string::npos);
  EXPECT_NE(r.err.find("exited with code 9; aborting the job"), std::string::npos) << r.err;
  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["exit_code"], 9);
  EXPECT_EQ(report["cause"], "rank_failed");
  EXPECT_EQ(report["failed"]["rank"], 1);
  EXPECT_EQ(report["restarts"], 3);
  ASSERT_EQ(report["rank_restarts"].size(), 3u);
  EXPECT_EQ(report["rank_restarts"][2]["count"], 3);
  // Ranks 0 and 2 ran once (one pid each, never restarted); rank 1 four times. Nothing is left.
  const auto pids = pm::test::printed_pids(r.out, "pid");
  EXPECT_EQ(pids.size(), 6u) << r.out;
  EXPECT_TRUE(pm::test::all_gone(pids, 2s));
}

// Without --max-restarts (PRRTE's default): no rank restarts, and the others run on to their end;
// the failure's code is the job's.
TEST(PmrunRecovery, WithoutABudgetTheOthersRunOn) {
  auto r = run_command(pmrun({"-np", "3", "--enable-recovery", pm::test::payload_path(), "if-rank",
                              "0", "exit", "4", "sleep", "0.3", "echo", "finished"}),
                       60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(count_of(r.out, "finished\n"), 2u) << r.out;
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
}

// What is never recovered is not: a program that cannot start.
TEST(PmrunRecovery, AProgramThatCannotStartIsNotRestarted) {
  auto r = run_command(
      pmrun({"-np", "2", "--enable-recovery", "--max-restarts", "5", "/nonexistent/program"}), 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
}

// A restarted rank's output: its earlier process's lines and its own, also in --output-filename
// files (appended), and what its earlier process left (a grandchild holding its output) is gone.
TEST(PmrunRecovery, ARestartedRanksOutputIsKept) {
  scratch s("pm-recovery");
  auto r = run_command(pmrun({"-np",
                              "2",
                              "--enable-recovery",
                              "--max-restarts",
                              "1",
                              "--output-filename",
                              s.file("out"),
                              pm::test::payload_path(),
                              "echo",
                              "hello",
                              "if-restart",
                              "0",
                              "if-rank",
                              "1",
                              "grandchild",
                              "30",
                              "if-restart",
                              "0",
                              "if-rank",
                              "1",
                              "exit",
                              "3",
                              "env",
                              "TORCHELASTIC_RESTART_COUNT"}),
                       60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "hello\n"), 3u) << r.out;
  EXPECT_EQ(count_of(r.out, "TORCHELASTIC_RESTART_COUNT=1\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "TORCHELASTIC_RESTART_COUNT=0\n"), 1u) << r.out;
  const auto left = pm::test::printed_pids(r.out, "grandchild");
  EXPECT_EQ(left.size(), 1u) << r.out;
  EXPECT_TRUE(pm::test::all_gone(left, 2s));
  std::ifstream f(s.file("out") + "/1/rank.1/stdout");
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(count_of(text.str(), "hello\n"), 2u) << text.str();
}

// What a failed rank left outside its process group (setsid) and holds its output: the group's
// SIGKILL misses it, and the restart waited for it to end (for ever, for a daemon). After the kill
// grace its output is cut and the rank starts again; it is ended with the job's leftovers.
TEST(PmrunRecovery, ADaemonHoldingAFailedRanksOutputDoesNotHoldItsRestartUp) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command(pmrun({"-np",
                              "2",
                              "--enable-recovery",
                              "--max-restarts",
                              "1",
                              "--kill-grace",
                              "1",
                              pm::test::payload_path(),
                              "if-restart",
                              "0",
                              "if-rank",
                              "1",
                              "daemon",
                              "300",
                              "if-restart",
                              "0",
                              "if-rank",
                              "1",
                              "sleep",
                              "0.5",
                              "if-restart",
                              "0",
                              "if-rank",
                              "1",
                              "exit",
                              "3",
                              "sleep",
                              "2",
                              "env",
                              "TORCHELASTIC_RESTART_COUNT"}),
                       60s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("pmrun: rank 1 on \\S+: what its failed process left running still "
                        "holds its output after 1 s; its output is cut there and the rank "
                        "starts again\n")))
      << r.err;
  EXPECT_EQ(count_of(r.out, "TORCHELASTIC_RESTART_COUNT=1\n"), 1u) << r.out;
  const auto daemons = pm::test::printed_pids(r.out, "daemon");
  ASSERT_EQ(daemons.size(), 1u) << r.out;
  EXPECT_TRUE(pm::test::all_gone(daemons, 2s));
}

TEST(PmrunRecovery, EnableAndDisableTogetherIsAUsageError) {
  auto r = run_command(pmrun({"--enable-recovery", "--disable-recovery", "-np", "1", "true"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;  // docs/exit-codes.md: usage
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
  EXPECT_NE(r.err.find("--enable-recovery and --disable-recovery"), std::string::npos) << r.err;
}

}  // namespace
