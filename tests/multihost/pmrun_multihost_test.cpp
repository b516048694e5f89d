// pmrun across fake hosts (network namespaces with their own sshd, tests/multihost/README.md):
// placement and the env contract, argv verbatim, the launcher's environment kept at home, a remote
// rank's exit code, a killed and a partitioned host, pmrun killed, login-shell noise, a missing
// agent. Every test checks that nothing of the job is left on any host.
#include <signal.h>
#include <sys/wait.h>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/multihost.hpp"
#include "support/playground.hpp"
#include "support/scratch_dir.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::every_host_busy;
using pm::test::hosts_clean;
using pm::test::hosts_with_slots;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;

std::vector<std::string> pmrun(const multihost_fixture& f, std::vector<std::string> args) {
  std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "-mca",
                                   "plm_rsh_agent", "ssh -F " + f.ssh_config()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// pmrun started in the background (own process group, no terminal), for tests that signal it.
pid_t start_pmrun(const multihost_fixture& f, std::vector<std::string> args) {
  auto argv = pmrun(f, std::move(args));
  std::vector<char*> c_args;
  for (auto& a : argv) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    execv(c_args[0], c_args.data());
    _exit(127);
  }
  return pid;
}

TEST(PmrunMultihost, RanksRunOnTheirHostsWithTheContractEnvironment) {
  NEED_HOSTS();
  multihost_fixture f(3);
  // The launcher's own environment stays at home; -x carries what the user asks for.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("PM_TEST_LAUNCHER_ONLY=secret");
  env.push_back("PM_TEST_EXPORTED=yes");
  const auto r = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", "-x", "PM_TEST_EXPORTED", "sh", "-c",
                "echo \"rank=$OMPI_COMM_WORLD_RANK host=$(hostname) node=$NODE_RANK "
                "local=$LOCAL_RANK size=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
                "secret=${PM_TEST_LAUNCHER_ONLY:-none} exported=${PM_TEST_EXPORTED:-none}\""}),
      60s, "", &env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = pm::test::lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  const std::string master = f.hosts()[0].ip;
  for (int rank = 0; rank < 6; ++rank) {
    const int node = rank / 2;
    const std::string want_prefix =
        "host=" + f.hosts()[static_cast<std::size_t>(node)].name + " node=" + std::to_string(node) +
        " local=" + std::to_string(rank % 2) + " size=6 master=" + master + ":";
    EXPECT_EQ(lines[rank].rfind(want_prefix, 0), 0u) << lines[rank];
    EXPECT_NE(lines[rank].find("secret=none exported=yes"), std::string::npos) << lines[rank];
  }
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, ArgvReachesRemoteRanksVerbatim) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const std::vector<std::string> words = {"a b", "it's", "\"q\"",        "$(touch /tmp/pm-pwned)",
                                          "x;y", "*",    "line1\nline2", "naïve ☃",
                                          "",    "-n"};
  std::vector<std::string> args = {"-H", f.hosts()[1].name + ":1", "-np",
                                   "1",  "/usr/bin/printf",        "[%s]"};
  args.insert(args.end(), words.begin(), words.end());
  const auto r = run_command(pmrun(f, args), 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want;
  for (const auto& w : words) want += "[" + w + "]";
  EXPECT_EQ(r.out, want);
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, ARemoteRanksExitCodeIsTheJobsAndNamesItsHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(),
                            "if-rank", "3", "exit", "7", "sleep", "30"}),
                  60s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 3 on " + f.hosts()[1].name + " exited with code 7"), std::string::npos)
      << r.err;
  EXPECT_LT(took, 15s);  // the others were stopped, not waited for (30 s)
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// Ranks that end but leave a child holding their stdout: the agents clear it at the shutdown and
// go; a stream its agent had not closed (a rank that wrote nothing never opened one) ended with
// the link. pmrun waited for it for ever, deaf to SIGINT, with two ranks on a host.
TEST(PmrunMultihost, LeftoversHoldingAStreamAreClearedAndTheJobEnds) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const auto r = run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "sh", "-c",
                                       "sleep 30 & sleep 0.5; exit 0"}),
                             25s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// `pmrun ... | head`: once head is gone, a remote rank's output has nowhere to go. Its agent is
// told to close the rank's pipe, so the rank gets SIGPIPE as a local one does (docs/output.md);
// it wrote into nothing until the timeout.
TEST(PmrunMultihost, ARemoteRankWhoseOutputHasNowhereToGoGetsSigpipe) {
  NEED_HOSTS();
  multihost_fixture f(2);
  std::string line;
  for (const auto& a : pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "yes"})) {
    line += "'" + a + "' ";
  }
  const auto r =
      run_command({"/bin/bash", "-c", line + "| head -2 >/dev/null; exit ${PIPESTATUS[0]}"}, 30s);
  EXPECT_EQ(r.exit_code, 141) << r.err;
  EXPECT_NE(r.err.find("was killed by SIGPIPE"), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, AKilledHostIsLostAndTheJobEnds) {
  NEED_HOSTS();
  multihost_fixture f(3);
  std::thread killer([&] {
    std::this_thread::sleep_for(2500ms);
    f.crash(f.hosts()[2].name);
  });
  const auto r = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "60"}),
      60s);
  killer.join();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find(f.hosts()[2].name), std::string::npos) << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, APartitionedHostIsLostByItsSilenceAndClearsItsRanks) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto victim = f.hosts()[1].name;
  std::thread cutter([&] {
    std::this_thread::sleep_for(2500ms);
    f.partition(victim);
  });
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "60"}),
      60s);
  const auto took = std::chrono::steady_clock::now() - start;
  cutter.join();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(took, 2500ms + 10s) << r.err;
  EXPECT_NE(r.err.find(victim), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no word from the agent"), std::string::npos) << r.err;
  // The cut host's agent stops hearing the launcher and ends its ranks by itself.
  EXPECT_TRUE(hosts_clean(f, 15s)) << left_on_hosts(f);
  f.heal(victim);
}

// 6 ranks sleeping on 3 hosts, `signo` to pmrun once every host runs its share: pmrun's status.
int signal_a_running_job(const multihost_fixture& f, int signo) {
  const pid_t pid = start_pmrun(
      f, {"-H", hosts_with_slots(f, 2), "-np", "6", pm::test::payload_path(), "sleep", "60"});
  EXPECT_GT(pid, 0);
  if (pid <= 0) return -1;
  EXPECT_TRUE(every_host_busy(f, 2)) << left_on_hosts(f);
  kill(pid, signo);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(PmrunMultihost, PmrunKilledLeavesNothingOnAnyHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  signal_a_running_job(f, SIGKILL);
  EXPECT_TRUE(hosts_clean(f, 10s)) << left_on_hosts(f);
}

TEST(PmrunMultihost, LoginShellNoiseBeforeTheAgentIsSkipped) {
  NEED_HOSTS();
  multihost_fixture f(2, pm::test::multihost_options{}.with_noise_host(2));
  const auto r = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "sh", "-c", "echo ok $(hostname)"}), 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  EXPECT_EQ(r.out.find(f.noise_line()), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, AMissingAgentIsOneLineNamingTheHost) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const auto r = run_command(pmrun(f, {"--launch-agent", "/nonexistent/pmd", "-H",
                                       f.hosts()[1].name + ":1", "-np", "1", "true"}),
                             60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("pmd was not found on " + f.hosts()[1].name + " at /nonexistent/pmd"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, OutputOfRemoteRanksArrivesWholeAndComplete) {
  NEED_HOSTS();
  multihost_fixture f(2);
  // 2 hosts x 2 ranks x 4 MB of 100-byte lines, written in 4096-byte chunks that cut lines.
  const auto r = run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "--tag-output",
                                       pm::test::payload_path(), "flood", "4000000", "4096"}),
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
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& [tag, n] : lines) EXPECT_EQ(n, 4000000u / 100) << tag;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// A relative -wdir is pmrun's: every host's rank starts in the same directory (a shared file
// system here), not in the remote home directory's namesake.
TEST(PmrunMultihost, ARelativeWdirIsTheSameDirectoryOnEveryHost) {
  NEED_HOSTS();
  multihost_fixture f(1);
  char tmpl[] = "/tmp/pm-wdir-test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0755), 0);
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const auto r = run_command(pmrun(f, {"-H", "localhost:1," + f.hosts()[0].name + ":1", "-np", "2",
                                       "--wdir", "sub", "/bin/pwd"}),
                             60s);
  std::filesystem::current_path(here);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, dir + "/sub\n" + dir + "/sub\n");
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, ThisMachineAndRemoteHostsInOneJob) {
  NEED_HOSTS();
  multihost_fixture f(2);
  // Rank 0 here: MASTER_ADDR must be this machine's address that the other hosts reach (the
  // bridge's), never a loopback one.
  const auto r =
      run_command(pmrun(f, {"-H", "localhost:1," + f.hosts()[0].name + ":1", "-np", "2", "sh", "-c",
                            "echo \"$OMPI_COMM_WORLD_RANK $(hostname) $NODE_RANK $MASTER_ADDR\""}),
                  60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::map<std::string, std::string> by_rank;
  for (std::string line; std::getline(in, line);) by_rank[line.substr(0, 1)] = line;
  ASSERT_EQ(by_rank.size(), 2u) << r.out;
  EXPECT_EQ(by_rank["1"], "1 " + f.hosts()[0].name + " 1 " + f.bridge_ip()) << r.out;
  EXPECT_NE(by_rank["0"].find(" 0 " + f.bridge_ip()), std::string::npos) << r.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, SigtermToPmrunReachesEveryRemoteRank) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const int status = signal_a_running_job(f, SIGTERM);
  // pmrun ends by the signal it was given, once every rank everywhere is gone.
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(hosts_clean(f, 2s)) << left_on_hosts(f);
}

TEST(PmrunMultihost, OutputBackPressureNeverCostsAHost) {
  NEED_HOSTS();
  multihost_fixture f(2);
  // pmrun's stdout is a pipe nobody reads for 5 s (more than the 2 s silence timeout) while the
  // remote ranks flood it: the agents must stop reading their ranks, not lose the launcher.
  const std::string cmd =
      "'" + pm::test::pmrun_path() + "' --allow-run-as-root -mca plm_rsh_agent 'ssh -F " +
      f.ssh_config() + "' -H " + hosts_with_slots(f, 2) + " -np 2 '" + pm::test::payload_path() +
      "' flood 20000000 65536 | (sleep 5; wc -l); echo \"exit ${PIPESTATUS[0]}\"";
  const auto r = run_command({"/bin/bash", "-c", cmd}, 90s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "400000\nexit 0\n") << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, StdinReachesARemoteRankZeroAndEveryRankWithStdinAll) {
  NEED_HOSTS();
  multihost_fixture f(2);
  std::string input;
  for (int i = 0; i < 200000; ++i) input += std::to_string(i) + "\n";
  // Rank 0 on node1 reads it all; rank 1 reads nothing (/dev/null).
  const auto r =
      run_command(pmrun(f, {"-H", f.hosts()[0].name + ":1," + f.hosts()[1].name + ":1", "-np", "2",
                            "sh", "-c", "echo \"$OMPI_COMM_WORLD_RANK $(hostname) $(cksum)\""}),
                  60s, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto want = run_command({"/bin/sh", "-c", "cksum"}, 10s, input).out;
  EXPECT_NE(r.out.find("0 " + f.hosts()[0].name + " " + want.substr(0, want.size() - 1)),
            std::string::npos)
      << r.out << " want " << want;
  EXPECT_NE(r.out.find("1 " + f.hosts()[1].name + " 4294967295 0"), std::string::npos) << r.out;
  // --stdin all: every rank on every host gets every byte.
  const auto all = run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "--stdin", "all",
                                         "sh", "-c", "echo $(wc -l)"}),
                               60s, input);
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, "200000\n200000\n200000\n200000\n");
  // Ranks that read nothing (one here, one on the other host) hold up no other: more input than
  // the pipes, the forwarder and the link's credit hold together.
  std::string big(4u << 20, 'x');
  const auto some = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", "--stdin", "all", "sh", "-c",
                "if [ $((OMPI_COMM_WORLD_RANK % 2)) = 0 ]; then wc -c; else echo none; fi"}),
      60s, big);
  ASSERT_EQ(some.exit_code, 0) << some.err;
  std::map<std::string, int> lines;
  std::istringstream said(some.out);
  for (std::string line; std::getline(said, line);) ++lines[line];
  EXPECT_EQ(lines, (std::map<std::string, int>{{"4194304", 2}, {"none", 2}})) << some.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, AMissingRemoteShellIsALaunchErrorBeforeAnythingStarts) {
  // No fake hosts needed: nothing may be started at all.
  const auto r =
      run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-mca", "plm_rsh_agent",
                   "pm-no-such-ssh", "-H", "othernode:1", "-np", "1", "true"},
                  30s);
  EXPECT_EQ(r.exit_code, 125) << r.err;  // exit_codes::launch_failed, not a lost host (213)
  EXPECT_NE(r.err.find("the remote shell command: program 'pm-no-such-ssh' not found in PATH"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Restarts in place across hosts (docs/resilience.md): rank 3 on node2 fails once; the job runs
// again on the same agents (each host's ranks have the same parent, pmd, in both incarnations: no
// new ssh), the leftovers of the first incarnation are gone, and nothing is left anywhere.
TEST(PmrunMultihost, AJobRestartsInPlaceOnTheSameAgents) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto r = run_command(
      pmrun(f, {"-H",
                hosts_with_slots(f, 2),
                "-np",
                "6",
                "--max-restarts",
                "2",
                "sh",
                "-c",
                "echo \"host=$(hostname) agent=$PPID inc=$TORCHELASTIC_RESTART_COUNT\"; "
                "exec \"$0\" \"$@\"",
                pm::test::payload_path(),
                "if-restart",
                "0",
                "grandchild",
                "30",
                "if-restart",
                "0",
                "sleep",
                "0.3",
                "if-restart",
                "0",
                "if-rank",
                "3",
                "exit",
                "7",
                "if-restart",
                "0",
                "sleep",
                "30",
                "echo",
                "done"}),
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting the job (1 of 2): rank 3 on " + f.hosts()[1].name +
                       " exited with code 7"),
            std::string::npos)
      << r.err;
  std::map<std::string, std::set<std::string>> agents;  // host -> agent pids seen
  std::map<std::string, int> second;                    // host -> ranks of incarnation 1
  const std::regex line("host=(\\S+) agent=(\\d+) inc=(\\d)");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line);
       it != std::sregex_iterator(); ++it) {
    agents[(*it)[1]].insert((*it)[2]);
    if ((*it)[3] == "1") ++second[(*it)[1]];
  }
  ASSERT_EQ(agents.size(), 3u) << r.out;
  for (const auto& h : f.hosts()) {
    EXPECT_EQ(agents[h.name].size(), 1u) << h.name << ": " << r.out;
    EXPECT_EQ(second[h.name], 2) << h.name << ": " << r.out;
  }
  std::size_t done = 0;
  for (auto at = r.out.find("done\n"); at != std::string::npos; at = r.out.find("done\n", at + 1))
    ++done;
  EXPECT_EQ(done, 6u) << r.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// Waits until `host` runs `count` processes of the test payload (the job's ranks).
bool busy(const multihost_fixture& f, const std::string& host, std::size_t count) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    std::size_t ranks = 0;
    for (const auto pid : f.pids_on(host)) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmd.rfind(pm::test::payload_path(), 0) == 0) ++ranks;
    }
    if (ranks >= count) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Each rank of each incarnation says where it runs and what it was given.
const char* const where_script =
    "echo \"inc=$TORCHELASTIC_RESTART_COUNT rank=$RANK host=$(hostname) node=$NODE_RANK "
    "local=$LOCAL_RANK size=$WORLD_SIZE master=$MASTER_ADDR\"; exec \"$0\" \"$@\"";

std::map<std::string, std::string> placements(const std::string& out, const std::string& inc) {
  std::map<std::string, std::string> by_rank;  // rank -> "host node local size master"
  const std::regex line("inc=" + inc +
                        " rank=(\\d+) host=(\\S+) node=(\\d+) local=(\\d+) "
                        "size=(\\d+) master=(\\S+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    by_rank[(*it)[1]] = std::string((*it)[2]) + " " + std::string((*it)[3]) + " " +
                        std::string((*it)[4]) + " " + std::string((*it)[5]);
  }
  return by_rank;
}

// A spare whose host does not answer (cut off before the job) never delays the job: neither a
// restart in place (no host of the job was lost: no spare is needed) nor the end (the spare's
// ssh is given up, not waited for until its connect timeout).
TEST(PmrunMultihost, ASpareThatDoesNotAnswerDelaysNothing) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto spare = f.hosts()[2].name;
  f.partition(spare);
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      run_command(pmrun(f, {"-H", hosts_with_slots(f, 1), "-np", "2", "--max-restarts", "1",
                            pm::test::payload_path(), "if-restart", "0", "if-rank", "1", "exit",
                            "7", "sleep", "0.5", "env", "TORCHELASTIC_RESTART_COUNT"}),
                  60s);
  const auto took = std::chrono::steady_clock::now() - start;
  f.heal(spare);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(took, 6s) << r.err;  // ssh's connect timeout is 10 s
  EXPECT_NE(r.err.find("restarting the job (1 of 1)"), std::string::npos) << r.err;
  EXPECT_EQ(pm::test::count_of(r.out, "TORCHELASTIC_RESTART_COUNT=1\n"), 2u) << r.out;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, ALostHostsRanksMoveToASpareAndTheJobRestarts) {
  NEED_HOSTS();
  multihost_fixture f(4);
  const auto victim = f.hosts()[1].name, spare = f.hosts()[3].name;
  pm::test::playground dir("pm-spare");
  const auto report = dir / "report.json";
  std::thread killer([&] {
    // Mid-run: every host runs its ranks, the spare its agent.
    bool up = true;
    for (std::size_t i = 0; i < 3; ++i) up = up && busy(f, f.hosts()[i].name, 2);
    for (int i = 0; i < 100 && f.pids_on(spare).empty(); ++i) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(500ms);
    if (up) f.crash(victim);
  });
  const auto r =
      run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", "--max-restarts", "2",
                            "--report", report, "sh", "-c", where_script, pm::test::payload_path(),
                            "if-restart", "0", "sleep", "30", "echo", "done"}),
                  60s);
  killer.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting the job (1 of 2): host " + victim + " was lost"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("ranks 2-3 move from " + victim + " to spare " + spare), std::string::npos)
      << r.err;
  // The same ranks, local ranks and node numbers; the lost host's on the spare.
  const auto first = placements(r.out, "0"), second = placements(r.out, "1");
  ASSERT_EQ(second.size(), 6u) << r.out;
  for (const auto& [rank, what] : second) {
    const auto before = first.at(rank);
    if (rank == "2" || rank == "3") {
      EXPECT_EQ(what.substr(0, spare.size()), spare) << r.out;
      EXPECT_EQ(what.substr(spare.size()), before.substr(victim.size())) << r.out;
    } else {
      EXPECT_EQ(what, before) << r.out;
    }
  }
  const auto json = pm::test::slurp(report);
  EXPECT_NE(json.find("\"quarantined\": ["), std::string::npos) << json;
  EXPECT_NE(json.find("\"host\": \"" + victim + "\""), std::string::npos) << json;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, WithoutASpareMinHostsGoesOnWithTheHostsLeft) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto victim = f.hosts()[0].name;  // rank 0's: MASTER_ADDR moves
  std::thread killer([&] {
    bool up = true;
    for (const auto& h : f.hosts()) up = up && busy(f, h.name, 2);
    if (up) f.crash(victim);
  });
  const auto r =
      run_command(pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "6", "--max-restarts", "1",
                            "--min-hosts", "2", "sh", "-c", where_script, pm::test::payload_path(),
                            "if-restart", "0", "sleep", "30", "echo", "done"}),
                  60s);
  killer.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("going on with 2 hosts and 4 ranks (--min-hosts 2)"), std::string::npos)
      << r.err;
  const auto second = placements(r.out, "1");
  ASSERT_EQ(second.size(), 4u) << r.out;
  for (const auto& [rank, what] : second) {
    EXPECT_EQ(what.find(victim), std::string::npos) << r.out;
    EXPECT_NE(what.find(" 4"), std::string::npos) << r.out;  // WORLD_SIZE 4
  }
  EXPECT_EQ(second.at("0").substr(0, f.hosts()[1].name.size()), f.hosts()[1].name);
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// --host-discovery-script (docs/resilience.md, "Hosts that join"): the job runs on three hosts
// with no spare; the fourth is only named by the discovery script, which pmrun runs at the
// restart. The lost host's ranks move to it with their numbers; the script ran once.
TEST(PmrunMultihost, ALostHostsRanksMoveToAHostTheDiscoveryScriptNames) {
  NEED_HOSTS();
  multihost_fixture f(4);
  const auto victim = f.hosts()[1].name, joiner = f.hosts()[3].name;
  pm::test::playground dir("pm-discover");
  const auto script = dir / "hosts.sh", runs = dir / "runs";
  {
    std::ofstream s(script);
    s << "#!/bin/sh\necho run >> " << runs << "\n# the hosts up now\n";
    for (std::size_t i = 0; i < 4; ++i) {
      if (i != 1) s << "echo " << f.hosts()[i].name << ":2\n";
    }
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  std::string three;
  for (std::size_t i = 0; i < 3; ++i) three += (i ? "," : "") + f.hosts()[i].name + ":2";
  std::thread killer([&] {
    bool up = true;
    for (std::size_t i = 0; i < 3; ++i) up = up && busy(f, f.hosts()[i].name, 2);
    if (up) f.crash(victim);
  });
  const auto r = run_command(
      pmrun(f, {"-H", three, "-np", "6", "--max-restarts", "2", "--host-discovery-script", script,
                "sh", "-c", where_script, pm::test::payload_path(), "if-restart", "0", "sleep",
                "30", "echo", "done"}),
      60s);
  killer.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("host " + joiner + " joins (--host-discovery-script)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("ranks 2-3 move from " + victim + " to spare " + joiner), std::string::npos)
      << r.err;
  EXPECT_EQ(pm::test::slurp(runs), "run\n");
  const auto first = placements(r.out, "0"), second = placements(r.out, "1");
  ASSERT_EQ(second.size(), 6u) << r.out;
  for (const auto& [rank, what] : second) {
    const auto before = first.at(rank);
    if (rank == "2" || rank == "3") {
      EXPECT_EQ(what.substr(0, joiner.size()), joiner) << r.out;
      EXPECT_EQ(what.substr(joiner.size()), before.substr(victim.size())) << r.out;
    } else {
      EXPECT_EQ(what, before) << r.out;
    }
  }
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// A discovery script that fails or prints garbage is one line; the restart goes on with what it
// has (here: nothing for the lost host's ranks, so the launch ends with the loss's code).
TEST(PmrunMultihost, ADiscoveryScriptThatPrintsGarbageIsOneLineAndTheLaunchEnds) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const auto victim = f.hosts()[1].name;
  std::thread killer([&] {
    bool up = true;
    for (const auto& h : f.hosts()) up = up && busy(f, h.name, 1);
    if (up) f.crash(victim);
  });
  const auto r = run_command(pmrun(f, {"-H", hosts_with_slots(f, 1), "-np", "2", "--max-restarts",
                                       "1", "--host-discovery-script", "echo 'node9 and more'",
                                       pm::test::payload_path(), "if-restart", "0", "sleep", "30"}),
                             60s);
  killer.join();
  EXPECT_EQ(r.exit_code, 213) << r.err;
  EXPECT_NE(r.err.find("pmrun: host discovery failed: 'echo 'node9 and more'' printed line 1: "
                       "'node9 and more' is not host[:slots]; going on with the hosts there are\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("pmrun: cannot restart the job: no spare or discovered host takes the "
                       "ranks of lost host " +
                       victim + "\n"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunMultihost, MinHostsAboveTheJobsHostsIsRefusedInOneLine) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const auto r = run_command(pmrun(f, {"-H", hosts_with_slots(f, 1), "-np", "2", "--max-restarts",
                                       "1", "--min-hosts", "3", "true"}),
                             30s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pmrun: --min-hosts 3 is above the 2 hosts the job runs on\n");
}

// --enable-recovery across hosts (docs/resilience.md, "Recovering single ranks"): rank 3 on the
// second host fails once (leaving a grandchild, and a daemon outside its group that holds its
// output: its agent cuts that after the kill grace); it alone starts again there, under the same
// agent, while the other five ranks run their one process to its end; nothing is left anywhere.
TEST(PmrunMultihost, ARecoveredRankStartsAgainAloneOnItsHost) {
  NEED_HOSTS();
  multihost_fixture f(3);
  const auto r =
      run_command(pmrun(f, {"-H",
                            hosts_with_slots(f, 2),
                            "-np",
                            "6",
                            "--enable-recovery",
                            "--max-restarts",
                            "2",
                            "--kill-grace",
                            "1",
                            "sh",
                            "-c",
                            "echo \"host=$(hostname) agent=$PPID rank=$OMPI_COMM_WORLD_RANK "
                            "inc=$TORCHELASTIC_RESTART_COUNT\"; exec \"$0\" \"$@\"",
                            pm::test::payload_path(),
                            "if-restart",
                            "0",
                            "if-rank",
                            "3",
                            "grandchild",
                            "30",
                            "if-restart",
                            "0",
                            "if-rank",
                            "3",
                            "daemon",
                            "300",
                            "if-restart",
                            "0",
                            "if-rank",
                            "3",
                            "sleep",
                            "0.5",  // the daemon's setsid comes before its group's SIGKILL
                            "if-restart",
                            "0",
                            "if-rank",
                            "3",
                            "exit",
                            "7",
                            "sleep",
                            "2",
                            "echo",
                            "done"}),
                  60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting rank 3 on " + f.hosts()[1].name + " (1 of 2): rank 3 on " +
                       f.hosts()[1].name + " exited with code 7"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("restarting the job"), std::string::npos) << r.err;
  std::map<std::string, std::set<std::string>> agents;  // host -> agent pids seen
  std::map<std::string, int> starts;                    // "rank inc" -> how often
  const std::regex line("host=(\\S+) agent=(\\d+) rank=(\\d) inc=(\\d)");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line);
       it != std::sregex_iterator(); ++it) {
    agents[(*it)[1]].insert((*it)[2]);
    ++starts[std::string((*it)[3]) + " " + std::string((*it)[4])];
  }
  ASSERT_EQ(agents.size(), 3u) << r.out;
  for (const auto& h : f.hosts()) EXPECT_EQ(agents[h.name].size(), 1u) << h.name << ": " << r.out;
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(starts[std::to_string(rank) + " 0"], 1) << rank << ": " << r.out;
    EXPECT_EQ(starts[std::to_string(rank) + " 1"], rank == 3 ? 1 : 0) << rank << ": " << r.out;
  }
  std::size_t done = 0;
  for (auto at = r.out.find("done\n"); at != std::string::npos; at = r.out.find("done\n", at + 1))
    ++done;
  EXPECT_EQ(done, 6u) << r.out;
  EXPECT_NE(r.err.find("rank 3 on " + f.hosts()[1].name +
                       ": what its failed process left running still holds its output"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

}  // namespace
