// pmrun --max-restarts with real processes (docs/resilience.md): a failed incarnation is cleared
// on the agent (its ranks and what they left), the next one runs on the same agent with fresh
// variables, the budget is the launch's, and what is never restarted is not.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/processes.hpp"
#include "support/scratch_dir.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::count_of;
using pm::test::read_json;
using pm::test::run_command;
using scratch = pm::test::scratch_dir;

std::vector<std::string> job(std::vector<std::string> args, const std::vector<std::string>& steps) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  args.push_back(pm::test::payload_path());
  args.insert(args.end(), steps.begin(), steps.end());
  return args;
}

// Incarnation 0: rank 2 exits 7, and every rank leaves a grandchild that holds its output open
// and a daemon (setsid) behind. Incarnation 1: rank 0 exits 5. Incarnation 2 succeeds. Nothing of
// an earlier incarnation outlives it: the run ends at once (the grandchildren held the output), and
// every pid any incarnation printed is gone.
TEST(PmrunRestart, TheJobRestartsInPlaceUntilAnIncarnationSucceeds) {
  scratch s("pm-restart");
  const auto start = std::chrono::steady_clock::now();
  // clang-format off
  auto r = run_command(job({"-np", "4", "--max-restarts", "3", "--report", s.file("r.json")},
                           {"pid", "env", "TORCHELASTIC_RESTART_COUNT",
                            "if-restart", "0", "grandchild", "30",
                            "if-restart", "0", "daemon", "30",
                            "if-restart", "0", "sleep", "0.3",
                            "if-restart", "0", "if-rank", "2", "exit", "7",
                            "if-restart", "1", "if-rank", "0", "exit", "5",
                            "if-restart", "0", "sleep", "30",
                            "if-restart", "1", "sleep", "30",
                            "echo", "done"}));
  // clang-format on
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("pmrun: restarting the job \\(1 of 3\\): rank 2 on \\S+ exited with "
                        "code 7\n")))
      << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("pmrun: restarting the job \\(2 of 3\\): rank 0 on \\S+ exited with "
                        "code 5\n")))
      << r.err;
  EXPECT_EQ(count_of(r.err, "restarting the job"), 2u) << r.err;
  EXPECT_EQ(count_of(r.out, "done\n"), 4u) << r.out;  // the last incarnation, every rank
  for (const auto* inc : {"=0\n", "=1\n", "=2\n"}) {
    EXPECT_GE(count_of(r.out, std::string("TORCHELASTIC_RESTART_COUNT") + inc), 1u) << r.out;
  }
  auto pids = pm::test::printed_pids(r.out, "pid");
  const auto left = pm::test::printed_pids(r.out, "grandchild");
  const auto daemons = pm::test::printed_pids(r.out, "daemon");
  EXPECT_EQ(left.size(), 4u) << r.out;
  EXPECT_EQ(daemons.size(), 4u) << r.out;
  EXPECT_GE(pids.size(), 12u - 3u);  // ranks killed early may not have printed
  EXPECT_EQ(std::set<pid_t>(pids.begin(), pids.end()).size(), pids.size());  // new processes
  pids.insert(pids.end(), left.begin(), left.end());
  pids.insert(pids.end(), daemons.begin(), daemons.end());
  EXPECT_TRUE(pm::test::all_gone(pids, 2s));

  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["restarts"], 2);
  ASSERT_EQ(report["incarnations"].size(), 3u);
  EXPECT_EQ(report["incarnations"][0]["exit_code"], 7);
  EXPECT_EQ(report["incarnations"][0]["cause"], "rank_failed");
  EXPECT_EQ(report["incarnations"][0]["failed_rank"], 2);
  EXPECT_EQ(report["incarnations"][1]["exit_code"], 5);
  EXPECT_EQ(report["incarnations"][1]["failed_rank"], 0);
  EXPECT_EQ(report["incarnations"][2]["cause"], "none");
}

TEST(PmrunRestart, TheBudgetIsTheLaunchsAndTheLastFailureDecides) {
  scratch s("pm-restart");
  auto r = run_command(job({"-np", "2", "--max-restarts", "2", "--report", s.file("r.json")},
                           {"if-rank", "1", "exit", "7", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(count_of(r.err, "restarting the job"), 2u) << r.err;
  EXPECT_NE(r.err.find("(2 of 2)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(3 of 2)"), std::string::npos) << r.err;
  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["restarts"], 2);
  EXPECT_EQ(report["incarnations"].size(), 3u);
  EXPECT_EQ(report["cause"], "rank_failed");
}

// --timeout bounds the whole launch, also while no incarnation runs (a discovery command that
// takes its time): the launch ends at the deadline, no incarnation starts after it, and the line
// names the user's timeout, not what was left of it.
TEST(PmrunRestart, TheTimeoutAlsoRunsBetweenIncarnations) {
  scratch s("pm-restart");
  const auto discover = "echo $$ > " + s.file("discovery.pid") + "; sleep 30; echo localhost:2";
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command(
      job({"-np", "2", "--max-restarts", "2", "--timeout", "2", "--host-discovery-script", discover,
           "--report", s.file("r.json")},
          {"if-restart", "0", "if-rank", "1", "exit", "7", "echo", "started", "sleep", "30"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("pmrun: job timed out after 2 s, before its restart (1 of 2) could start\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(count_of(r.out, "started"), 1u) << r.out;  // rank 0 of the first incarnation only
  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["cause"], "timeout");
  std::ifstream pid_file(s.file("discovery.pid"));
  pid_t discovery = 0;
  pid_file >> discovery;
  ASSERT_GT(discovery, 0);
  EXPECT_TRUE(pm::test::all_gone({discovery}, 2s));

  // The timer of a later incarnation runs for what is left; its line says the user's figure.
  auto later = run_command(job({"-np", "2", "--max-restarts", "2", "--timeout", "2.5"},
                               {"if-restart", "0", "if-rank", "1", "exit", "7", "sleep", "30"}));
  EXPECT_EQ(later.exit_code, 124) << later.err;
  EXPECT_NE(later.err.find("pmrun: job timed out after 2.5 s; aborting the job"), std::string::npos)
      << later.err;
}

TEST(PmrunRestart, AProgramThatCannotStartOrAnInterruptIsNotRestarted) {
  auto missing = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2",
                              "--max-restarts", "3", "/no/such/program"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_EQ(missing.err.find("restarting"), std::string::npos) << missing.err;
  // A rank's own 126 or 127 is a shell's "cannot execute" or "not found": not restarted either.
  for (const auto* code : {"126", "127"}) {
    auto shell = run_command(
        job({"-np", "2", "--max-restarts", "3"}, {"if-rank", "1", "exit", code, "sleep", "30"}));
    EXPECT_EQ(shell.exit_code, std::stoi(code)) << shell.err;
    EXPECT_EQ(shell.err.find("restarting"), std::string::npos) << shell.err;
  }

  scratch s("pm-restart");
  pm::test::background b(job({"-np", "2", "--max-restarts", "3", "--report", s.file("r.json")},
                             {"pid", "sleep", "30"}));
  b.wait_lines(2);
  const auto pids = pm::test::printed_pids(b.text, "pid");
  ASSERT_EQ(pids.size(), 2u) << b.text;
  ::kill(b.pid, SIGINT);
  const int status = b.wait_status();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_TRUE(pm::test::all_gone(pids, 2s));
  const auto report = read_json(s.file("r.json"));
  EXPECT_EQ(report["cause"], "signal");
  EXPECT_EQ(report["restarts"], 0);
}

TEST(PmrunRestart, PerRankFilesKeepEveryIncarnationsOutput) {
  scratch s("pm-restart");
  auto r = run_command(
      job({"-np", "2", "--max-restarts", "1", "--output-filename", s.file("out")},
          {"env", "TORCHELASTIC_RESTART_COUNT", "if-restart", "0", "if-rank", "1", "exit", "3"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(s.file("out/1/rank.1/stdout"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "TORCHELASTIC_RESTART_COUNT=0\nTORCHELASTIC_RESTART_COUNT=1\n");
}

// A stall (--stall-timeout) is a failure a restart is for: the hung incarnation is named, ended
// and restarted; the next one runs to its end.
TEST(PmrunRestart, AStalledJobIsRestarted) {
  auto r = run_command(job({"-np", "2", "--stall-timeout", "1", "--max-restarts", "1"},
                           {"if-restart", "0", "sleep", "30", "echo", "ok"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\nok\n");
  EXPECT_NE(r.err.find("pmrun: stalled on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pmrun: restarting the job (1 of 1): no rank progressed for 1 s"),
            std::string::npos)
      << r.err;
}

// Restart options that cannot be met get one line and exit 2 before anything starts.
TEST(PmrunRestart, RestartOptionsThatCannotBeMetAreOneLine) {
  const auto expect_line = [](std::vector<std::string> args, const std::string& line) {
    const auto r = run_command(job(std::move(args), {"exit", "0"}), 30s);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, "pmrun: " + line + "\n");
    EXPECT_TRUE(r.out.empty()) << r.out;
  };
  expect_line({"-np", "1", "--max-restarts", "-1"},
              "--max-restarts '-1': a count cannot be negative");
  expect_line({"-np", "1", "--max-restarts", "1", "--min-hosts", "-2"},
              "--min-hosts '-2': a count cannot be negative");
  expect_line({"-np", "1", "--min-hosts", "1"},
              "--min-hosts 1 needs --max-restarts: the job goes on with fewer hosts only when it "
              "restarts");
  expect_line({"-np", "2", "--max-restarts", "1", "--min-hosts", "2"},
              "--min-hosts 2 is above the 1 host the job runs on");
  expect_line({"-np", "1", "--max-restarts", "1", "--min-hosts", "1", "--enable-recovery"},
              "--min-hosts 1 goes with whole-job restarts; --enable-recovery restarts single ranks "
              "and never shrinks the job");
  expect_line({"-np", "1", "--host-discovery-script", "echo localhost"},
              "--host-discovery-script needs --max-restarts: hosts join when the job restarts");
  expect_line({"-np", "1", "--max-restarts", "1", "--enable-recovery", "--host-discovery-script",
               "echo localhost"},
              "--host-discovery-script goes with whole-job restarts; --enable-recovery restarts "
              "single ranks where they ran");
  expect_line({"-np", "1", "--max-restarts", "1", "--host-discovery-script", " "},
              "--host-discovery-script: the command is empty");
}

}  // namespace
