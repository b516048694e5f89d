// Real MPI programs (Open MPI 4.1, mpi4py) under pmrun on this host: one job of N ranks, not N
// singletons (docs/pmix.md). Each test also checks that nothing of PMIx or Open MPI is left in
// the job's TMPDIR or in /dev/shm afterwards.
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

namespace {

using namespace std::chrono_literals;
using pm::test::run_command;
namespace fs = std::filesystem;

const std::string mpi_dir = PM_MPI_DIR;
const std::string python = "/usr/bin/python3";  // Debian's, where python3-mpi4py lives

// One host: ranks of different jobs (spawn) meet over loopback. Left to itself Open MPI's TCP
// transport also offers the bridges of fake hosts that tests beside this one (ctest -j2, the soak)
// make and remove, and a child that binds or dials a bridge gone meanwhile fails its first
// collective (MPI_ERR_OTHER).
constexpr const char* one_host_tcp = "OMPI_MCA_btl_tcp_if_include=lo";

// A private TMPDIR per test (the agents put their PMIx directories there) and what /dev/shm held.
class PmrunMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/pm-mpi-test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    tmp_ = templ;
    shm_before_ = dead_shm_entries();
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("TMPDIR=", 0) != 0) env_.emplace_back(*e);
    }
    env_.push_back("TMPDIR=" + tmp_);
    env_.push_back(one_host_tcp);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  pm::test::command_result pmrun(std::vector<std::string> args,
                                 std::chrono::milliseconds deadline = 120s,
                                 std::vector<std::string> extra_env = {}) {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto env = env_;
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return run_command(argv, deadline, "", &env);
  }

  // Nothing of the job stays behind: the TMPDIR is empty again, and /dev/shm holds no PMIx
  // directory of a process that is gone (pmd's) that was not there before.
  void expect_nothing_left() {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp_)) left.push_back(e.path().string());
    EXPECT_TRUE(left.empty()) << "left in TMPDIR: " << (left.empty() ? "" : left.front());
    for (const auto& name : dead_shm_entries()) {
      if (shm_before_.contains(name) || !of_this_test(name)) continue;
      ADD_FAILURE() << "left in /dev/shm: " << name;
    }
  }

  // A dead agent's directory holds its job's, `pmrun.PID.*`: this test's if it started that pmrun
  // (a multi-host test beside it, ctest -j2, SIGKILLs agents whose directories wait for a sweep).
  static bool of_this_test(const std::string& name) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/dev/shm/" + name, ec)) {
      const std::string job = e.path().filename().string();
      if (job.rfind("pmrun.", 0) != 0) continue;
      const auto pid = static_cast<pid_t>(std::strtol(job.c_str() + 6, nullptr, 10));
      const auto& mine = pm::test::started_pids();
      if (std::find(mine.begin(), mine.end(), pid) != mine.end()) return true;
    }
    return false;
  }

  static std::set<std::string> dead_shm_entries() {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("pm-pmix.", 0) != 0) continue;
      // Only directories: a link named like one is another test's bait (the sweep test).
      if (!fs::is_directory(e.symlink_status())) continue;
      const long pid = std::strtol(name.c_str() + 8, nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) out.insert(name);
    }
    return out;
  }

  // A pmrun job of 2 ranks in the background, held open by its ranks until `go` exists, and its
  // agent: how the tests of who reaches the PMIx server begin. hold() starts it, release() lets
  // it end and checks that it ended well and left nothing; tidy() only does the second part.
  struct held_job {
    std::string status_dir, err, go;  // pmrun's PM_STATUS_DIR, its stderr, the ranks' go file
    std::optional<pm::test::background> run;
    nlohmann::json agent;  // its record in `pmrun --ps PID --json`
    pid_t pmd = 0;
    std::string said;  // pmrun's stderr, read by tidy()
    // How hold() starts it. Each rank's sh -c command ("": mpi_hello 2, then a wait for `go`):
    std::string ranks;
    std::vector<std::string> options;  // pmrun's, before -np 2
    std::vector<std::string> env;      // more of pmrun's environment
    bool hellos_first = true;          // both ranks said hello before the agent is looked up
    explicit held_job(const std::string& tmp)
        : status_dir(tmp + "/st"), err(tmp + "/err"), go(tmp + "/go") {}
  };
  void hold(held_job& job);
  void release(held_job& job);
  void tidy(held_job& job);

  std::string tmp_;
  std::set<std::string> shm_before_;
  std::vector<std::string> env_;
};

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// "hello rank R size S universe U appnum A ..." lines, by rank.
std::map<int, std::smatch::string_type> hellos(const std::string& out, int size) {
  std::map<int, std::string> by_rank;
  const std::regex re(R"(hello rank (\d+) size (\d+) universe (\d+)(?: appnum (\d+))?.*)");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    EXPECT_EQ(std::stoi(m[2]), size) << line;
    by_rank[std::stoi(m[1])] = line;
  }
  return by_rank;
}

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

TEST_F(PmrunMpi, DirectoriesOfAKilledAgentAreRemovedByTheNextServer) {
  // A pmd killed with SIGKILL cannot remove its directories; the next PMIx server on the host
  // removes those of agents that no longer run.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  const std::string stale = tmp_ + "/pm-pmix." + std::to_string(gone) + ".abcdef";
  ASSERT_EQ(::mkdir(stale.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((stale + "/pmix").c_str(), 0700), 0);
  const auto r = pmrun({"-np", "1", mpi_dir + "/mpi_hello", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
  expect_nothing_left();
}

// The lines of `out` that start with `word` and a space, without it.
std::vector<std::string> lines_of(const std::string& out, const std::string& word) {
  std::vector<std::string> found;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(word + " ", 0) == 0) found.push_back(line.substr(word.size() + 1));
  }
  return found;
}

// The one agent of pmrun `pid` in `pmrun --ps PID --json` once it shows where its PMIx server is
// and `ready` holds for the document (5 s at most); null if never.
nlohmann::json agent_of(pid_t pid, const std::string& status_dir,
                        const std::function<bool(const nlohmann::json&)>& ready) {
  std::vector<std::string> env = {"PM_STATUS_DIR=" + status_dir, "PATH=/usr/bin:/bin"};
  for (int i = 0; i < 100; ++i) {
    const auto r =
        run_command({pm::test::pmrun_path(), "--ps", std::to_string(pid), "--json"}, 10s, "", &env);
    if (r.exit_code == 0) {
      const auto doc = nlohmann::json::parse(r.out);
      if (doc.contains("agents") && doc["agents"].size() == 1 &&
          doc["agents"][0].contains("pmix_uri") && ready(doc)) {
        return doc["agents"][0];
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

TEST_F(PmrunMpi, APmixToolSeesTheJobsRanksAndSpawns) {
  // Three ranks print their pids; ranks 0 and 1 stay in PMIx (pmix_touch), rank 2 exits 3 (the
  // job goes on). A PMIx tool finds the agent through `pmrun --ps PID --json`, asks its server
  // for the job's process table and spawns two ranks of mpi_hello on the free slots.
  const std::string status_dir = tmp_ + "/st";
  pm::test::background job({"/usr/bin/env", "TMPDIR=" + tmp_, "PM_STATUS_DIR=" + status_dir,
                            one_host_tcp, pm::test::pmrun_path(), "--allow-run-as-root",
                            "--no-abort-on-failure", "--tag-output", "-H", "localhost:7", "-np",
                            "3", "sh", "-c",
                            "echo pid $$ rank $PMIX_RANK; if [ $PMIX_RANK = 2 ]; then exit 3; fi; "
                            "exec " +
                                mpi_dir + "/pmix_touch 60"});
  job.wait_lines(5);  // each rank: its pid; ranks 0 and 1 "touch" once in PMIx
  std::map<std::string, std::string> pid_of_rank;
  {
    const std::regex re(R"(\[1,\d\]<stdout>:pid (\d+) rank (\d+))");
    for (std::sregex_iterator it(job.text.begin(), job.text.end(), re), end; it != end; ++it) {
      pid_of_rank[(*it)[2]] = (*it)[1];
    }
  }
  ASSERT_EQ(pid_of_rank.size(), 3u) << job.text;
  ASSERT_EQ(lines_of(job.text, "[1,0]<stdout>:touch").size() +
                lines_of(job.text, "[1,1]<stdout>:touch").size(),
            2u)
      << job.text;

  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json& doc) {
    return doc["report"]["ranks"][2]["state"] == "exited";
  });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server and rank 2's end";
  SCOPED_TRACE("agent: " + agent.dump());
  EXPECT_EQ(agent["host"], host_name());
  const auto agent_pid = agent["pid"].get<std::int64_t>();
  EXPECT_GT(agent_pid, 0);
  const std::string uri = agent["pmix_uri"], tmpdir = agent["pmix_tmpdir"];
  EXPECT_EQ(uri.rfind("pmix-server." + std::to_string(agent_pid) + ";tcp4://127.0.0.1:", 0), 0u);
  EXPECT_EQ(tmpdir.rfind(tmp_ + "/pm-pmix." + std::to_string(agent_pid) + ".", 0), 0u);

  // The human view names the agent and its server too.
  auto ps_env = env_;
  ps_env.push_back("PM_STATUS_DIR=" + status_dir);
  const auto human =
      run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)}, 10s, "", &ps_env);
  EXPECT_NE(human.out.find("agent on " + host_name() + ": pid " + std::to_string(agent_pid) +
                           ", PMIx " + uri),
            std::string::npos)
      << human.out;

  // Attached by the URI, and by the pid and tmpdir (the rendezvous files), the tool sees the
  // same: one namespace, 3 ranks with the pids they printed, on this host, running. Each time it
  // spawns two ranks of mpi_hello: jobs 2 and 3 of the launch, on the 7 - 2 free slots.
  int spawned = 0;
  for (const auto& how :
       {std::vector<std::string>{"--uri", uri},
        std::vector<std::string>{"--pid", std::to_string(agent_pid), "--tmpdir", tmpdir}}) {
    std::vector<std::string> argv = {mpi_dir + "/pmix_tool"};
    argv.insert(argv.end(), how.begin(), how.end());
    argv.insert(argv.end(), {"--spawn", mpi_dir + "/mpi_hello", "--np", "2", "--arg", "2"});
    const auto t = run_command(argv, 30s, "", &env_);
    SCOPED_TRACE("tool " + how[0] + ": " + t.out + t.err);
    ASSERT_EQ(t.exit_code, 0);
    const auto ns = lines_of(t.out, "namespaces");
    ASSERT_EQ(ns.size(), 1u);
    EXPECT_EQ(ns[0].rfind("pmrun.", 0), 0u);
    // Every namespace of the launch: the first job's, then those spawned before this tool asked.
    const std::string first_ns = ns[0].substr(0, ns[0].find(','));
    std::string all = first_ns;
    for (int k = 1; k <= spawned; ++k) all += "," + first_ns + "." + std::to_string(k);
    EXPECT_EQ(ns[0], all);
    EXPECT_EQ(lines_of(t.out, "job_size"), std::vector<std::string>{"3"});
    for (const std::string table : {"proc", "local"}) {
      const auto procs = lines_of(t.out, table);
      ASSERT_EQ(procs.size(), 3u) << table;
      for (std::size_t r = 0; r < 3; ++r) {
        const std::string rank = std::to_string(r);
        // The exit code does not cross PMIx 4.2.2's wire (it packs pid and state, not the code):
        // rank 2's state says how it ended.
        const std::string expected =
            first_ns + " " + rank + " " + host_name() + " sh " + pid_of_rank[rank] +
            (r < 2 ? " PROC EXECUTING 0" : " PROC TERMINATED WITH NON-ZERO STATUS ");
        EXPECT_EQ(procs[r].substr(0, expected.size()), expected) << table;
      }
    }
    EXPECT_EQ(lines_of(t.out, "spawn_support"), std::vector<std::string>{"'pmix.host,pmix.wdir'"});
    EXPECT_EQ(lines_of(t.out, "unknown_nspace"), std::vector<std::string>{"NOT-FOUND"});
    EXPECT_EQ(lines_of(t.out, "unsupported"), std::vector<std::string>{"NOT-SUPPORTED"});
    EXPECT_EQ(lines_of(t.out, "mixed"), std::vector<std::string>{"SUCCESS namespaces"});
    EXPECT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"SUCCESS"});
    // The launch's namespaces are the first job's and that with ".<spawned job>" appended.
    ++spawned;
    EXPECT_EQ(lines_of(t.out, "spawned"),
              std::vector<std::string>{first_ns + "." + std::to_string(spawned)});
  }
  // The spawned ranks' lines come through pmrun, tagged with their own job and rank; each
  // mpi_hello found itself in a world of 2 (else it exits 3 and says nothing).
  job.wait_lines(5 + 4);
  for (const std::string j : {"2", "3"}) {
    for (const std::string r : {"0", "1"}) {
      EXPECT_NE(job.text.find("[" + j + "," + r + "]<stdout>:hello rank " + r + " size 2 "),
                std::string::npos)
          << job.text;
    }
  }

  ::kill(job.pid, SIGTERM);
  job.wait_status();
  // pmrun's status directory is the test's; its socket went with pmrun.
  std::error_code ec;
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

// A job of one rank that waits until `file` exists (the agent's server starts with the tool's
// connection) under `pmrun --tag-output -H localhost:SLOTS`.
std::vector<std::string> waiting_job(const std::string& tmp, const std::string& status_dir,
                                     const std::string& slots, const std::string& file) {
  return {"/usr/bin/env",
          "TMPDIR=" + tmp,
          "PM_STATUS_DIR=" + status_dir,
          pm::test::pmrun_path(),
          "--allow-run-as-root",
          "--tag-output",
          "-H",
          "localhost:" + slots,
          "-np",
          "1",
          "sh",
          "-c",
          "echo first up; while [ ! -e " + file + " ]; do sleep 0.05; done; echo first done"};
}

TEST_F(PmrunMpi, AToolsSpawnedJobRunsLikeARanksAndTheLaunchEndsWithItsLastRank) {
  // A tool spawns two ranks that print their PMIx facts and outlive the first job's rank by a
  // second: their parent is the tool, their output comes through pmrun as job 2's, and pmrun
  // exits 0 once they ended too.
  const std::string status_dir = tmp_ + "/st", go = tmp_ + "/go";
  pm::test::background job(waiting_job(tmp_, status_dir, "3", go));
  job.wait_lines(1);
  ASSERT_EQ(job.text, "[1,0]<stdout>:first up\n");
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const auto t = run_command(
      {mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"], "--spawn", "/bin/sh", "--np", "2",
       "--arg", "-c", "--arg", mpi_dir + "/pmix_pubsub info; sleep 1; echo child $PMIX_RANK done"},
      30s, "", &env_);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  ASSERT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"SUCCESS"});
  const auto ns = lines_of(t.out, "namespaces"), me = lines_of(t.out, "tool");
  ASSERT_EQ(ns.size(), 1u);
  ASSERT_EQ(me.size(), 1u);
  EXPECT_EQ(me[0].rfind("pm-tool." + std::to_string(agent["pid"].get<std::int64_t>()) + ".", 0),
            0u);
  EXPECT_EQ(lines_of(t.out, "spawned"), std::vector<std::string>{ns[0] + ".1"});
  // The first job ends now; the spawned ranks still sleep.
  { std::ofstream(go).put('\n'); }
  const int status = job.wait_status();
  job.wait_lines(6);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << job.text;
  const std::string parent =
      me[0].substr(0, me[0].find(' ')) + ":" + me[0].substr(me[0].find(' ') + 1);  // "NSPACE:RANK"
  for (const std::string r : {"0", "1"}) {
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:spawned 1 parent " + parent + "\n"),
              std::string::npos)
        << job.text;
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:child " + r + " done\n"), std::string::npos)
        << job.text;
  }
  // pmrun went on after the first job's end: the children's last lines came later.
  const auto first_done = job.text.find("[1,0]<stdout>:first done\n");
  EXPECT_NE(first_done, std::string::npos) << job.text;
  EXPECT_LT(first_done, job.text.find("<stdout>:child ")) << job.text;
  std::error_code ec;
  fs::remove(go, ec);
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

TEST_F(PmrunMpi, AToolsSpawnBeyondTheFreeSlotsIsRefusedInOneLineAndTheJobGoesOn) {
  // Two slots, one taken by the job's rank: three ranks do not fit. The tool's PMIx_Spawn fails,
  // pmrun says why in one line, and the job ends as it would have (exit 0).
  const std::string status_dir = tmp_ + "/st", go = tmp_ + "/go";
  const std::string err_file = tmp_ + "/err";
  auto argv = waiting_job(tmp_, status_dir, "2", go);
  // pmrun's stderr into a file (background keeps only stdout): the shell becomes pmrun.
  std::string cmd = "exec";
  for (const auto& a : argv) cmd += " '" + a + "'";
  pm::test::background job({"/bin/sh", "-c", cmd + " 2>'" + err_file + "'"});
  job.wait_lines(1);
  ASSERT_EQ(job.text, "[1,0]<stdout>:first up\n");
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const auto t = run_command(
      {mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"], "--spawn", "/bin/echo", "--np", "3"},
      30s, "", &env_);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  EXPECT_EQ(lines_of(t.out, "spawn"), std::vector<std::string>{"ERROR"});
  EXPECT_TRUE(lines_of(t.out, "spawned").empty());
  const auto me = lines_of(t.out, "tool");
  ASSERT_EQ(me.size(), 1u);
  { std::ofstream(go).put('\n'); }
  const int status = job.wait_status();
  job.wait_lines(2);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << job.text;
  EXPECT_EQ(job.text, "[1,0]<stdout>:first up\n[1,0]<stdout>:first done\n");
  std::ifstream in(err_file);
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(err, "pmrun: PMIx_Spawn of tool " + me[0].substr(0, me[0].find(' ')) + " on " +
                     host_name() +
                     " refused: not enough slots: 3 ranks requested, 1 slot available on 1 host "
                     "(add --oversubscribe to place more ranks than slots)\n");
  std::error_code ec;
  fs::remove(go, ec);
  fs::remove(err_file, ec);
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

TEST_F(PmrunMpi, AToolAttachesToAJobWhoseRanksNeverCalledPmix) {
  // The tool's connection starts the agent's server, as a rank's first one would.
  const std::string status_dir = tmp_ + "/st";
  pm::test::background job({"/usr/bin/env", "TMPDIR=" + tmp_, "PM_STATUS_DIR=" + status_dir,
                            one_host_tcp, pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2",
                            "sh", "-c", "echo pid $$ rank $PMIX_RANK; exec sleep 60"});
  job.wait_lines(2);
  const auto agent = agent_of(job.pid, status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(agent.is_null()) << "pmrun --ps never showed the agent's server";
  const std::string tmpdir = agent["pmix_tmpdir"];
  EXPECT_FALSE(fs::exists(tmpdir)) << "the server started before anyone connected";
  const auto t = run_command({mpi_dir + "/pmix_tool", "--uri", agent["pmix_uri"]}, 30s, "", &env_);
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  const auto procs = lines_of(t.out, "proc");
  ASSERT_EQ(procs.size(), 2u) << t.out;
  const std::regex re(R"(pid (\d+) rank (\d+))");
  int ranks = 0;
  for (std::sregex_iterator it(job.text.begin(), job.text.end(), re), end; it != end; ++it) {
    ++ranks;
    EXPECT_NE(t.out.find(" " + std::string((*it)[2]) + " " + host_name() + " sh " +
                         std::string((*it)[1]) + " PROC EXECUTING 0"),
              std::string::npos)
        << t.out;
  }
  EXPECT_EQ(ranks, 2) << job.text;
  EXPECT_TRUE(fs::exists(tmpdir));  // the server runs now
  ::kill(job.pid, SIGTERM);
  job.wait_status();
  std::error_code ec;
  EXPECT_TRUE(fs::remove(status_dir, ec)) << ec.message();
  expect_nothing_left();
}

// ---- Who reaches the PMIx server, and nothing holds it (docs/security.md) ----

// The TCP ports `pid` listens on, from /proc/net/tcp and tcp6: what another user reads to find a
// server's port (the test picks the process's own entries by their socket inodes).
std::set<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code lec;
    const std::string target = fs::read_symlink(e.path(), lec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.contains(inode)) continue;
      ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

int port_of(const std::string& uri) {
  return std::stoi(uri.substr(uri.rfind(':') + 1));
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// pmrun in the background with `args`, its stderr into `err_file`.
std::vector<std::string> pmrun_job(const std::string& tmp, const std::string& status_dir,
                                   const std::string& err_file,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   "exec \"$@\" 2>'" + err_file + "'",
                                   "sh",
                                   "/usr/bin/env",
                                   "TMPDIR=" + tmp,
                                   "PM_STATUS_DIR=" + status_dir,
                                   std::string(one_host_tcp),
                                   pm::test::pmrun_path(),
                                   "--allow-run-as-root"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A shell command for ranks: wait until `file` exists, then run `then`.
std::string after_file(const std::string& file, const std::string& then) {
  return "while [ ! -e " + file + " ]; do sleep 0.05; done; " + then;
}

// A connection to 127.0.0.1:port that this process keeps open and silent.
pm::test::command_result touch_file(const std::string& path) {
  return run_command({"/usr/bin/touch", path});
}

struct idle_connection {
  int fd = -1;
  explicit idle_connection(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
  }
  idle_connection(const idle_connection&) = delete;
  idle_connection& operator=(const idle_connection&) = delete;
  ~idle_connection() { ::close(fd); }
};

void PmrunMpi::hold(held_job& job) {
  std::vector<std::string> args = job.options;
  args.insert(
      args.end(),
      {"-np", "2", "sh", "-c",
       job.ranks.empty() ? mpi_dir + "/mpi_hello 2 && " + after_file(job.go, "true") : job.ranks});
  auto argv = pmrun_job(tmp_, job.status_dir, job.err, args);
  argv.insert(argv.begin() + 5, job.env.begin(), job.env.end());  // after /usr/bin/env
  job.run.emplace(argv);
  if (job.hellos_first) {
    job.run->wait_lines(2);  // both ranks past MPI_Init and MPI_Finalize: the server runs
    ASSERT_EQ(hellos(job.run->text, 2).size(), 2u) << job.run->text;
  }
  job.agent = agent_of(job.run->pid, job.status_dir, [](const nlohmann::json&) { return true; });
  ASSERT_FALSE(job.agent.is_null());
  job.pmd = static_cast<pid_t>(job.agent["pid"].get<std::int64_t>());
}

void PmrunMpi::release(held_job& job) {
  ASSERT_EQ(touch_file(job.go).exit_code, 0);
  EXPECT_EQ(WEXITSTATUS(job.run->wait_status()), 0) << file_text(job.err);
  tidy(job);
}

void PmrunMpi::tidy(held_job& job) {
  job.said = file_text(job.err);
  std::error_code ec;
  fs::remove(job.go, ec);
  fs::remove(job.err, ec);
  fs::remove(job.status_dir, ec);
  expect_nothing_left();
}

// Python run as the other user: holds one connection to the port open and silent, says so.
const char* hold_script =
    "import socket,sys,time\n"
    "s=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n"
    "print('connected',flush=True)\n"
    "time.sleep(60)\n";

TEST_F(PmrunMpi, AToolClaimingToBeTheOwnerIsRefusedOnPmdsPortAndTheServerHasNoOther) {
  // Issue 20, item 1: another user's PMIx tool, with an LD_PRELOAD that makes it claim uid 0
  // (the job's owner here), had PMIx_Spawn run a program as root. Now pmd asks the kernel who
  // connected, and the server has no TCP port of its own left to try.
  PM_OTHER_USER(other);
  const std::string marker = tmp_ + "/spawned-by-the-attacker";
  held_job job(tmp_);
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const pid_t pmd = job.pmd;
  const std::string uri = job.agent["pmix_uri"];
  const std::string shim = mpi_dir + "/fake_uid.so";
  ASSERT_TRUE(fs::exists(shim));

  // The shim works: the tool, as the other user, believes it is root.
  const auto id = run_command(other.as({"/usr/bin/id", "-u"}, {"LD_PRELOAD=" + shim}));
  ASSERT_EQ(id.out, "0\n") << id.err;

  // pmd listens on one TCP port, its own: the server's was replaced by a Unix socket.
  const auto ports = listening_ports(pmd);
  EXPECT_EQ(ports, std::set<int>{port_of(uri)});
  // Every port an attacker finds: refused, and the spawn never happens.
  for (const int port : ports) {
    const auto t = run_command(other.as({mpi_dir + "/pmix_tool", "--uri",
                                         "pmix-server." + std::to_string(pmd) +
                                             ";tcp4://127.0.0.1:" + std::to_string(port),
                                         "--spawn", "/usr/bin/touch", "--arg", marker},
                                        {"LD_PRELOAD=" + shim}),
                               30s);
    EXPECT_EQ(t.exit_code, 1) << t.out << t.err;
    EXPECT_NE(t.out.find("attach error"), std::string::npos) << t.out << t.err;
    EXPECT_EQ(t.out.find("spawn"), std::string::npos) << t.out;
  }
  // The server's own socket is in pmd's private directory, where the other user cannot go.
  const std::string socket_path =
      fs::path(std::string(job.agent["pmix_tmpdir"])).parent_path() / "pmix-server.sock";
  ASSERT_TRUE(fs::exists(socket_path));
  const auto u = run_command(
      other.as({"/usr/bin/python3", "-c",
                "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n",
                socket_path}));
  EXPECT_NE(u.exit_code, 0);
  EXPECT_NE(u.err.find("Permission denied"), std::string::npos) << u.err;

  EXPECT_TRUE(pm::test::alive(pmd));
  ASSERT_NO_FATAL_FAILURE(release(job));
  EXPECT_FALSE(fs::exists(marker)) << "the attacker's spawn ran";
  EXPECT_EQ(count_of(job.said, "refused a connection from uid " + std::to_string(other.uid())), 1u)
      << job.said;
}

TEST_F(PmrunMpi, ConnectionsMadeToTheServersPortBeforeItIsReplacedAreCutOff) {
  // libpmix listens on TCP for a moment before pmd replaces its socket (a few ms; widened here to
  // 3 s by a test hook). Another user who finds the port in that moment gets nothing: a tool
  // claiming uid 0 is named untrusted and refused whatever it asks, a silent connection is cut
  // off (it would hold the server's progress thread), and the job runs as usual.
  PM_OTHER_USER(other);
  const std::string marker = tmp_ + "/spawned-by-the-attacker";
  held_job job(tmp_);
  job.env = {"PM_TEST_PMIX_CONFINE_DELAY_MS=3000"};
  job.hellos_first = false;  // the server's own port shows only while the ranks start
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const pid_t pmd = job.pmd;
  const int own = port_of(job.agent["pmix_uri"]);
  int server_port = 0;
  for (int i = 0; i < 400 && server_port == 0; ++i) {
    for (const int p : listening_ports(pmd)) {
      if (p != own) server_port = p;
    }
    if (server_port == 0) std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(server_port, 0) << "the server's TCP port never showed";
  // A tool: libpmix takes its handshake (it cannot refuse a tool without crashing), pmd names it
  // untrusted; its init then waits on pmd, which is still replacing the port, and is cut off.
  pm::test::background tool(other.as(
      {mpi_dir + "/pmix_tool", "--uri",
       "pmix-server." + std::to_string(pmd) + ";tcp4://127.0.0.1:" + std::to_string(server_port),
       "--spawn", "/usr/bin/touch", "--arg", marker},
      {"LD_PRELOAD=" + mpi_dir + "/fake_uid.so"}));
  std::this_thread::sleep_for(500ms);
  // A silent connection: it would hold the server's progress thread in a blocking receive.
  pm::test::background idle(
      other.as({"/usr/bin/python3", "-c", hold_script, std::to_string(server_port)}));
  idle.wait_lines(1);
  EXPECT_EQ(idle.text, "connected\n") << "connected after the port was replaced: widen the hook";
  job.run->wait_lines(2);
  EXPECT_EQ(hellos(job.run->text, 2).size(), 2u) << job.run->text << file_text(job.err);
  EXPECT_EQ(listening_ports(pmd), std::set<int>{own});
  EXPECT_TRUE(pm::test::alive(pmd));
  ASSERT_NO_FATAL_FAILURE(release(job));
  EXPECT_FALSE(fs::exists(marker)) << "the attacker's spawn ran";
  // (PMIx 4.2.2's tool, cut off in its init, waits for ever: `tool` kills it.)
  EXPECT_NE(job.said.find("a tool connected to the server's TCP port before it was shut"),
            std::string::npos)
      << job.said;
  EXPECT_NE(job.said.find("PMIx: cut off "), std::string::npos) << job.said;
}

TEST_F(PmrunMpi, AnotherUsersToolIsRefusedAndTheJobAndItsAgentGoOn) {
  // Issue 20, item 2: the refusal handed libpmix a null name and pmd died of SIGSEGV. Now the
  // tool is refused before libpmix sees it; the owner's own tool still attaches afterwards.
  PM_OTHER_USER(other);
  held_job job(tmp_);
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const std::string uri = job.agent["pmix_uri"];
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto t = run_command(other.as({mpi_dir + "/pmix_tool", "--uri", uri}), 30s);
    EXPECT_EQ(t.exit_code, 1) << t.out << t.err;
    EXPECT_NE(t.out.find("attach error"), std::string::npos) << t.out << t.err;
    EXPECT_TRUE(pm::test::alive(job.pmd)) << "pmd died after refusing a tool";
  }
  const auto mine = run_command({mpi_dir + "/pmix_tool", "--uri", uri}, 30s, "", &env_);
  EXPECT_EQ(mine.exit_code, 0) << mine.out << mine.err;
  EXPECT_EQ(lines_of(mine.out, "job_size"), std::vector<std::string>{"2"}) << mine.out;
  ASSERT_NO_FATAL_FAILURE(release(job));
  EXPECT_EQ(job.said.find("SIGSEGV"), std::string::npos) << job.said;
  EXPECT_EQ(count_of(job.said, "refused a connection from uid " + std::to_string(other.uid())), 1u)
      << job.said;
}

TEST_F(PmrunMpi, IdleConnectionsToTheAgentsPortHoldNoRanksMpiInit) {
  // Issue 20, item 3: one idle connection held libpmix's progress thread in a blocking receive,
  // and every rank's PMIx_Init waited. Now the relay waits for a handshake; the server never sees
  // a connection that sent none. One idle connection of the owner's, one of another user's.
  PM_OTHER_USER(other);
  held_job job(tmp_);
  job.ranks = after_file(job.go, "exec " + mpi_dir + "/mpi_hello 2");
  job.hellos_first = false;
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const int port = port_of(job.agent["pmix_uri"]);
  idle_connection mine(port);
  pm::test::background theirs(
      other.as({"/usr/bin/python3", "-c", hold_script, std::to_string(port)}));
  theirs.wait_lines(1);
  ASSERT_EQ(theirs.text, "connected\n");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(touch_file(job.go).exit_code, 0);
  job.run->wait_lines(2);  // 10 s at most; MPI_Init takes well under a second here
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(hellos(job.run->text, 2).size(), 2u) << job.run->text;
  EXPECT_LT(took, 8s);
  ASSERT_NO_FATAL_FAILURE(release(job));
}

TEST_F(PmrunMpi, ATimeoutEndsPmrunAndItsAgentWhileAConnectionIdles) {
  // Issue 20, item 3: with an idle connection in the server, pmd deadlocked in
  // PMIx_server_finalize and pmrun was still there 10 minutes after --timeout 3.
  const auto t0 = std::chrono::steady_clock::now();
  held_job job(tmp_);
  job.ranks = mpi_dir + "/mpi_hello 2; exec sleep 60";
  job.options = {"--timeout", "3"};
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const int port = port_of(job.agent["pmix_uri"]);
  idle_connection idle(port);
  // A second one that sent half a handshake (a header announcing more than it sends).
  idle_connection half(port);
  const std::uint32_t header[4] = {0xffffffffu, 0xffffffffu, 200, 0};
  ASSERT_EQ(::send(half.fd, header, sizeof header, MSG_NOSIGNAL), 16);
  const int status = job.run->wait_status();  // 10 s at most
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 124) << file_text(job.err);
  EXPECT_LT(took, 12s);
  EXPECT_TRUE(pm::test::all_gone({job.pmd}, 3s)) << "pmd " << job.pmd << " is still there";
  tidy(job);
}

TEST_F(PmrunMpi, AFloodOfConnectionsByAnotherUserIsRefusedInAFewLines) {
  // Issue 20, item 7's kind of flood on the PMIx port: 2,000 connections of another user are
  // refused, in one line (and a count when pmd ends), and the job goes on.
  PM_OTHER_USER(other);
  held_job job(tmp_);
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const std::string uri = job.agent["pmix_uri"];
  const auto flood = run_command(
      other.as({"/usr/bin/python3", "-c",
                "import socket,sys\n"
                "n=0\n"
                "for r in range(4):\n"
                "  held=[]\n"
                "  for i in range(500):\n"
                "    try:\n"
                "      held.append(socket.create_connection(('127.0.0.1',int(sys.argv[1]))))\n"
                "      n+=1\n"
                "    except OSError:\n"
                "      pass\n"
                "  for s in held: s.close()\n"
                "print(n)\n",
                std::to_string(port_of(uri))}),
      60s);
  ASSERT_EQ(flood.exit_code, 0) << flood.err;
  EXPECT_GT(std::stoi(flood.out), 1000) << flood.out;
  EXPECT_TRUE(pm::test::alive(job.pmd));
  const auto mine = run_command({mpi_dir + "/pmix_tool", "--uri", uri}, 30s, "", &env_);
  EXPECT_EQ(mine.exit_code, 0) << mine.out << mine.err;
  ASSERT_NO_FATAL_FAILURE(release(job));
  EXPECT_GE(count_of(job.said, "refused"), 1u) << job.said;
  EXPECT_LE(count_of(job.said, "refused"), 3u) << job.said;
}

TEST_F(PmrunMpi, AnOwnersToolThatHangsUpInTheMiddleOfItsHandshakeLeavesTheServerAlive) {
  // libpmix 4.2.2 crashes when its answer to a tool's handshake cannot be written. The relay
  // keeps the server's side open until that answer is read. The handshake is a real one: a tool
  // pointed at a socket of this test's, which records its first message.
  const int rec = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::bind(rec, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(rec, 4), 0);
  ASSERT_EQ(::getsockname(rec, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::string hello;
  {
    pm::test::background tool(
        {mpi_dir + "/pmix_tool", "--uri",
         "pmix-server.1;tcp4://127.0.0.1:" + std::to_string(ntohs(sa.sin_port))});
    pollfd pfd{rec, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 10000), 1);
    const int c = ::accept(rec, nullptr, nullptr);
    char buf[4096];
    std::uint32_t nbytes = 0;
    while (hello.size() < 16 || hello.size() < 16 + nbytes) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      ASSERT_GT(n, 0);
      hello.append(buf, static_cast<std::size_t>(n));
      if (hello.size() >= 16) std::memcpy(&nbytes, hello.data() + 8, 4);
    }
    ::close(c);
  }
  ::close(rec);

  held_job job(tmp_);
  ASSERT_NO_FATAL_FAILURE(hold(job));
  const std::string uri = job.agent["pmix_uri"];
  for (int i = 0; i < 5; ++i) {
    idle_connection c(port_of(uri));
    ASSERT_EQ(::send(c.fd, hello.data(), hello.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(hello.size()));
    // closed here, at once
  }
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(pm::test::alive(job.pmd)) << file_text(job.err);
  const auto mine = run_command({mpi_dir + "/pmix_tool", "--uri", uri}, 30s, "", &env_);
  EXPECT_EQ(mine.exit_code, 0) << mine.out << mine.err;
  ASSERT_NO_FATAL_FAILURE(release(job));
}

TEST_F(PmrunMpi, LeftoversOfKilledAgentsAreRemovedWithoutFollowingLinksOrTakingOthersFiles) {
  // Issue 20, item 6 (PMIx tmpdirs): the sweep of a SIGKILLed agent's directories removes this
  // user's, and never follows a link named like one nor touches another user's.
  PM_OTHER_USER(other);
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string stem = tmp_ + "/pm-pmix." + std::to_string(gone);
  fs::create_directories(stem + ".ours/pmix");
  const std::string victim = tmp_ + "/victim";
  fs::create_directory(victim);
  std::ofstream(victim + "/precious") << "precious";
  fs::create_directory_symlink(victim, stem + ".link");
  fs::create_directory(stem + ".theirs");
  std::ofstream(stem + ".theirs/keep") << "theirs";
  ASSERT_TRUE(other.give(stem + ".theirs"));
  ASSERT_TRUE(other.give(stem + ".theirs/keep"));
  const std::string shm_link = "/dev/shm/pm-pmix." + std::to_string(gone) + ".link";
  fs::create_directory_symlink(victim, shm_link);

  const auto r = pmrun({"-np", "1", mpi_dir + "/mpi_hello", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stem + ".ours"));
  EXPECT_EQ(file_text(victim + "/precious"), "precious");
  EXPECT_EQ(file_text(stem + ".theirs/keep"), "theirs");
  std::error_code ec;
  fs::remove(shm_link, ec);
  fs::remove_all(stem + ".theirs", ec);
  fs::remove(stem + ".link", ec);
  fs::remove_all(victim, ec);
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
  const auto human =
      run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid)}, 10s, "", &env);
  EXPECT_NE(human.out.find("3 ranks (2 of spawned jobs) on 1 host"), std::string::npos)
      << human.out;
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
