// pmrun with real processes: the failure rules, signals, timeout, no orphans, stdin, env.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/processes.hpp"
#include "support/scratch_dir.hpp"
#include "sys/sanitizers.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::run_command;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

// pmrun ARGS -- payload STEPS
std::vector<std::string> job(std::vector<std::string> args, const std::vector<std::string>& steps) {
  args.push_back(pm::test::payload_path());
  args.insert(args.end(), steps.begin(), steps.end());
  return pmrun(args);
}

using pm::test::alive;
using pm::test::all_gone;
using pm::test::background;
using pm::test::printed_pids;

TEST(PmrunRun, EveryRankRunsAndSucceeds) {
  auto r = run_command(job({"-np", "4"}, {"echo", "hello"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello\nhello\nhello\nhello\n");
  EXPECT_EQ(r.err, "");
}

TEST(PmrunRun, FirstFailureAbortsAndDecidesTheExitCode) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command(job({"-np", "8"}, {"if-rank", "3", "exit", "7", "sleep", "30"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_TRUE(std::regex_match(
      r.err,
      std::regex("pmrun: rank 3 on \\S+ exited with code 7; aborting the job \\(SIGTERM to 7 "
                 "ranks\\)\n")))
      << r.err;
}

TEST(PmrunRun, SignalDeathIsNamed) {
  auto r = run_command(job({"-np", "2"}, {"if-rank", "1", "kill", "9", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_NE(r.err.find("rank 1 on "), std::string::npos);
  EXPECT_NE(r.err.find(" was killed by SIGKILL"), std::string::npos) << r.err;
}

TEST(PmrunRun, RanksIgnoringTermAreKilledAfterTheGrace) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command(job({"-np", "3", "--kill-grace", "0.5"},
                           {"ignore-term", "if-rank", "0", "exit", "5", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(PmrunRun, NoAbortLetsTheOthersFinish) {
  for (auto flags : {std::vector<std::string>{"--no-abort-on-failure"},
                     std::vector<std::string>{"-mca", "orte_abort_on_non_zero_status", "0"}}) {
    flags.insert(flags.end(), {"-np", "3"});
    auto r = run_command(job(flags, {"if-rank", "1", "exit", "3", "sleep", "0.3", "echo", "done"}));
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.out, "done\ndone\n");
    EXPECT_NE(r.err.find("rank 1 on "), std::string::npos);
  }
}

TEST(PmrunRun, Timeout) {
  auto r = run_command(job({"-np", "2", "--timeout", "0.5"}, {"sleep", "30"}));
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_NE(r.err.find("job timed out after 0.5 s"), std::string::npos) << r.err;
}

TEST(PmrunRun, MissingProgramStartsNothing) {
  auto r = run_command(pmrun({"-np", "4", "./no-such-program"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err, "pmrun: './no-such-program' does not exist\n");
  auto p = run_command(pmrun({"-np", "4", "no-such-program-xyz"}));
  EXPECT_EQ(p.exit_code, 127);
  EXPECT_EQ(p.err, "pmrun: program 'no-such-program-xyz' not found in PATH\n");
}

TEST(PmrunRun, AMissingWorkingDirectoryStartsNothing) {
  // The second app's directory: checked with its program, before the first app's ranks start.
  auto r = run_command(pmrun({"-np", "2", "/bin/sh", "-c", "echo started; sleep 5", ":", "-np", "1",
                              "--wdir", "/no/such/dir", "/bin/pwd"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "pmrun: working directory '/no/such/dir' does not exist\n");
  r = run_command(pmrun({"-np", "1", "--wdir", "/etc/passwd", "/bin/pwd"}));
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_EQ(r.err, "pmrun: working directory '/etc/passwd' is not a directory\n");
}

TEST(PmrunRun, WhatTheUserTypedIsQuotedOnOneLine) {
  // A newline or a terminal's escape in a program or directory name is spelled out.
  auto r = run_command(pmrun({"-np", "1", "no\nsuch\x1b[31m"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err, "pmrun: program 'no\\nsuch\\x1b[31m' not found in PATH\n");
  r = run_command(pmrun({"-np", "1", "--wdir", "/no\nsuch", "/bin/pwd"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err, "pmrun: working directory '/no\\nsuch' does not exist\n");
}

TEST(PmrunRun, ReportFile) {
  char tmpl[] = "/tmp/pmrun-report-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto r = run_command(
      job({"-np", "3", "--report", dir + "/r.json"}, {"if-rank", "2", "exit", "9", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 9);
  std::ifstream in(dir + "/r.json");
  auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["exit_code"], 9);
  EXPECT_EQ(doc["cause"], "rank_failed");
  EXPECT_EQ(doc["failed"]["rank"], 2);
  EXPECT_EQ(doc["ranks"].size(), 3u);
  EXPECT_EQ(doc["ranks"][0]["state"], "killed");
  std::remove((dir + "/r.json").c_str());
  rmdir(dir.c_str());
}

TEST(PmrunRun, NothingSurvivesTheJob) {
  // Ranks leave a grandchild in their group and a setsid daemon; rank 0 fails at once.
  auto r = run_command(job({"-np", "3"}, {"grandchild", "30", "daemon", "30", "sleep", "0.3",
                                          "if-rank", "0", "exit", "1", "sleep", "30"}));
  EXPECT_EQ(r.exit_code, 1);
  auto pids = printed_pids(r.out, "grandchild");
  auto daemons = printed_pids(r.out, "daemon");
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(daemons.size(), 3u);
  pids.insert(pids.end(), daemons.begin(), daemons.end());
  EXPECT_TRUE(all_gone(pids, 100ms)) << "descendants outlived pmrun";
  for (auto p : pids) kill(p, SIGKILL);  // never leave anything behind, even on failure
}

TEST(PmrunRun, NothingSurvivesASuccessfulJobEither) {
  auto r = run_command(job({"-np", "2"}, {"grandchild", "30", "daemon", "30"}));
  EXPECT_EQ(r.exit_code, 0);
  auto pids = printed_pids(r.out, "grandchild");
  auto daemons = printed_pids(r.out, "daemon");
  pids.insert(pids.end(), daemons.begin(), daemons.end());
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_TRUE(all_gone(pids, 100ms));
  for (auto p : pids) kill(p, SIGKILL);
}

// ThreadSanitizer's runtime defers a signal that arrives while the thread sleeps in epoll_wait
// until the next intercepted call, so a TSan-built pmrun does not see it: these run elsewhere.
#if defined(PM_THREAD_SANITIZER)
#define PM_SKIP_UNDER_TSAN() GTEST_SKIP() << "signals to a sleeping TSan-built pmrun are deferred"
#else
#define PM_SKIP_UNDER_TSAN() (void)0
#endif

TEST(PmrunRun, SigintReachesEveryRankAndPmrunEndsByIt) {
  PM_SKIP_UNDER_TSAN();
  background bg(job({"-np", "3"}, {"pid", "sleep", "30"}));
  bg.wait_lines(3);
  auto ranks = printed_pids(bg.text, "pid");
  ASSERT_EQ(ranks.size(), 3u);
  kill(bg.pid, SIGINT);
  const int status = bg.wait_status();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_TRUE(all_gone(ranks, 1s));
  for (auto p : ranks) kill(p, SIGKILL);
}

TEST(PmrunRun, SigkilledPmrunLeavesNothingBehind) {
  background bg(job({"-np", "3"}, {"grandchild", "30", "daemon", "30", "pid", "sleep", "30"}));
  bg.wait_lines(9);
  auto pids = printed_pids(bg.text, "pid");
  auto kids = printed_pids(bg.text, "grandchild");
  auto daemons = printed_pids(bg.text, "daemon");
  ASSERT_EQ(pids.size(), 3u);
  pids.insert(pids.end(), kids.begin(), kids.end());
  pids.insert(pids.end(), daemons.begin(), daemons.end());
  kill(bg.pid, SIGKILL);  // only pmrun itself: the agent must clean up
  bg.wait_status();
  EXPECT_TRUE(all_gone(pids, 5s)) << "a rank or descendant survived SIGKILL of pmrun";
  for (auto p : pids) kill(p, SIGKILL);
}

// The parent of `pid`, from /proc (0 if it is gone).
pid_t parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// The agent itself SIGKILLed (by the OOM killer, or a user): its ranks die with it (their
// parent-death signal), but what they started kept running, held their output pipes, and pmrun
// waited for those pipes for ever after naming the host lost. pmrun is on the same machine: it
// ends each rank's process group and stops waiting.
TEST(PmrunRun, AKilledLocalAgentLeavesNothingAndThePmrunEnds) {
  background bg(job({"-np", "2"}, {"grandchild", "30", "pid", "echo", "before", "sleep", "30"}));
  bg.wait_lines(6);
  auto ranks = printed_pids(bg.text, "pid");
  auto kids = printed_pids(bg.text, "grandchild");
  ASSERT_EQ(ranks.size(), 2u) << bg.text;
  ASSERT_EQ(kids.size(), 2u) << bg.text;
  const pid_t agent = parent_of(ranks[0]);
  ASSERT_GT(agent, 1);
  ASSERT_EQ(parent_of(agent), bg.pid);  // pmd, pmrun's child
  kill(agent, SIGKILL);
  const int status = bg.wait_status(20);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 213) << status << "\n" << bg.text;
  ranks.insert(ranks.end(), kids.begin(), kids.end());
  EXPECT_TRUE(all_gone(ranks, 5s)) << "a rank or its child outlived its agent";
  for (auto p : ranks) kill(p, SIGKILL);
}

TEST(PmrunRun, UsrSignalsAreForwarded) {
  PM_SKIP_UNDER_TSAN();
  // The rank dies by SIGUSR1 (default action): proof it was forwarded.
  background bg(job({"-np", "2"}, {"pid", "sleep", "30"}));
  bg.wait_lines(2);
  kill(bg.pid, SIGUSR1);
  const int status = bg.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGUSR1) << status;
}

TEST(PmrunRun, StdinGoesToRankZero) {
  auto r = run_command(job({"-np", "3"}, {"cat", "echo", "end"}), 30s, "line one\nline two\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("line one\nline two\n"), std::string::npos);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 5);  // 2 lines + 3 "end"
}

TEST(PmrunRun, StdinToAllAndNone) {
  auto all = run_command(job({"-np", "2", "--stdin", "all"}, {"cat"}), 30s, "x\n");
  EXPECT_EQ(all.out, "x\nx\n") << all.err;
  auto none = run_command(job({"-np", "2", "--stdin", "none"}, {"cat"}), 30s, "x\n");
  EXPECT_EQ(none.out, "");
}

// Larger than a pipe: every rank gets every byte, in order (the forwarder once wrote from a
// buffer that grew under its pending write), also from a regular file (epoll refuses one).
TEST(PmrunRun, StdinToAllCarriesEveryByteFromAPipeAndAFile) {
  std::string input;
  for (int i = 0; i < 100000; ++i) input += std::to_string(i) + "\n";
  const auto want = run_command({"/bin/sh", "-c", "cksum"}, 10s, input).out;
  auto piped =
      run_command(pmrun({"-np", "3", "--stdin", "all", "/bin/sh", "-c", "cksum"}), 30s, input);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, want + want + want);
  char path[] = "/tmp/pmrun-stdin-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(fd);
  auto from_file =
      run_command({"/bin/sh", "-c",
                   "exec '" + pm::test::pmrun_path() +
                       "' --allow-run-as-root -np 3 --stdin all /bin/sh -c cksum < " + path});
  unlink(path);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, want + want + want);
}

TEST(PmrunRun, EnvContract) {
  auto r = run_command(
      job({"-np", "2", "-x", "FOO=bar", "-mca", "btl", "self"}, {"if-rank", "1", "env-all"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line :
       {"OMPI_COMM_WORLD_RANK=1\n", "OMPI_COMM_WORLD_SIZE=2\n", "RANK=1\n", "WORLD_SIZE=2\n",
        "LOCAL_RANK=1\n", "NODE_RANK=0\n", "MASTER_ADDR=127.0.0.1\n", "FOO=bar\n",
        "OMPI_MCA_btl=self\n", "PMI_RANK=1\n", "SLURM_PROCID=1\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line;
  }
}

TEST(PmrunRun, TheCloudDocsLines) {
  char tmpl[] = "/tmp/pmrun-out-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto r = run_command(
      pmrun({"-n", "8", "--output-filename", dir + "/log_output", "--merge-stderr-to-stdout",
             pm::test::payload_path(), "echo", "out", "echo-err", "err"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 16);
  std::ifstream rank7(dir + "/log_output/1/rank.7/stdout");
  std::stringstream text;
  text << rank7.rdbuf();
  EXPECT_EQ(text.str(), "out\nerr\n");
  std::string cleanup = "rm -rf " + dir;
  EXPECT_EQ(std::system(cleanup.c_str()), 0);

  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "VAR=from-env"};
  auto m = run_command(
      pmrun({"--host", "localhost:6", "-np", "6", "--display-map", "--tag-output", "-bind-to",
             "none", "-map-by", "slot", "-x", "VAR", "-mca", "orte_abort_on_non_zero_status", "1",
             pm::test::payload_path(), "env", "VAR"}),
      30s, "", &env);
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("Num procs: 6"), std::string::npos);
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(m.out.find("[1," + std::to_string(rank) + "]<stdout>:VAR=from-env\n"),
              std::string::npos);
  }
}

// Nothing reads pmrun's stdout (`pmrun ... | less` left open, a stopped consumer): the ranks'
// output fills the pipe and the ranks block. The first interrupt ends the ranks; their output
// still waits for the reader. The second ends pmrun at once, its unwritten output named
// (docs/failure-semantics.md, "Signals"): it had waited for the reader for ever.
TEST(PmrunRun, ASecondInterruptEndsPmrunWhileNothingReadsItsOutput) {
  pm::test::background b(
      {pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2", "sh", "-c", "yes x"});
  std::this_thread::sleep_for(1s);  // the pipe is full: b never reads it
  ::kill(b.pid, SIGINT);
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(pm::test::alive(b.pid));  // the output waits for its reader
  ::kill(b.pid, SIGINT);
  const auto asked = std::chrono::steady_clock::now();
  const int status = b.wait_status(10);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 3s);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  // Less output than makes the terminal "congested" (the ranks never blocked): the same.
  pm::test::background c({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "1", "sh", "-c",
                          "yes x | head -c 300000; exec sleep 30"});
  std::this_thread::sleep_for(1s);
  ::kill(c.pid, SIGINT);
  std::this_thread::sleep_for(300ms);
  ::kill(c.pid, SIGINT);
  const auto asked_again = std::chrono::steady_clock::now();
  const int small = c.wait_status(10);
  EXPECT_LT(std::chrono::steady_clock::now() - asked_again, 3s);
  EXPECT_TRUE(WIFSIGNALED(small) && WTERMSIG(small) == SIGINT) << small;
}

// ^Z at once, before the ranks start: the job is suspended, also the ranks that start after the
// stop (their agent stops them, told by the launcher's link; they ran on). ^Z's continuation
// runs them to their ends.
TEST(PmrunRun, AStopDuringTheLaunchSuspendsTheRanksThatStartAfterIt) {
  pm::test::scratch_dir s("pm-tstp");
  pm::test::background b({pm::test::pmrun_path(), "--allow-run-as-root", "--oversubscribe", "-np",
                          "32", "sh", "-c", "sleep 0.3; touch " + s.file("done.") + "$RANK"});
  // As soon as pmrun catches SIGTSTP: before, the signal would meet the disposition it
  // inherited (ignored under some CI runners, so nothing stopped).
  const auto catches_tstp = [&] {
    std::ifstream status("/proc/" + std::to_string(b.pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigCgt:", 0) == 0) {
        return ((std::stoull(line.substr(7), nullptr, 16) >> (SIGTSTP - 1)) & 1) != 0;
      }
    }
    return false;
  };
  for (int i = 0; i < 5000 && !catches_tstp(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(catches_tstp());
  ::kill(b.pid, SIGTSTP);
  std::this_thread::sleep_for(1500ms);
  std::size_t done = 0;
  for (const auto& e : std::filesystem::directory_iterator(s.dir)) done += e.is_regular_file();
  EXPECT_EQ(done, 0u) << "ranks ran while the job was stopped";
  ::kill(b.pid, SIGCONT);
  const int status = b.wait_status(20);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  done = 0;
  for (const auto& e : std::filesystem::directory_iterator(s.dir)) done += e.is_regular_file();
  EXPECT_EQ(done, 32u);
}

}  // namespace
