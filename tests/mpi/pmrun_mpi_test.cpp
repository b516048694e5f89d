// Real MPI programs (Open MPI 4.1, mpi4py) under pmrun on this host: one job of N ranks, not N
// singletons (docs/pmix.md). Each test also checks that nothing of PMIx or Open MPI is left in
// the job's TMPDIR or in /dev/shm afterwards.
// Tools are in pmrun_mpi_tool_test.cpp, who reaches the PMIx server in
// pmrun_mpi_access_test.cpp; the fixture is mpi/pmrun_mpi.hpp.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/processes.hpp"

#include "mpi/pmrun_mpi.hpp"

namespace {

TEST_F(PmrunMpi, EveryRankSeesOneWorldAtOneTwoAndFourRanks) {
  for (const int n : {1, 2, 4}) {
    // mpi_hello N exits 3 if it finds itself in a world of another size (a singleton).
    const auto r = pmrun({"-np", std::to_string(n), mpi_dir + "/mpi_hello", std::to_string(n)});
    ASSERT_EQ(r.exit_code, 0) << n << " ranks: " << r.err;
    EXPECT_EQ(hellos(r.out, n).size(), static_cast<std::size_t>(n)) << r.out;
    expect_nothing_left();
  }
}

TEST_F(PmrunMpi, RingAllreduceAndBarriersRun) {
  auto r = pmrun({"-np", "4", mpi_dir + "/mpi_ring"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ring size 4 sum 6"), std::string::npos) << r.out;
  r = pmrun({"-np", "4", mpi_dir + "/mpi_allreduce"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  EXPECT_EQ(r.out.find("sum 10") != std::string::npos, true) << r.out;
  // 4 ranks on 2 cores: without yielding when idle (set by pmd, as mpirun sets it) this takes
  // tens of seconds instead of a fraction of one.
  r = pmrun({"-np", "4", mpi_dir + "/mpi_barrier_loop", "2000"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("barriers 2000 size 4"), std::string::npos) << r.out;
  expect_nothing_left();
}

TEST_F(PmrunMpi, MpmdAppsKnowTheirAppNumber) {
  const auto r = pmrun(
      {"-np", "1", mpi_dir + "/mpi_hello", "3", ":", "-np", "2", mpi_dir + "/mpi_hello", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto by_rank = hellos(r.out, 3);
  ASSERT_EQ(by_rank.size(), 3u) << r.out;
  EXPECT_NE(by_rank.at(0).find("appnum 0"), std::string::npos);
  EXPECT_NE(by_rank.at(1).find("appnum 1"), std::string::npos);
  EXPECT_NE(by_rank.at(2).find("appnum 1"), std::string::npos);
  expect_nothing_left();
}

// Restarts in place (docs/resilience.md): Open MPI's MPI_Abort in incarnation 0, then the same
// ranks allreduce as one new job (a fresh namespace); mpi4py likewise after a rank that left
// without MPI_Finalize.
TEST_F(PmrunMpi, AJobRestartedInPlaceRunsAsOneNewJob) {
  auto r = pmrun({"-np", "4", "--max-restarts", "1", "/bin/sh", "-c",
                  "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exec " + mpi_dir +
                      "/mpi_abort 1; else exec " + mpi_dir + "/mpi_allreduce; fi"},
                 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting the job (1 of 1): rank 1 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MPI_Abort"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 5) << r.out;  // the abort line + 4
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("allreduce rank " + std::to_string(rank) + " size 4 sum 10"),
              std::string::npos)
        << r.out;
  }
  expect_nothing_left();

  r = pmrun({"-np", "3", "--max-restarts", "2", python, PM_MPI_SOURCE_DIR "/mpi_restart.py"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting the job (1 of 2): rank 1 on "), std::string::npos) << r.err;
  std::set<std::string> nspaces;
  std::smatch m;
  const std::regex line("incarnation 1 rank (\\d) size 3 sum 6 nspace (\\S+)");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line);
       it != std::sregex_iterator(); ++it) {
    nspaces.insert((*it)[2]);
  }
  ASSERT_EQ(nspaces.size(), 1u) << r.out;  // one job: every rank in one namespace
  EXPECT_TRUE(nspaces.begin()->ends_with(".r1")) << *nspaces.begin();
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  expect_nothing_left();
}

// --enable-recovery with PMIx (docs/resilience.md, "Recovering single ranks"): rank 0 holds the
// agent's PMIx server up; rank 1's first process connects, finalizes and exits 3; its next
// process connects again as rank 1 of the same namespace (its client was registered again) and
// succeeds. Nothing else restarts.
TEST_F(PmrunMpi, ARecoveredRankConnectsAgainAsTheSameClient) {
  const auto touch = mpi_dir + "/pmix_touch";
  auto r =
      pmrun({"-np", "2", "--enable-recovery", "--max-restarts", "2", "/bin/sh", "-c",
             "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then exec " + touch + " 2; fi; sleep 0.5; " +
                 touch + " 0 || exit 9; [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exit 3; exit 0"},
            60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting rank 1 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(1 of 2): rank 1 on "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(2 of 2)"), std::string::npos) << r.err;
  std::size_t n = 0;
  for (auto at = r.out.find("touch rank 1 size 2"); at != std::string::npos;
       at = r.out.find("touch rank 1 size 2", at + 1))
    ++n;
  EXPECT_EQ(n, 2u) << r.out;
  EXPECT_NE(r.out.find("touch rank 0 size 2"), std::string::npos) << r.out;
  expect_nothing_left();
}

TEST_F(PmrunMpi, MpiAbortEndsTheJobWithItsStatusAndNamesTheRank) {
  // Rank 1 aborts; the others wait in a barrier it never joins: only the launcher ends them.
  const auto r = pmrun({"-np", "4", mpi_dir + "/mpi_abort", "1"}, 60s);
  EXPECT_EQ(r.exit_code, 42) << r.err;
  EXPECT_NE(r.err.find("rank 1 on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("called abort with status 42: PMIx_Abort (MPI_Abort)"), std::string::npos)
      << r.err;
  expect_nothing_left();
}

TEST_F(PmrunMpi, Mpi4pyScriptsRunAsOneJob) {
  const auto r = pmrun({"-np", "3", python, PM_MPI_SOURCE_DIR "/mpi_hello.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.out.find("hello rank " + std::to_string(rank) + " size 3"), std::string::npos)
        << r.out;
  }
  expect_nothing_left();
}

TEST_F(PmrunMpi, ARankLeavingWithoutMpiFinalizeEndsTheJob) {
  // Its peers would wait for it in the barrier for ever: the job ends, also when the rank
  // exits 0 and also with --no-abort-on-failure (as mpirun ends it).
  const std::string script = PM_MPI_SOURCE_DIR "/mpi_exit_early.py";
  auto r = pmrun({"-np", "3", python, script, "0"}, 60s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 0 without calling MPI_Finalize"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("passed the barrier"), std::string::npos);
  r = pmrun({"--no-abort-on-failure", "-np", "3", python, script, "5"}, 60s);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("exited with code 5 without calling MPI_Finalize"), std::string::npos)
      << r.err;
  // Killed by a signal: the abort policy is off, but its peers would still wait for it.
  r = pmrun({"--no-abort-on-failure", "-np", "3", python, script, "kill"}, 60s);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("rank 1 on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by SIGKILL without calling MPI_Finalize"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("passed the barrier"), std::string::npos);
  expect_nothing_left();
}

TEST_F(PmrunMpi, NoPmixGivesTheRanksNoServer) {
  const std::vector<std::string> show = {"sh", "-c", "echo ns=${PMIX_NAMESPACE:-none}"};
  auto args = std::vector<std::string>{"--no-pmix", "-np", "2"};
  args.insert(args.end(), show.begin(), show.end());
  auto r = pmrun(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ns=none\nns=none\n");
  args = {"-np", "2"};
  args.insert(args.end(), show.begin(), show.end());
  r = pmrun(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ns=pmrun."), std::string::npos) << r.out;
  expect_nothing_left();
  // And an MPI program then runs as singletons, as it would without any launcher (each leaving
  // Open MPI's session directory in TMPDIR behind, as singletons do). Rank 1 starts half a second
  // later: two Open MPI 4.1 singletons starting at once can collide making that directory
  // ("File exists"), which is Open MPI's race, not what this test is about.
  r = pmrun({"--no-pmix", "-np", "2", "sh", "-c",
             "sleep 0.$((OMPI_COMM_WORLD_RANK * 5)); exec " + mpi_dir + "/mpi_hello"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(hellos(r.out, 1).size(), 1u) << r.out;  // both say "rank 0 size 1"
}

TEST_F(PmrunMpi, OpenMpiTransportsAreNamedOnAHostWithoutRdmaUnlessTheUserChose) {
  const bool rdma = fs::exists("/sys/class/infiniband") && !fs::is_empty("/sys/class/infiniband");
  auto r = pmrun({"-np", "1", "sh", "-c", "echo pml=$OMPI_MCA_pml btl=$OMPI_MCA_btl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, rdma ? "pml= btl=\n" : "pml=ob1 btl=self,vader,tcp\n");
  r = pmrun({"-x", "OMPI_MCA_btl=self,tcp", "-np", "1", "sh", "-c",
             "echo pml=$OMPI_MCA_pml btl=$OMPI_MCA_btl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, rdma ? "pml= btl=self,tcp\n" : "pml=ob1 btl=self,tcp\n");
  r = pmrun({"-mca", "pml", "cm", "-np", "1", "sh", "-c", "echo pml=$OMPI_MCA_pml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pml=cm\n");
}

TEST_F(PmrunMpi, AJobThatNeverCallsPmixNeverStartsTheServer) {
  // With a module that cannot load, a job whose ranks never connect runs as usual: the server
  // is started only by a rank's first connection.
  const std::vector<std::string> broken = {"PM_PMIX_MODULE=/nonexistent/libpm-pmix.so"};
  auto r = pmrun({"-np", "2", "sh", "-c", "echo rank=$PMIX_RANK"}, 30s, broken);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank=0"), std::string::npos);
  EXPECT_NE(r.out.find("rank=1"), std::string::npos);
  EXPECT_EQ(r.err, "");
  // An MPI program connects: then it fails, and the reason is named.
  r = pmrun({"-np", "2", mpi_dir + "/mpi_hello", "2"}, 60s, broken);
  EXPECT_NE(r.exit_code, 0);
  // The agent's line reaches pmrun's stderr through the link, with the host's name.
  EXPECT_NE(r.err.find("pmrun: " + std::string(host_name()) +
                       ": PMIx server: cannot load /nonexistent/libpm-pmix.so"),
            std::string::npos)
      << r.err;
  expect_nothing_left();
  // The same when pmd-helper, the server's process, cannot start: the agent closes its port, so
  // MPI_Init fails at once rather than waiting on a connection nobody accepts.
  const auto start = std::chrono::steady_clock::now();
  r = pmrun({"-np", "2", mpi_dir + "/mpi_hello", "2"}, 60s, {"PM_PMD_HELPER=/nonexistent/helper"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << r.err;
  EXPECT_NE(
      r.err.find("pmrun: " + std::string(host_name()) +
                 ": PMIx server: cannot start /nonexistent/helper: No such file or directory"),
      std::string::npos)
      << r.err;
  expect_nothing_left();
}

// The server's process (pmd-helper) dies while the job runs: its port is free again, for any
// local user to listen on and answer the ranks that connect next. The agent gives the job up at
// once, and the loss names why (it used to run on without a server).
TEST_F(PmrunMpi, AJobWhosePmixServerDiesEndsAndSaysWhy) {
  // Its stderr with its stdout: the line that names the loss is checked.
  pm::test::background b({"/bin/sh", "-c", "exec \"$0\" --allow-run-as-root -np 2 \"$1\" 30 2>&1",
                          pm::test::pmrun_path(), mpi_dir + "/pmix_touch"});
  b.wait_lines(2);  // both ranks connected
  // pmrun -> pmd -> pmd-helper: the helper by its name among pmd's children.
  const auto children = [](pid_t pid) {
    std::vector<pid_t> out;
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    for (pid_t c = 0; in >> c;) out.push_back(c);
    return out;
  };
  pid_t helper = 0;
  for (const auto pmd : children(b.pid)) {
    for (const auto c : children(pmd)) {
      std::ifstream comm("/proc/" + std::to_string(c) + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name == "pmd-helper") helper = c;
    }
  }
  ASSERT_GT(helper, 0) << b.text;
  ::kill(helper, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int status = b.wait_status(20);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 213) << status;
  b.wait_lines(1000);  // the rest, to its end
  EXPECT_NE(b.text.find("(the agent said: its PMIx server ended while the job ran)"),
            std::string::npos)
      << b.text;
  expect_nothing_left();
}

TEST_F(PmrunMpi, RanksEndedInTheMiddleOfMpiLeaveNothing) {
  // --timeout ends ranks that are busy in barriers (SIGTERM, then SIGKILL after the grace).
  const auto r = pmrun({"--timeout", "2", "--kill-grace", "0.2", "-np", "3",
                        mpi_dir + "/mpi_barrier_loop", "100000000"},
                       60s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  expect_nothing_left();
}

// ---- events where the abort policy is off (docs/pmix.md, "Events") ----

// pmix_events' "event rank R: CODE affected=A exit_code=N host=H terminate=T text=..." lines.
struct event_line {
  std::string code, affected, exit_code, host, terminate, text;
};
std::map<int, std::vector<event_line>> events_by_rank(const std::string& out) {
  std::map<int, std::vector<event_line>> by_rank;
  const std::regex re(
      R"(event rank (\d+): (.+?) affected=(\S+) exit_code=(\S+) host=(\S+) terminate=(\d) text=(.*))");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    by_rank[std::stoi(m[1])].push_back(event_line{m[2], m[3], m[4], m[5], m[6], m[7]});
  }
  return by_rank;
}

// The name pmrun gives this host in its lines ("rank 1 on NAME ...").
std::string host_in(const std::string& err, const std::string& rank) {
  const std::regex re("rank " + rank + R"( on (\S+) )");
  std::smatch m;
  return std::regex_search(err, m, re) ? std::string(m[1]) : std::string("?");
}

TEST_F(PmrunMpi, WithoutAbortTheSurvivorsAreToldWhichRankFailedAndHow) {
  const std::string events = mpi_dir + "/pmix_events";
  // Rank 1 finalizes PMIx and exits 7: ranks 0 and 2 get the event and end normally.
  auto r = pmrun({"--no-abort-on-failure", "-np", "3", events, "1", "exit:7", "30"}, 60s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  const std::string host = host_in(r.err, "1");
  EXPECT_NE(r.err.find("pmrun: rank 1 on " + host + " exited with code 7\n"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rank 0 on"), std::string::npos) << r.err;  // the survivors exit 0
  EXPECT_EQ(r.err.find("rank 2 on"), std::string::npos) << r.err;
  auto by_rank = events_by_rank(r.out);
  EXPECT_EQ(by_rank.size(), 2u) << r.out;
  for (const int rank : {0, 2}) {
    ASSERT_EQ(by_rank[rank].size(), 1u) << r.out;
    const auto& e = by_rank[rank].front();
    EXPECT_EQ(e.code, "PROC-EXIT-NONZERO-TERM");  // PMIX_ERR_EXIT_NONZERO_TERM
    EXPECT_EQ(e.affected, "1");
    EXPECT_EQ(e.exit_code, "7");
    EXPECT_EQ(e.host, host);
    EXPECT_EQ(e.terminate, "0");
    EXPECT_EQ(e.text, "rank 1 on " + host + " exited with code 7");
  }
  EXPECT_EQ(r.out.find("no event"), std::string::npos) << r.out;
  expect_nothing_left();

  // Killed by a signal (after PMIx_Finalize): the code a shell shows, 128 + 9.
  r = pmrun({"--no-abort-on-failure", "-np", "3", events, "1", "signal:9", "30"}, 60s);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  by_rank = events_by_rank(r.out);
  EXPECT_EQ(by_rank.size(), 2u) << r.out;
  for (const int rank : {0, 2}) {
    ASSERT_EQ(by_rank[rank].size(), 1u) << r.out;
    EXPECT_EQ(by_rank[rank].front().code, "PROC-ABORTED-BY-SIG");
    EXPECT_EQ(by_rank[rank].front().affected, "1");
    EXPECT_EQ(by_rank[rank].front().exit_code, "137");
    EXPECT_EQ(by_rank[rank].front().text, "rank 1 on " + host + " was killed by SIGKILL");
  }
  expect_nothing_left();
}

TEST_F(PmrunMpi, WithoutAbortTheSurvivorsAreToldTheJobIsBeingEnded) {
  const std::string events = mpi_dir + "/pmix_events";
  // Rank 1 leaves without PMIx_Finalize: the job ends (its peers could wait for it for ever),
  // and they are told before the SIGTERM; they ignore SIGTERM to have the time to read it.
  auto r = pmrun({"--no-abort-on-failure", "--kill-grace", "5", "-np", "3", events, "1",
                  "raw-exit:7", "30", "ignore-term"},
                 60s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  const std::string host = host_in(r.err, "1");
  auto by_rank = events_by_rank(r.out);
  EXPECT_EQ(by_rank.size(), 2u) << r.out;
  for (const int rank : {0, 2}) {
    ASSERT_EQ(by_rank[rank].size(), 1u) << r.out;
    const auto& e = by_rank[rank].front();
    EXPECT_EQ(e.code, "PROC TERMINATED WITHOUT SYNC");  // PMIX_ERR_PROC_TERM_WO_SYNC
    EXPECT_EQ(e.affected, "1");
    EXPECT_EQ(e.exit_code, "7");
    EXPECT_EQ(e.terminate, "1");
    EXPECT_EQ(e.text, "rank 1 on " + host +
                          " exited with code 7 without calling MPI_Finalize (PMIx_Finalize)");
  }
  EXPECT_EQ(r.err.find("grace"), std::string::npos) << r.err;  // they left when told
  expect_nothing_left();

  // The timeout: every rank is told, with the launcher's exit code.
  r = pmrun({"--no-abort-on-failure", "--timeout", "2", "--kill-grace", "5", "-np", "3", events,
             "7", "stay", "30", "ignore-term"},
            60s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  by_rank = events_by_rank(r.out);
  EXPECT_EQ(by_rank.size(), 3u) << r.out;
  for (const auto& [rank, list] : by_rank) {
    ASSERT_EQ(list.size(), 1u) << r.out;
    EXPECT_EQ(list.front().code, "JOB CANCELED");
    EXPECT_EQ(list.front().exit_code, "124");
    EXPECT_EQ(list.front().text, "job timed out after 2 s");
  }
  expect_nothing_left();
}

TEST_F(PmrunMpi, WithTheAbortPolicyOnNoEventIsSent) {
  // The default: the first failure ends the job as before, and nobody is told by an event.
  const auto r = pmrun({"--kill-grace", "0.5", "-np", "3", mpi_dir + "/pmix_events", "1", "exit:7",
                        "30", "ignore-term"},
                       60s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("exited with code 7; aborting the job (SIGTERM to 2 ranks)"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(events_by_rank(r.out).empty()) << r.out;
  EXPECT_NE(r.err.find("2 ranks still running after the 0.5 s grace; sending SIGKILL"),
            std::string::npos)
      << r.err;
  expect_nothing_left();
}

TEST_F(PmrunMpi, OpenMpiRanksUnderNoAbortAreNotAbortedByTheNotices) {
  // Open MPI 4.1 calls MPI_Abort from its default event handler: the notices are marked
  // PMIX_EVENT_NON_DEFAULT. A rank that finalized and exits 7 leaves the others to finish.
  const std::string script =
      "import sys, time\n"
      "from mpi4py import MPI\n"
      "r = MPI.COMM_WORLD.Get_rank()\n"
      "MPI.COMM_WORLD.Barrier()\n"
      "MPI.Finalize()\n"
      "if r == 1: sys.exit(7)\n"
      "time.sleep(1)\n"
      "print('rank', r, 'done', flush=True)\n";
  auto r = pmrun({"--no-abort-on-failure", "-np", "3", python, "-c", script}, 60s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.out.find("rank 0 done"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 2 done"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.err.find("MPI_ABORT"), std::string::npos) << r.err;
  expect_nothing_left();
  // Ranks inside MPI when the launcher ends the job: told (non-default), then stopped; none
  // calls MPI_Abort on the notice.
  r = pmrun({"--no-abort-on-failure", "--timeout", "2", "--kill-grace", "0.5", "-np", "2",
             mpi_dir + "/mpi_barrier_loop", "100000000"},
            60s);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_EQ(r.err.find("MPI_ABORT"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("called abort"), std::string::npos) << r.err;
  expect_nothing_left();
}

// ---- MPI_Comm_spawn (docs/pmix.md, "Spawn") ----

// Lines of `out` that start with `prefix`, sorted.
std::vector<std::string> lines_starting(const std::string& out, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  }
  std::sort(found.begin(), found.end());
  return found;
}

TEST_F(PmrunMpi, CommSpawnStartsTheChildrenAsASecondJobConnectedToTheParents) {
  // One parent spawns two children of itself on the free slots; both sides exchange a sum over
  // the intercommunicator (the children's connect/accept goes through pmrun's data store).
  auto r = pmrun({"-np", "1", mpi_dir + "/mpi_spawn", "2"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(lines_starting(r.out, "parent"),
            (std::vector<std::string>{"parent 0 of 1: children 2", "parent 0 of 1: sum 3"}))
      << r.out;
  EXPECT_EQ(lines_starting(r.out, "child"),
            (std::vector<std::string>{"child 0 of 2: parent size 1", "child 0 of 2: sum 1",
                                      "child 1 of 2: parent size 1", "child 1 of 2: sum 1"}))
      << r.out;
  EXPECT_EQ(r.err, "");
  expect_nothing_left();
  // Two parents, three children: the spawned job's output is tagged as Open MPI tags it, its
  // own job number and ranks.
  r = pmrun({"--tag-output", "-np", "2", mpi_dir + "/mpi_spawn", "3"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int c = 0; c < 3; ++c) {
    EXPECT_NE(r.out.find("[2," + std::to_string(c) + "]<stdout>:child " + std::to_string(c) +
                         " of 3: sum 3"),
              std::string::npos)
        << r.out;
  }
  EXPECT_NE(r.out.find("[1,1]<stdout>:parent 1 of 2: sum 6"), std::string::npos) << r.out;
  expect_nothing_left();
}

TEST_F(PmrunMpi, Mpi4pySpawnsChildren) {
  const auto r = pmrun({"-np", "1", python, PM_MPI_SOURCE_DIR "/mpi_spawn.py", "2"}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(lines_starting(r.out, "child").size(), 4u) << r.out;
  EXPECT_EQ(lines_starting(r.out, "parent").size(), 2u) << r.out;
  expect_nothing_left();
}

TEST_F(PmrunMpi, ASpawnedRankThatFailsEndsTheWholeLaunchAndIsNamed) {
  // Child 1 exits 5 without MPI_Finalize while its parent and sibling wait in the exchange: the
  // failure policy covers the spawned job as the first one.
  const auto r = pmrun({"-np", "1", mpi_dir + "/mpi_spawn", "2", "child-fails"}, 60s);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("rank 1 of spawned job 1 on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 5 without calling MPI_Finalize"), std::string::npos)
      << r.err;
  expect_nothing_left();
}

TEST_F(PmrunMpi, ASpawnBeyondTheFreeSlotsIsRefusedInOneLine) {
  // Two slots, one taken by the parent: two children do not fit. MPI_Comm_spawn fails (Open MPI
  // then aborts with MPI_ERR_SPAWN) and pmrun says why.
  const auto r = pmrun({"-H", "localhost:2", "-np", "1", mpi_dir + "/mpi_spawn", "2"}, 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("pmrun: MPI_Comm_spawn (PMIx_Spawn) refused: not enough slots: 2 ranks "
                       "requested, 1 slot available on 1 host"),
            std::string::npos)
      << r.err;
  expect_nothing_left();
  // With --oversubscribe the same spawn runs.
  const auto ok =
      pmrun({"--oversubscribe", "-H", "localhost:2", "-np", "1", mpi_dir + "/mpi_spawn", "2"}, 60s);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  expect_nothing_left();
  // More than PMIx can number on one node (local ranks are 16-bit): this spawn is refused, as
  // any; it used to end the whole launch with exit 2 ("usage") and an empty report.
  const auto huge = pmrun({"--oversubscribe", "-np", "1", mpi_dir + "/mpi_spawn", "70000"}, 60s);
  EXPECT_NE(huge.exit_code, 0);
  EXPECT_NE(huge.exit_code, 2) << huge.err;
  EXPECT_NE(huge.err.find("pmrun: MPI_Comm_spawn (PMIx_Spawn) refused: PMIx: more than 65536 "
                          "ranks on node"),
            std::string::npos)
      << huge.err;
  expect_nothing_left();
}

TEST_F(PmrunMpi, PsShowsASpawnedJobsRanksAsOpenMpiNumbersThem) {
  // The parent and its two children hold 3 s before their exchange: meanwhile `pmrun --ps`
  // lists the children as ranks of job 2, and the JSON report gives their job and rank.
  const std::string status_dir = tmp_ + "/st";
  pm::test::background job({"/usr/bin/env", "TMPDIR=" + tmp_, "PM_STATUS_DIR=" + status_dir,
                            one_host_tcp, pm::test::pmrun_path(), "--allow-run-as-root", "-np", "1",
                            python, PM_MPI_SOURCE_DIR "/mpi_spawn.py", "2", "3"});
  job.wait_lines(3);  // the parent's and the children's first lines
  ASSERT_EQ(lines_starting(job.text, "child").size(), 2u) << job.text;
  auto env = env_;
  env.push_back("PM_STATUS_DIR=" + status_dir);
  // pmrun answers --ps 100 ms after its start (a short job never touches the file system for
  // it): the lines may come before that on an idle machine.
  auto human =
      run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)}, 10s, "", &env);
  for (int i = 0; i < 20 && human.exit_code != 0; ++i) {
    std::this_thread::sleep_for(50ms);
    human = run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)}, 10s, "", &env);
  }
  EXPECT_NE(human.out.find("3 ranks (2 of spawned jobs) on 1 host"), std::string::npos)
      << human.out << human.err;
  EXPECT_TRUE(std::regex_search(human.out, std::regex(R"(\n +\[2,1\]  \S+ +\d+  running)")))
      << human.out;
  const auto json = run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid), "--json"},
                                10s, "", &env);
  const auto doc = nlohmann::json::parse(json.out);
  const auto& ranks = doc["report"]["ranks"];
  ASSERT_EQ(ranks.size(), 3u) << json.out;
  EXPECT_FALSE(ranks[0].contains("job"));
  EXPECT_EQ(ranks[2]["job"], 1);
  EXPECT_EQ(ranks[2]["job_rank"], 1);
  EXPECT_EQ(job.wait_status(), 0);
  std::error_code ec;
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();  // pmrun removed its socket
  expect_nothing_left();
}

TEST_F(PmrunMpi, TwoSpawnsAtOnceShareTheFreeSlotsAndNeverOvercommit) {
  // Three slots, two parents: each spawns one child from MPI_COMM_SELF at the same time. One
  // slot is free, so one spawn is refused (even when both arrive before either is taken) and
  // that parent's MPI_Comm_spawn fails.
  const auto r =
      pmrun({"-H", "localhost:3", "-np", "2", python, PM_MPI_SOURCE_DIR "/mpi_spawn.py", "1"}, 60s);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("MPI_Comm_spawn (PMIx_Spawn) refused: not enough slots: 1 rank requested, "
                       "0 slots available"),
            std::string::npos)
      << r.err;
  expect_nothing_left();
}

}  // namespace
