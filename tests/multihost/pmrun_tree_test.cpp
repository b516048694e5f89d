// The tree launch over real sshd hosts (docs/multihost.md, "The tree launch"): 5 fake hosts,
// --launch tree --tree-fanout 2, so pmrun starts node1 and node2, node1 starts node3 and node4,
// node2 starts node5. Placement and the env contract through the relay, a depth-2 rank's exit
// code, complete output from deep ranks, a killed middle host losing its subtree at once, pmrun
// SIGKILLed, an unreachable child host. Every test checks that nothing is left on any host.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/multihost.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::hosts_clean;
using pm::test::hosts_with_slots;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;

std::vector<std::string> pmrun_tree(const multihost_fixture& f, std::vector<std::string> args) {
  std::vector<std::string> argv = {pm::test::pmrun_path(),
                                   "--allow-run-as-root",
                                   "-mca",
                                   "plm_rsh_agent",
                                   "ssh -F " + f.ssh_config(),
                                   "--launch",
                                   "tree",
                                   "--tree-fanout",
                                   "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// pmrun in the background, its stderr to `err_path` and its stdout to `err_path` + ".out".
pid_t start_pmrun(std::vector<std::string> argv, const std::string& err_path) {
  std::vector<char*> c_args;
  for (auto& a : argv) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  const std::string out_path = err_path + ".out";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDWR);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(null, 0);
    dup2(out >= 0 ? out : null, 1);
    dup2(err >= 0 ? err : null, 2);
    execv(c_args[0], c_args.data());
    _exit(127);
  }
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The ranks of a background job: each says "up" before it sleeps.
std::vector<std::string> ranks_up_then_sleeping() {
  return {pm::test::payload_path(), "echo", "up", "sleep", "60"};
}

// True once pmrun (started by start_pmrun with `err_path`) printed `ranks` lines "up". A rank's
// output reaches pmrun after its host's hello, on the same link: unlike processes seen on the
// hosts, which may run before their agent's hello has reached pmrun (a host cut off then never
// joined the launch, a set-up failure, not a lost host).
bool every_rank_up(const std::string& err_path, std::size_t ranks,
                   std::chrono::milliseconds within = 20s) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    std::istringstream lines(read_file(err_path + ".out"));
    std::size_t up = 0;
    for (std::string line; std::getline(lines, line);) up += line == "up" ? 1 : 0;
    if (up >= ranks) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(50ms);
  }
}

TEST(PmrunTree, RanksRunOnTheirHostsStartedByTheirParentWithTheContractEnvironment) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const auto r = run_command(
      pmrun_tree(f, {"-H", hosts_with_slots(f, 2), "-np", "10", "sh", "-c",
                     "echo \"rank=$OMPI_COMM_WORLD_RANK host=$(hostname) node=$NODE_RANK "
                     "master=$MASTER_ADDR from=${SSH_CLIENT%% *}\""}),
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = pm::test::lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), 10u) << r.out << r.err;
  const auto& hs = f.hosts();
  // Who ran the ssh that started each host's agent: pmrun (the bridge address) for node1 and
  // node2, node1 for node3 and node4, node2 for node5.
  const std::string started_by[] = {f.bridge_ip(), f.bridge_ip(), hs[0].ip, hs[0].ip, hs[1].ip};
  for (int rank = 0; rank < 10; ++rank) {
    const auto node = static_cast<std::size_t>(rank / 2);
    EXPECT_EQ(lines[rank], "host=" + hs[node].name + " node=" + std::to_string(node) +
                               " master=" + hs[0].ip + " from=" + started_by[node])
        << "rank " << rank;
  }
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

TEST(PmrunTree, ADepthThreeHostIsRelayedTwiceAndItsRankExitCodeIsTheJobs) {
  NEED_HOSTS();
  multihost_fixture f(7);
  // Fan-out 2 over 7 hosts: node3 (node1's child) starts node7, whose bytes are child_data
  // inside child_data.
  const auto r = run_command(
      pmrun_tree(f, {"-H", hosts_with_slots(f, 1), "-np", "7", "sh", "-c",
                     "echo \"rank=$OMPI_COMM_WORLD_RANK host=$(hostname) from=${SSH_CLIENT%% *}\"; "
                     "[ $OMPI_COMM_WORLD_RANK != 6 ] || exit 5"}),
      60s);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.out.find("rank=6 host=" + f.hosts()[6].name + " from=" + f.hosts()[2].ip + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank=2 host=" + f.hosts()[2].name + " from=" + f.hosts()[0].ip + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("rank 6 on " + f.hosts()[6].name + " exited with code 5"), std::string::npos)
      << r.err;
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

TEST(PmrunTree, ADepthTwoRanksExitCodeIsTheJobs) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command(
      pmrun_tree(f, {"-H", hosts_with_slots(f, 2), "-np", "10", pm::test::payload_path(), "if-rank",
                     "9", "exit", "7", "sleep", "30"}),
      60s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 9 on " + f.hosts()[4].name + " exited with code 7"), std::string::npos)
      << r.err;
  EXPECT_LT(took, 15s);
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

// When pmrun returns after a failure, nothing is left on any host, relayed ones included: a
// parent stopped its child's ssh at once, and the child's agent and its shell outlived pmrun for
// 0.1-0.2 s (4 runs in 10). Checked with no grace, five times.
TEST(PmrunTree, AFailedJobLeavesNothingOnAnyHostWhenPmrunReturns) {
  NEED_HOSTS();
  multihost_fixture f(4);
  for (int run = 0; run < 5; ++run) {
    const auto r = run_command(pmrun_tree(f, {"-H", hosts_with_slots(f, 2), "-np", "8", "/bin/sh",
                                              "-c", "exit $((OMPI_COMM_WORLD_RANK == 7 ? 9 : 0))"}),
                               60s);
    EXPECT_EQ(r.exit_code, 9) << r.err;
    ASSERT_TRUE(hosts_clean(f, 0ms)) << "run " << run << ":\n" << left_on_hosts(f);
  }
}

TEST(PmrunTree, OutputOfDeepRanksArrivesWholeAndComplete) {
  NEED_HOSTS();
  multihost_fixture f(5);
  // 5 hosts x 1 rank x 2 MB of 100-byte lines in 4096-byte writes that cut lines; three of the
  // ranks are a relay away.
  const auto r =
      run_command(pmrun_tree(f, {"-H", hosts_with_slots(f, 1), "-np", "5", "--tag-output",
                                 pm::test::payload_path(), "flood", "2000000", "4096"}),
                  120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::size_t> lines;
  std::istringstream in(r.out);
  std::size_t bad = 0;
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.size() != colon + 1 + 99) {
      ++bad;
      continue;
    }
    ++lines[line.substr(0, colon)];
  }
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& [tag, n] : lines) EXPECT_EQ(n, 2000000u / 100) << tag;
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

TEST(PmrunTree, AKilledMiddleHostLosesItsWholeSubtreeAtOnce) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const std::string err_path = f.state_dir() + "/tree-kill.err";
  auto args = std::vector<std::string>{"-H", hosts_with_slots(f, 2), "-np", "10"};
  for (auto& word : ranks_up_then_sleeping()) args.push_back(word);
  const pid_t pid = start_pmrun(pmrun_tree(f, args), err_path);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(every_rank_up(err_path, 10)) << read_file(err_path) << left_on_hosts(f);
  const auto crashed = std::chrono::steady_clock::now();
  f.crash(f.hosts()[0].name);  // node1: the parent of node3 and node4
  int status = 0;
  waitpid(pid, &status, 0);
  const auto took = std::chrono::steady_clock::now() - crashed;
  const std::string err = read_file(err_path);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_NE(WEXITSTATUS(status), 0);
  // Lost at once (not after the 2 s of silence), each host by name, the children naming node1.
  EXPECT_LT(took, 1500ms) << err;
  EXPECT_NE(err.find("host " + f.hosts()[0].name + " was lost"), std::string::npos) << err;
  EXPECT_NE(
      err.find("with it the hosts it relayed: " + f.hosts()[2].name + ", " + f.hosts()[3].name),
      std::string::npos)
      << err;
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

// A 10-rank tree job on 5 hosts; once every host runs its ranks, host `victim` is cut off.
// Returns how pmrun ended, how long after the cut, and its stderr.
struct partition_end {
  int status = 0;
  std::chrono::steady_clock::duration took{};
  std::string err;
};
partition_end partition_during_job(multihost_fixture& f, const std::string& victim,
                                   const std::string& name) {
  partition_end out;
  const std::string err_path = f.state_dir() + "/" + name + ".err";
  auto args = std::vector<std::string>{"-H", hosts_with_slots(f, 2), "-np", "10"};
  for (auto& word : ranks_up_then_sleeping()) args.push_back(word);
  const pid_t pid = start_pmrun(pmrun_tree(f, args), err_path);
  EXPECT_GT(pid, 0);
  if (pid <= 0) return out;
  EXPECT_TRUE(every_rank_up(err_path, 10)) << read_file(err_path) << left_on_hosts(f);
  const auto cut = std::chrono::steady_clock::now();
  f.partition(victim);
  waitpid(pid, &out.status, 0);
  out.took = std::chrono::steady_clock::now() - cut;
  out.err = read_file(err_path);
  return out;
}

TEST(PmrunTree, APartitionedMiddleHostEndsTheJobAndNothingIsLeftBelowIt) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const auto victim = f.hosts()[0].name;  // node1: cut off with the links of node3 and node4
  const auto r = partition_during_job(f, victim, "tree-partition");
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_NE(WEXITSTATUS(r.status), 0);
  EXPECT_LT(r.took, 8s) << r.err;
  EXPECT_NE(r.err.find("no word from the agent"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("host " + victim + " was lost"), std::string::npos) << r.err;
  EXPECT_NE(
      r.err.find("with it the hosts it relayed: " + f.hosts()[2].name + ", " + f.hosts()[3].name),
      std::string::npos)
      << r.err;
  // node1 and the hosts below it stop hearing the launcher and end their ranks by themselves.
  EXPECT_TRUE(hosts_clean(f, 15s)) << left_on_hosts(f);
  f.heal(victim);
}

// Heartbeats go hop by hop (link version 12): pmrun does not time a relayed host, its parent
// does. A relayed host cut off from everyone is noticed by its parent (node1 relays node3) and
// reported through the tree, named with its parent; its own agent, which hears no more heartbeats
// from node1, ends its ranks by itself.
TEST(PmrunTree, APartitionedRelayedHostIsNoticedByItsParent) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const auto victim = f.hosts()[2].name;  // node3, relayed by node1
  const auto r = partition_during_job(f, victim, "tree-leaf-partition");
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_NE(WEXITSTATUS(r.status), 0);
  // Silence (2 s) + up to a heartbeat interval at the parent, then the abort's grace.
  EXPECT_LT(r.took, 8s) << r.err;
  EXPECT_NE(r.err.find("host " + victim + " was lost"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no word from the agent"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("noticed by " + f.hosts()[0].name), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f, 15s)) << left_on_hosts(f);
  f.heal(victim);
}

TEST(PmrunTree, PmrunKilledLeavesNothingOnAnyHostAtAnyDepth) {
  NEED_HOSTS();
  multihost_fixture f(5);
  const std::string err_path = f.state_dir() + "/tree-sigkill.err";
  auto args = std::vector<std::string>{"-H", hosts_with_slots(f, 2), "-np", "10"};
  for (auto& word : ranks_up_then_sleeping()) args.push_back(word);
  const pid_t pid = start_pmrun(pmrun_tree(f, args), err_path);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(every_rank_up(err_path, 10)) << read_file(err_path) << left_on_hosts(f);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(hosts_clean(f, 10s)) << left_on_hosts(f);
}

TEST(PmrunTree, OutputBackPressureOnARelayedHostNeverCostsAHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // pmrun's stdout is a pipe nobody reads for 5 s (more than the 2 s silence timeout) while the
  // ranks flood it, node3's through node1: the relay must not bury node1's or node3's heartbeats.
  const std::string cmd =
      "'" + pm::test::pmrun_path() + "' --allow-run-as-root -mca plm_rsh_agent 'ssh -F " +
      f.ssh_config() + "' --launch tree --tree-fanout 2 -H " + hosts_with_slots(f, 1) + " -np 3 '" +
      pm::test::payload_path() +
      "' flood 10000000 65536 | (sleep 5; awk '{c += length($0)} END {print NR, c}'); " +
      "echo \"exit " + "${PIPESTATUS[0]}\"";
  const auto r = run_command({"/bin/bash", "-c", cmd}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every line whole (a stalled terminal is not a prompt's quiet: docs/output.md) and every byte.
  EXPECT_EQ(r.out, "300000 29700000\nexit 0\n") << r.err;
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

TEST(PmrunTree, AnUnreachableChildHostIsOneLineNamingItAndItsParent) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // node3 is node1's child; its sshd does not listen on port 1: refused at once (not retried).
  const std::string hostfile = f.state_dir() + "/tree-hostfile";
  {
    std::ofstream out(hostfile);
    out << f.hosts()[0].name << " slots=1\n"
        << f.hosts()[1].name << " slots=1\n"
        << f.hosts()[2].name << " slots=1 port=1\n";
  }
  const auto r = run_command(
      pmrun_tree(f, {"--hostfile", hostfile, "-np", "3", pm::test::payload_path(), "sleep", "30"}),
      60s);
  EXPECT_EQ(r.exit_code, 125) << r.err;  // its agent never said hello: a set-up failure
  EXPECT_FALSE(r.timed_out);
  const std::string& child = f.hosts()[2].name;
  EXPECT_NE(r.err.find("the agent on " + child + " did not start"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ssh to " + child + " (port 1) failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("from " + f.hosts()[0].name), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Connection refused"), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f, 8s)) << left_on_hosts(f);
}

}  // namespace
