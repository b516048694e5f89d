// Real MPI programs across fake hosts (network namespaces with an sshd each,
// tests/multihost/README.md): one job of 6 ranks over 3 hosts, each host's agent serving its
// ranks with its own PMIx server and the fences that span hosts gathered by pmrun
// (docs/pmix.md); and the same inside a real Slurm allocation on those hosts, where the agents
// start through srun (docs/slurm.md). Every test checks that nothing of the job is left.
#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/dvm_on_hosts.hpp"
#include "support/multihost.hpp"
#include "support/processes.hpp"
#include "support/slurm.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::hosts_clean;
using pm::test::multihost_fixture;
using pm::test::run_command;

const std::string mpi_dir = PM_MPI_DIR;

// Crashes node3 `settle` after node1 and node3 each run 3 processes of the job (their ranks have
// started), or after 30 s at the latest; the caller joins the thread.
std::thread crash_node3_once_running(multihost_fixture& f, std::chrono::milliseconds settle) {
  return std::thread([&f, settle] {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < until &&
           (f.pids_on("node1").size() < 3 || f.pids_on("node3").size() < 3)) {
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(settle);
    f.crash("node3");
  });
}

std::vector<std::string> pmrun(const multihost_fixture& f, std::vector<std::string> args) {
  std::string hosts;
  for (const auto& h : f.hosts()) hosts += (hosts.empty() ? "" : ",") + h.name + ":2";
  std::vector<std::string> argv = {pm::test::pmrun_path(),
                                   "--allow-run-as-root",
                                   "-mca",
                                   "plm_rsh_agent",
                                   "ssh -F " + f.ssh_config(),
                                   "-H",
                                   hosts,
                                   "-np",
                                   std::to_string(2 * f.hosts().size())};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// "hello rank R size S ..." lines: the set of ranks that saw a world of `size`.
std::set<int> ranks_in_world(const std::string& out, int size) {
  std::set<int> ranks;
  const std::regex re(R"(hello rank (\d+) size (\d+).*)");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re) && std::stoi(m[2]) == size) ranks.insert(std::stoi(m[1]));
  }
  return ranks;
}

TEST(PmrunMpiMultihost, SixRanksOnThreeHostsAreOneWorld) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // MPI_Init's modex and barriers span the hosts: they complete only through pmrun.
  auto r = run_command(pmrun(f, {mpi_dir + "/mpi_hello", "6"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out;
  // Data crosses the hosts (TCP between them, shared memory within each).
  r = run_command(pmrun(f, {mpi_dir + "/mpi_ring"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ring size 6 sum 15"), std::string::npos) << r.out;
  r = run_command(pmrun(f, {mpi_dir + "/mpi_allreduce"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6) << r.out;
  EXPECT_NE(r.out.find("size 6 sum 21"), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, DirectModexReachesTheRanksHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // With the asynchronous modex, MPI_Init exchanges nothing: the first message to a rank of
  // another host asks that rank's host for its data (through pmrun). Refusing it would end the
  // ring with "unable to reach each other" (status 17).
  const auto r = run_command(pmrun(f, {"-x", "OMPI_MCA_pmix_base_async_modex=1", "-x",
                                       "OMPI_MCA_pmix_base_collect_data=0", mpi_dir + "/mpi_ring"}),
                             120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ring size 6 sum 15"), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, Mpi4pyAcrossHosts) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto r = run_command(
      pmrun(f, {"/usr/bin/python3", std::string(PM_MPI_SOURCE_DIR) + "/mpi_hello.py"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

// Jobs on a DVM (docs/dvm.md) are the same MPI jobs: one world across the hosts, mpi4py, an
// abort that names its rank, and spawned children; the DVM goes on between them and leaves
// nothing once stopped.
TEST(PmrunMpiMultihost, MpiJobsOnADvm) {
  NEED_HOSTS();
  multihost_fixture f(3);
  pm::test::dvm_on_hosts dvm(f);
  ASSERT_EQ(dvm.started.exit_code, 0) << dvm.started.err;
  auto r = run_command(dvm.job({"-np", "6", mpi_dir + "/mpi_hello", "6"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out;
  r = run_command(
      dvm.job({"-np", "6", "/usr/bin/python3", std::string(PM_MPI_SOURCE_DIR) + "/mpi_hello.py"}),
      120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out;
  r = run_command(dvm.job({"-np", "6", mpi_dir + "/mpi_abort", "3"}), 120s);
  EXPECT_EQ(r.exit_code, 42) << r.err;
  EXPECT_NE(r.err.find("rank 3 on node2 called abort with status 42"), std::string::npos) << r.err;
  r = run_command(dvm.job({"-np", "2", mpi_dir + "/mpi_spawn", "3"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("parent 1 of 2: sum 6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child 2 of 3: sum 3"), std::string::npos) << r.out;
  {
    // A spawn's slots come from the DVM's ledger too: job A (2 ranks) spawns 3 children only
    // after job B took 3 of the 4 slots A left free; A's spawn is refused, B runs on alone.
    const auto go = std::filesystem::path(dvm.uri_file()).parent_path().string() + "/go";
    std::string a_cmd;
    for (const auto& word :
         dvm.job({"-np", "2", "/bin/sh", "-c",
                  "echo waiting; while [ ! -e " + go + " ]; do sleep 0.05; done; exec " + mpi_dir +
                      "/mpi_spawn 3"})) {
      a_cmd += "'" + word + "' ";
    }
    pm::test::background a({"/bin/sh", "-c", a_cmd + "2>&1"});
    a.wait_lines(2);
    pm::test::background b(dvm.job({"-np", "3", "/bin/sh", "-c", "echo up; exec sleep 60"}));
    b.wait_lines(3);
    ASSERT_EQ(std::count(b.text.begin(), b.text.end(), '\n'), 3) << b.text;
    std::ofstream(go).put('\n');
    const int status = a.wait_status(60);
    a.wait_lines(1000);  // the rest of its output
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status << a.text;
    EXPECT_NE(a.text.find("MPI_Comm_spawn (PMIx_Spawn) refused: its slots could not be claimed: "
                          "host node"),
              std::string::npos)
        << a.text;
    EXPECT_EQ(a.text.find("child 0 of 3"), std::string::npos) << a.text;
  }
  const auto stop = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "stop",
                                 "--dvm-uri", "file:" + dvm.uri_file()},
                                60s);
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, MpiAbortOnARemoteHostEndsEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // Rank 3 (node2) aborts; the others wait in a barrier it never joins.
  const auto r = run_command(pmrun(f, {mpi_dir + "/mpi_abort", "3"}), 120s);
  EXPECT_EQ(r.exit_code, 42) << r.err;
  EXPECT_NE(r.err.find("rank 3 on node2 called abort with status 42"), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f));
}

// --stall-timeout across hosts (docs/resilience.md, "Stalls"): rank 3 (node2) blocks in read(),
// the others wait for it in a PMIx fence that spans the hosts. Every agent finds its host quiet;
// pmrun names every rank, one line per host, and the job ends with 214, nothing left anywhere.
TEST(PmrunMpiMultihost, AStuckRankIsNamedWithItsWaitingPeersOnEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto began = std::chrono::steady_clock::now();
  const auto r =
      run_command(pmrun(f, {"--stall-timeout", "2", mpi_dir + "/pmix_stall", "3"}), 120s);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(r.exit_code, 214) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("pmrun: stalled on ")) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 3u) << r.err;
  const std::regex rank_re(R"(rank (\d+) \(pid \d+, [SD] in [a-z_0-9]+, cpu )");
  for (int h = 0; h < 3; ++h) {
    EXPECT_TRUE(lines[h].starts_with("pmrun: stalled on node" + std::to_string(h + 1) + ": "))
        << lines[h];
    std::set<int> ranks;
    for (std::sregex_iterator it(lines[h].begin(), lines[h].end(), rank_re), end; it != end; ++it)
      ranks.insert(std::stoi((*it)[1]));
    EXPECT_EQ(ranks, (std::set<int>{2 * h, 2 * h + 1})) << lines[h];
  }
  EXPECT_NE(r.err.find("no rank progressed for 2 s (--stall-timeout); aborting the job "
                       "(SIGTERM to 6 ranks)"),
            std::string::npos)
      << r.err;
  std::cerr << "[ stall ] 3 hosts, --stall-timeout 2: pmrun ended after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_TRUE(hosts_clean(f));
}

// Processes on `host` whose command line holds `what`.
std::size_t running_on(const multihost_fixture& f, const std::string& host,
                       const std::string& what) {
  std::size_t n = 0;
  for (const auto pid : f.pids_on(host)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(what) != std::string::npos) ++n;
  }
  return n;
}

TEST(PmrunMpiMultihost, AnMpiJobWhoseHostIsLostRunsAgainOnTheSpareAsOneNewJob) {
  NEED_HOSTS();
  multihost_fixture f(4);
  const std::string script = std::string(PM_MPI_SOURCE_DIR) + "/mpi_spare.py";
  std::thread killer([&] {
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < until &&
           (running_on(f, "node1", script) < 2 || running_on(f, "node2", script) < 2 ||
            running_on(f, "node3", script) < 2 || f.pids_on("node4").empty())) {
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(1s);  // in their barrier's wait
    f.crash("node2");
  });
  const auto r =
      run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-mca", "plm_rsh_agent",
                   "ssh -F " + f.ssh_config(), "-H", "node1:2,node2:2,node3:2,node4:2", "-np", "6",
                   "--max-restarts", "2", "/usr/bin/python3", script},
                  120s);
  killer.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ranks 2-3 move from node2 to spare node4"), std::string::npos) << r.err;
  // One world of 6 in a new namespace, ranks 2 and 3 on the spare.
  const std::regex re(R"(inc 1 rank (\d) host (\S+) size 6 sum 21 nspace (\S+)\.r1)");
  std::set<std::string> seen;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    seen.insert(m[1]);
    const bool moved = m[1] == "2" || m[1] == "3";
    EXPECT_EQ(m[2] == "node4", moved) << line;
  }
  EXPECT_EQ(seen.size(), 6u) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, AHostLostWhileOthersWaitInAFenceEndsTheJob) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // node3's ranks never call MPI_Init: the others wait in its first fence, which needs node3.
  // Then node3 dies: the fence fails for the waiting hosts and the job ends (no rank waits for
  // ever, and no rank carries on past a failed fence).
  // After a second node1's and node2's ranks are in MPI_Init.
  std::thread killer = crash_node3_once_running(f, 1s);
  const auto r =
      run_command(pmrun(f, {"sh", "-c",
                            "if [ \"$(hostname)\" = node3 ]; then exec sleep 60; fi; exec " +
                                mpi_dir + "/mpi_hello 6"}),
                  120s);
  killer.join();
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("node3"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("hello rank"), std::string::npos) << r.out;  // nobody got past MPI_Init
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, APmixToolOnOneHostSeesTheRanksOfEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // Six ranks in PMIx on three hosts print their pids and hosts; a tool on node2 attaches to
  // node2's agent (found with `pmrun --ps PID --json`) and gets every rank's pid and host: the
  // other hosts' through pmrun.
  char dir_template[] = "/tmp/pm-mh-tool.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string status_dir = std::string(dir_template) + "/st";
  auto argv = pmrun(
      f, {"sh", "-c",
          "echo pid $$ rank $PMIX_RANK host $(hostname); exec " + mpi_dir + "/pmix_touch 60"});
  argv.insert(argv.begin(), {"/usr/bin/env", "PM_STATUS_DIR=" + status_dir});
  pm::test::background job(argv);
  job.wait_lines(12);                           // each rank: its pid, then "touch" once in PMIx
  std::map<std::string, std::string> expected;  // rank -> "host pid"
  {
    const std::regex re(R"(pid (\d+) rank (\d+) host (\S+))");
    for (std::sregex_iterator it(job.text.begin(), job.text.end(), re), end; it != end; ++it) {
      expected[(*it)[2]] = std::string((*it)[3]) + " sh " + std::string((*it)[1]);
    }
  }
  ASSERT_EQ(expected.size(), 6u) << job.text;

  const std::vector<std::string> env = {"PM_STATUS_DIR=" + status_dir, "PATH=/usr/bin:/bin"};
  nlohmann::json agents;
  for (int i = 0; i < 200 && agents.is_null(); ++i) {
    const auto r = run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid), "--json"},
                               10s, "", &env);
    if (r.exit_code == 0) {
      const auto doc = nlohmann::json::parse(r.out);
      bool all = doc.contains("agents") && doc["agents"].size() == 3;
      for (const auto& a : doc.value("agents", nlohmann::json::array()))
        all = all && a.contains("pmix_uri");
      if (all) agents = doc["agents"];
    }
    if (agents.is_null()) std::this_thread::sleep_for(50ms);
  }
  ASSERT_FALSE(agents.is_null()) << "pmrun --ps never showed the three agents' PMIx servers";
  SCOPED_TRACE("agents: " + agents.dump());
  EXPECT_EQ(agents[1]["host"], "node2");
  const std::string uri = agents[1]["pmix_uri"];

  const auto t = run_command(f.on_host("node2", {mpi_dir + "/pmix_tool", "--uri", uri}), 60s);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  std::map<std::string, std::string> seen, local;
  std::istringstream in(t.out);
  for (std::string line; std::getline(in, line);) {
    const std::regex re(R"((proc|local) \S+ (\d+) (\S+ \S+ \d+) PROC EXECUTING 0)");
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    (m[1] == "proc" ? seen : local)[m[2]] = m[3];
  }
  EXPECT_EQ(seen, expected);
  std::map<std::string, std::string> on_node2;
  for (const auto& [rank, what] : expected) {
    if (what.rfind("node2 ", 0) == 0) on_node2[rank] = what;
  }
  EXPECT_EQ(on_node2.size(), 2u);
  EXPECT_EQ(local, on_node2);
  // Its spawn (one rank of /bin/true) reaches pmrun from node2's agent and finds no free slot:
  // the six ranks fill the allocation.
  EXPECT_NE(t.out.find("spawn ERROR\n"), std::string::npos);

  ::kill(job.pid, SIGTERM);
  job.wait_status();
  std::filesystem::remove_all(dir_template);
  EXPECT_TRUE(hosts_clean(f)) << pm::test::left_on_hosts(f);
}

// pmix_events' "event rank R: CODE affected=A exit_code=N host=H ..." lines, by rank.
std::map<int, std::vector<std::string>> event_lines(const std::string& out) {
  std::map<int, std::vector<std::string>> by_rank;
  const std::regex re(R"(event rank (\d+): (.*))");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) by_rank[std::stoi(m[1])].push_back(m[2]);
  }
  return by_rank;
}

TEST(PmrunMpiMultihost, WithoutAbortARankFailingOnOneHostIsToldToTheRanksOfEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // Rank 3 (node2) exits 7 after PMIx_Finalize: only pmrun knows, and tells every host's agent.
  const auto r = run_command(
      pmrun(f, {"--no-abort-on-failure", mpi_dir + "/pmix_events", "3", "exit:7", "60"}), 120s);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  const auto by_rank = event_lines(r.out);
  EXPECT_EQ(by_rank.size(), 5u) << r.out;
  for (const int rank : {0, 1, 2, 4, 5}) {
    ASSERT_EQ(by_rank.count(rank), 1u) << r.out;
    EXPECT_EQ(by_rank.at(rank).front(),
              "PROC-EXIT-NONZERO-TERM affected=3 exit_code=7 host=node2 terminate=0 text=rank 3 "
              "on node2 exited with code 7")
        << rank;
  }
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, WithoutAbortAHostLostIsToldToTheRanksOfTheOthers) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // node3's ranks never call PMIx (so its agent makes no PMIx directory for the crash to leave
  // behind); the others register their handlers and wait, without a fence node3 would never join.
  // After 3 s every rank has its handler (a late one gets it anyway).
  std::thread killer = crash_node3_once_running(f, 3s);
  const auto r =
      run_command(pmrun(f, {"--no-abort-on-failure", "sh", "-c",
                            "if [ \"$(hostname)\" = node3 ]; then exec sleep 60; fi; exec " +
                                mpi_dir + "/pmix_events 9 stay 60 no-fence"}),
                  120s);
  killer.join();
  EXPECT_EQ(r.exit_code, 213) << r.err;  // the first failure: a lost host
  const auto by_rank = event_lines(r.out);
  EXPECT_EQ(by_rank.size(), 4u) << r.out;
  for (const int rank : {0, 1, 2, 3}) {
    ASSERT_EQ(by_rank.count(rank), 1u) << r.out;
    EXPECT_EQ(by_rank.at(rank).front().rfind(
                  "NODE-DOWN affected=4,5 exit_code=- host=node3 terminate=0 text=host "
                  "node3 was lost",
                  0),
              0u)
        << by_rank.at(rank).front();
  }
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiSlurm, SixRanksInsideAnAllocationAreOneWorld) {
  if (!pm::test::slurm_cluster::available()) {
    GTEST_SKIP() << "no Slurm on fake hosts here: "
                 << pm::test::slurm_cluster::unavailable_reason();
  }
  pm::test::slurm_cluster c(3);
  // -np defaults to the allocation's 6 tasks; node2's and node3's agents come through srun.
  const auto r = run_command(
      c.on_node("node1", {"salloc", "-N3", "--ntasks-per-node=2", "--quiet", pm::test::pmrun_path(),
                          "--allow-run-as-root", mpi_dir + "/mpi_hello", "6"}),
      120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out;
  const auto a = run_command(
      c.on_node("node1", {"salloc", "-N3", "--ntasks-per-node=2", "--quiet", pm::test::pmrun_path(),
                          "--allow-run-as-root", mpi_dir + "/mpi_abort", "4"}),
      120s);
  EXPECT_EQ(a.exit_code, 42) << a.err;
  EXPECT_NE(a.err.find("rank 4 on node3 called abort with status 42"), std::string::npos) << a.err;
}

// MPI jobs on a DVM inside the allocation (docs/dvm.md): node2's and node3's daemons come from
// one srun step; one world, mpi4py, an abort, spawned children; then the DVM is SIGKILLed while a
// job runs, and nothing is left on any node.
TEST(PmrunMpiSlurm, MpiJobsOnADvmInsideAnAllocation) {
  if (!pm::test::slurm_cluster::available()) {
    GTEST_SKIP() << "no Slurm on fake hosts here: "
                 << pm::test::slurm_cluster::unavailable_reason();
  }
  pm::test::slurm_cluster c(3);
  char tmpl[] = "/tmp/pm-mpi-dvm-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string p = pm::test::pmrun_path() + " --allow-run-as-root";
  const std::string on = p + " --dvm-uri file:" + dir + "/uri";
  const std::string script =
      "export PM_STATUS_DIR=" + dir + "/st; " + p + " --dvm start --report-uri " + dir +
      "/uri || exit 90; " + on + " -np 6 " + mpi_dir + "/mpi_hello 6; echo hello=$?; " + on +
      " -np 6 /usr/bin/python3 " + PM_MPI_SOURCE_DIR + "/mpi_hello.py; echo py=$?; " + on +
      " -np 6 " + mpi_dir + "/mpi_abort 4; echo abort=$?; " + on + " -np 2 " + mpi_dir +
      "/mpi_spawn 3; echo spawn=$?; " + on + " -np 6 sleep 60 & sleep 1; kill -9 $(sed " +
      "'s/.*dvm[.]\\([0-9]*\\)[.]sock/\\1/' " + dir + "/uri); wait $!; echo killed=$?";
  const auto r = run_command(
      c.on_node("node1", {"salloc", "-N3", "--ntasks-per-node=2", "--quiet", "sh", "-c", script}),
      180s);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ranks_in_world(r.out, 6), (std::set<int>{0, 1, 2, 3, 4, 5})) << r.out << r.err;
  EXPECT_NE(r.out.find("hello=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("py=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("abort=42"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("rank 4 on node3 called abort with status 42"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("spawn=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("child 2 of 3: sum 3"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("killed=0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the DVM's server is gone"), std::string::npos) << r.err;
  // Nothing of the DVM or its jobs on any node (within 5 s): only Slurm's and munge's daemons.
  std::string left;
  for (int i = 0; i < 100; ++i) {
    left.clear();
    for (const auto& node : {"node1", "node2", "node3"}) {
      for (const pid_t pid : c.hosts().pids_on(node)) {
        std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
        std::string name;
        std::getline(comm, name);
        if (!name.empty() && !name.starts_with("slurm") && name != "munged") {
          left += std::string(node) + ": " + name + "\n";
        }
      }
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(left, "");
}

// ---- MPI_Comm_spawn across hosts (docs/pmix.md, "Spawn") ----

// pmrun over the fixture's hosts with these slots (node1, node2, ...), then `args`.
std::vector<std::string> pmrun_slots(const multihost_fixture& f, std::vector<int> slots,
                                     std::vector<std::string> args) {
  std::string hosts;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    hosts += (hosts.empty() ? "" : ",") + f.hosts().at(k).name + ":" + std::to_string(slots[k]);
  }
  std::vector<std::string> argv = {pm::test::pmrun_path(),
                                   "--allow-run-as-root",
                                   "-mca",
                                   "plm_rsh_agent",
                                   "ssh -F " + f.ssh_config(),
                                   "-H",
                                   hosts};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Two slots per host, `np` parents one per host (--map-by node).
std::vector<std::string> pmrun_spread(const multihost_fixture& f, int np,
                                      std::vector<std::string> args) {
  args.insert(args.begin(), {"--map-by", "node", "-np", std::to_string(np)});
  return pmrun_slots(f, {2, 2, 2}, std::move(args));
}

TEST(PmrunMpiMultihost, CommSpawnPlacesChildrenOnEveryHostsFreeSlots) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // Three parents, one per host, leave one free slot on each: the three children land one per
  // host, so their fences, the connect with the parents, the exchange of their addresses and
  // the disconnect all span hosts.
  const auto r =
      run_command(pmrun_spread(f, 3, {"--tag-output", mpi_dir + "/mpi_spawn", "3"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int c = 0; c < 3; ++c) {
    const std::string n = std::to_string(c);
    EXPECT_NE(r.out.find("[2," + n + "]<stdout>:child " + n + " of 3: parent size 3"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("[2," + n + "]<stdout>:child " + n + " of 3: sum 6"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("[1," + n + "]<stdout>:parent " + n + " of 3: sum 6"), std::string::npos)
        << r.out;
  }
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, ASpawnedRankFailingOnAnotherHostEndsEveryRank) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto r =
      run_command(pmrun_spread(f, 3, {mpi_dir + "/mpi_spawn", "3", "child-fails"}), 120s);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("rank 2 of spawned job 1 on "), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, CommSpawnOntoAHostTheJobDidNotUseStartsItsAgentThen) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // node1 has one slot, taken by the only parent: the two children go to node2, which had no
  // agent yet. pmrun starts one there during the job; it learns the first job's namespace
  // without running any of its ranks.
  const auto r =
      run_command(pmrun_slots(f, {1, 2, 2}, {"-np", "1", mpi_dir + "/mpi_spawn", "2"}), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("child 1 of 2: sum 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parent 0 of 1: sum 3"), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, AHostFirstUsedByASecondSpawnLearnsTheFirstOneToo) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // One slot per host: the parent on node1, its first child on node2, its second child (the
  // first one still there) on node3, whose agent starts only then. A host linked after a spawn
  // still learns every spawned job, in order (an agent refuses a job_add out of order).
  const auto r = run_command(
      pmrun_slots(f, {1, 1, 1}, {"--tag-output", "-np", "1", mpi_dir + "/mpi_spawn", "1", "twice"}),
      120s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("[2,0]<stdout>:child 0 of 1: sum 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[3,0]<stdout>:child 0 of 1: sum 1"), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, AHostLostUnderItsSpawnedRanksOutputEndsTheLaunch) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // The parent on node1, its two children on node2; they print, then hold. node2 crashes: pmrun
  // must not wait for the rest of their output (it is lost with the host), and ends.
  std::thread crash([&f] {
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < until && f.pids_on("node2").size() < 3) {
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(1500ms);
    f.crash("node2");
  });
  const auto started = std::chrono::steady_clock::now();
  const auto r =
      run_command(pmrun_slots(f, {1, 2, 1},
                              {"-np", "1", "/usr/bin/python3",
                               std::string(PM_MPI_SOURCE_DIR) + "/mpi_spawn.py", "2", "30"}),
                  60s);
  crash.join();
  EXPECT_EQ(r.exit_code, 213) << r.err << r.out;
  EXPECT_NE(r.err.find("host node2 was lost"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 25s);  // not the children's 30 s
  EXPECT_TRUE(hosts_clean(f));
}

TEST(PmrunMpiMultihost, AToolOnOneHostSpawnsOntoTheFreeSlotsOfEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // Two ranks fill node1 and half of node2 and wait; a tool on node2 spawns three ranks of
  // mpi_hello: one on node2's free slot, two on node3, which gets its agent then. They make one
  // world of 3 across the hosts, their output comes through pmrun as job 2's, and pmrun exits 0
  // once both jobs ended.
  char dir_template[] = "/tmp/pm-mh-toolspawn.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, status_dir = dir + "/st", go = dir + "/go";
  const std::string hosts =
      f.hosts()[0].name + ":1," + f.hosts()[1].name + ":2," + f.hosts()[2].name + ":2";
  pm::test::background job(
      {"/usr/bin/env", "PM_STATUS_DIR=" + status_dir, pm::test::pmrun_path(), "--allow-run-as-root",
       "--tag-output", "-mca", "plm_rsh_agent", "ssh -F " + f.ssh_config(), "-H", hosts, "-np", "2",
       "sh", "-c", "echo up on $(hostname); while [ ! -e " + go + " ]; do sleep 0.05; done"});
  job.wait_lines(2);
  ASSERT_EQ(job.text.find("up on node3"), std::string::npos) << job.text;

  const std::vector<std::string> env = {"PM_STATUS_DIR=" + status_dir, "PATH=/usr/bin:/bin"};
  std::string uri;
  for (int i = 0; i < 200 && uri.empty(); ++i) {
    const auto r = run_command({pm::test::pmrun_path(), "--ps", std::to_string(job.pid), "--json"},
                               10s, "", &env);
    if (r.exit_code == 0) {
      const auto doc = nlohmann::json::parse(r.out);
      for (const auto& a : doc.value("agents", nlohmann::json::array())) {
        if (a.value("host", "") == "node2" && a.contains("pmix_uri")) uri = a["pmix_uri"];
      }
    }
    if (uri.empty()) std::this_thread::sleep_for(50ms);
  }
  ASSERT_FALSE(uri.empty()) << "pmrun --ps never showed node2's PMIx server";
  const auto t = run_command(f.on_host("node2", {mpi_dir + "/pmix_tool", "--uri", uri, "--spawn",
                                                 "/bin/sh", "--np", "3", "--arg", "-c", "--arg",
                                                 "echo child $PMIX_RANK on $(hostname); exec " +
                                                     mpi_dir + "/mpi_hello 3"}),
                             60s);
  SCOPED_TRACE("tool: " + t.out + t.err);
  ASSERT_EQ(t.exit_code, 0);
  EXPECT_NE(t.out.find("spawn SUCCESS\n"), std::string::npos);

  { std::ofstream(go).put('\n'); }
  const int status = job.wait_status();
  job.wait_lines(2 + 6);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << job.text;
  EXPECT_NE(job.text.find("[2,0]<stdout>:child 0 on node2\n"), std::string::npos) << job.text;
  for (const std::string r : {"1", "2"}) {
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:child " + r + " on node3\n"), std::string::npos)
        << job.text;
  }
  for (const std::string r : {"0", "1", "2"}) {
    // mpi_hello 3 exits 3 unless it is in a world of 3.
    EXPECT_NE(job.text.find("[2," + r + "]<stdout>:hello rank " + r + " size 3 "),
              std::string::npos)
        << job.text;
  }
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(hosts_clean(f)) << pm::test::left_on_hosts(f);
}

}  // namespace
