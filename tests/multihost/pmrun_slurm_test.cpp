// pmrun inside a real Slurm 22.05 allocation on fake hosts (tests/multihost/slurm.sh): the agents
// of the other nodes start with one srun step and dial back with the job's token. Placement and
// the default -np, a remote rank's exit code, a killed and a partitioned node, scancel, pmrun
// killed, srun killed, no ssh anywhere, forged and scanning connections refused while the job goes
// on, pmrun inside a job step and in an sbatch script; and the one-line errors that need no cluster
// (srun missing, --launcher srun outside an allocation, --launcher local inside one).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/slurm.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::background_command;
using pm::test::run_command;
using pm::test::slurm_cluster;

#define NEED_SLURM()                                                                        \
  if (!slurm_cluster::available()) {                                                        \
    GTEST_SKIP() << "no Slurm on fake hosts here: " << slurm_cluster::unavailable_reason(); \
  }

std::vector<std::string> pmrun_args(std::vector<std::string> args) {
  std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// `salloc -N3 --ntasks-per-node=2 pmrun ARGS` on node1.
std::vector<std::string> in_salloc(const slurm_cluster& c, std::vector<std::string> args) {
  std::vector<std::string> argv = {"salloc", "-N3", "--ntasks-per-node=2", "--quiet"};
  auto p = pmrun_args(std::move(args));
  argv.insert(argv.end(), p.begin(), p.end());
  return c.on_node("node1", argv);
}

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

std::string cmdline_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  for (char& ch : s) ch = ch == '\0' ? ' ' : ch;
  return s;
}

// The job's processes on a host: everything in its namespace but Slurm's, munge's and ssh's
// daemons.
std::vector<pid_t> job_processes(slurm_cluster& c, const std::string& host) {
  std::vector<pid_t> out;
  for (const pid_t pid : c.hosts().pids_on(host)) {
    const auto comm = comm_of(pid);
    // slurmd, slurmstepd, slurmscriptd, slurmctld and munged (node1) are the cluster's.
    if (comm.empty() || comm.starts_with("slurm") || comm == "munged") continue;
    out.push_back(pid);
  }
  return out;
}

bool nodes_clean(slurm_cluster& c, const std::vector<std::string>& nodes,
                 std::chrono::milliseconds within = 5s) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    bool any = false;
    for (const auto& n : nodes) any = any || !job_processes(c, n).empty();
    if (!any) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(50ms);
  }
}

std::string left_on(slurm_cluster& c, const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& n : nodes) {
    for (const pid_t pid : job_processes(c, n)) {
      out += n + ": " + std::to_string(pid) + " " + cmdline_of(pid) + "\n";
    }
  }
  return out;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Waits until `file`-backed output holds `n` copies of `what`.
bool wait_for_lines(const background_command& b, const std::string& what, std::size_t n,
                    std::chrono::milliseconds within = 20s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (count_of(b.out(), what) < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::string temp_dir() {
  char t[] = "/tmp/pm-slurm-test-XXXXXX";
  return mkdtemp(t) != nullptr ? std::string(t) : std::string("/tmp");
}

struct temp_files {
  std::string dir = temp_dir();
  ~temp_files() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::string all_nodes_note = "node1 runs pmrun; node2 and node3 run agents started by srun";

TEST(PmrunSlurm, PlacementFollowsTheAllocationWithTheAllocationsTasksByDefault) {
  NEED_SLURM();
  slurm_cluster c(3);
  const auto r = run_command(
      in_salloc(c, {"sh", "-c",
                    "echo \"rank=$OMPI_COMM_WORLD_RANK host=$(hostname) node=$NODE_RANK "
                    "local=$LOCAL_RANK size=$WORLD_SIZE master=$MASTER_ADDR "
                    "token=${PM_AGENT_TOKEN:-none} addrs=${PM_AGENT_ADDRS:-none} "
                    "step=${SLURM_STEP_ID:-none} stepid=${SLURM_STEPID:-none} "
                    "ntasks=$SLURM_NTASKS nnodes=$SLURM_NNODES tpn=$SLURM_TASKS_PER_NODE "
                    "comm=${SLURM_SRUN_COMM_HOST:-none} taskpid=${SLURM_TASK_PID:-none}\""}),
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = pm::test::lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out << r.err;  // -np defaults to the allocation's 6 tasks
  const auto& hosts = c.hosts().hosts();
  for (int rank = 0; rank < 6; ++rank) {
    const int node = rank / 2;
    const std::string want =
        "host=" + hosts[static_cast<std::size_t>(node)].name + " node=" + std::to_string(node) +
        " local=" + std::to_string(rank % 2) + " size=6 master=" + hosts[0].ip +
        " token=none addrs=none step=none stepid=none"
        // The allocation's Slurm variables on every node, as on the first
        // (the agents' own srun step set its own on the others: a nested
        // pmrun there read 2 nodes of 1 task).
        " ntasks=6 nnodes=3 tpn=2(x3) comm=none taskpid=none";
    EXPECT_EQ(lines[rank], want) << all_nodes_note;
  }
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

TEST(PmrunSlurm, ARemoteRanksExitCodeIsPmrunsAtOnce) {
  NEED_SLURM();
  slurm_cluster c(3);
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command(
      in_salloc(c,
                {"sh", "-c", "if [ $OMPI_COMM_WORLD_RANK = 4 ]; then exit 7; fi; exec sleep 30"}),
      60s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 4 on node3 exited with code 7"), std::string::npos) << r.err;
  // srun would wait 59 s (or return 143 with --kill-on-bad-exit); salloc itself is in this time.
  EXPECT_LT(took, 5s);
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

TEST(PmrunSlurm, AKilledNodeEndsTheJobAsAHostLost) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; exec sleep 60"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  const auto start = std::chrono::steady_clock::now();
  c.hosts().crash("node3");  // slurmd, pmd and the ranks: everything on node3
  const int code = job.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(code, 213) << job.err();  // host lost
  EXPECT_NE(job.err().find("node3"), std::string::npos) << job.err();
  EXPECT_LT(took, 6s) << job.err();
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2"})) << left_on(c, {"node1", "node2"});
}

TEST(PmrunSlurm, APartitionedNodeIsLostByItsSilenceAndClearsItsRanks) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; exec sleep 60"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  const auto start = std::chrono::steady_clock::now();
  c.hosts().partition("node3");
  const int code = job.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(code, 213) << job.err();
  EXPECT_NE(job.err().find("host node3 was lost (no word from the agent"), std::string::npos)
      << job.err();
  EXPECT_LT(took, 7s) << job.err();  // 2 s of silence, then at most 2 s for srun to end
  // The cut node's agent noticed the silence too and ended its ranks by itself.
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
  c.hosts().heal("node3");
}

TEST(PmrunSlurm, ScancelEndsTheJobAndTheReportSaysWhy) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; exec sleep 60"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  const auto ids = c.jobs();
  ASSERT_EQ(ids.size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command(c.on_node("node1", {"scancel", ids.front()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int code = job.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "pmrun still runs after scancel";
  // Slurm's word ("... CANCELLED AT ...") when srun relays it; but slurmstepd's SIGTERM can reach a
  // rank first, and once every agent ended the step is over and srun may never print it (seen in
  // about 1 run of 6): then the report names the rank Slurm's signal killed.
  const bool slurms_word = job.err().find("CANCELLED") != std::string::npos;
  const bool ranks_signal = job.err().find("was killed by SIGTERM") != std::string::npos;
  EXPECT_TRUE(slurms_word || ranks_signal) << "exit " << code << ": " << job.err();
  // Slurm's SIGTERM to the agents is said, not taken for a lost host (213, naming whichever
  // agent's word came first, where Slurm named another node).
  EXPECT_NE(code, 213) << job.err();
  EXPECT_EQ(job.err().find("was lost"), std::string::npos) << job.err();
  EXPECT_LT(took, 10s) << job.err();
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

TEST(PmrunSlurm, PmrunKilledLeavesNothingOnAnyNode) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; exec sleep 60"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  pid_t pmrun = 0;
  for (const pid_t pid : job_processes(c, "node1")) {
    if (comm_of(pid) == "pmrun") pmrun = pid;
  }
  ASSERT_NE(pmrun, 0) << left_on(c, {"node1"});
  ASSERT_EQ(::kill(pmrun, SIGKILL), 0);
  // The agents read end-of-file and end their ranks; srun then ends by itself; salloc follows.
  EXPECT_NE(job.wait(15s), -1);
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  long ppid = 0;
  rest >> state >> ppid;
  return static_cast<pid_t>(ppid);
}

TEST(PmrunSlurm, SrunKilledEndsTheJobWithItsCause) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; exec sleep 60"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  pid_t pmrun = 0, srun = 0;
  for (const pid_t pid : job_processes(c, "node1")) {
    if (comm_of(pid) == "pmrun") pmrun = pid;
  }
  for (const pid_t pid : job_processes(c, "node1")) {
    if (comm_of(pid) == "srun" && parent_of(pid) == pmrun) srun = pid;
  }
  ASSERT_NE(srun, 0) << left_on(c, {"node1"});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(srun, SIGKILL), 0);
  const int code = job.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(code, 213) << job.err();
  EXPECT_NE(job.err().find("srun was killed by SIGKILL"), std::string::npos) << job.err();
  EXPECT_LT(took, 5s) << job.err();
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

TEST(PmrunSlurm, NoSshIsUsed) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  const std::string marker = t.dir + "/ssh-was-run";
  {
    std::ofstream ssh(t.dir + "/ssh");
    ssh << "#!/bin/sh\ntouch " << marker << "\necho 'ssh: not allowed here' >&2\nexit 255\n";
  }
  std::filesystem::permissions(t.dir + "/ssh", std::filesystem::perms::owner_all);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("PATH=")) continue;
    env.emplace_back(*e);
  }
  const char* path = std::getenv("PATH");
  env.push_back("PATH=" + t.dir + ":" + (path != nullptr ? path : "/usr/bin:/bin"));
  const auto r = run_command(in_salloc(c, {"sh", "-c", "command -v ssh >/dev/null && hostname"}),
                             60s, "", &env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "node"), 6u) << r.out;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// Connects to address:port from this process (the main namespace, on the hosts' bridge), sends
// `bytes`, ends its side and waits until the far side closes; returns what it answered.
std::string knock(const std::string& address, int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    if (!bytes.empty()) (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);  // all it says
    timeval tv{8, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0)
      answer.append(buf, static_cast<std::size_t>(n));
  } else {
    answer = "<connect failed>";
  }
  ::close(fd);
  return answer;
}

TEST(PmrunSlurm, ForgedAndScanningConnectionsAreRefusedWhileTheJobGoesOn) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  background_command job(in_salloc(c, {"sh", "-c", "echo up; sleep 5; echo done"}), t.dir + "/out",
                         t.dir + "/err");
  ASSERT_TRUE(wait_for_lines(job, "up", 6)) << job.err();
  // pmrun's listening port, in node1's namespace.
  const auto& node1 = c.hosts().host("node1");
  const auto ss = run_command({"/usr/sbin/ip", "netns", "exec", node1.netns, "ss", "-Hltnp"});
  // (salloc's own listener shows up too: pmrun inherits it, salloc does not mark it close-on-exec)
  int port = 0;
  std::istringstream listeners(ss.out);
  for (std::string line; std::getline(listeners, line);) {
    std::smatch m;
    static const std::regex re(
        R"(0\.0\.0\.0:(\d+)\s+\S+\s+users:\(\("pmrun",pid=\d+,fd=\d+\)\)\s*$)");
    if (std::regex_search(line, m, re)) port = std::stoi(m[1]);
  }
  ASSERT_NE(port, 0) << ss.out << ss.err;
  // The real token, from an agent's environment: it is on no command line.
  std::string token;
  for (const pid_t pid : job_processes(c, "node2")) {
    if (cmdline_of(pid).find("--connect") == std::string::npos) continue;
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    for (std::string kv; std::getline(env, kv, '\0');) {
      if (kv.starts_with("PM_AGENT_TOKEN=")) token = kv.substr(15);
    }
  }
  ASSERT_EQ(token.size(), 64u);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    EXPECT_EQ(cmdline_of(std::stoi(name)).find(token), std::string::npos) << name;
  }
  EXPECT_EQ(knock(node1.ip, port, ""), "");  // a port scan: connect, close
  EXPECT_EQ(knock(node1.ip, port, "pmcb1 " + std::string(64, 'a') + " node2\n"), "");
  EXPECT_EQ(knock(node1.ip, port, "GET / HTTP/1.0\r\n\r\n"), "");
  EXPECT_EQ(knock(node1.ip, port, "pmcb1 " + token + " node2\n"), "");  // node2 has its agent
  EXPECT_EQ(knock(node1.ip, port, "pmcb1 " + token + " elsewhere\n"), "");
  ASSERT_EQ(job.wait(30s), 0) << job.err();
  EXPECT_EQ(count_of(job.out(), "done"), 6u) << job.out();
  const auto err = job.err();
  EXPECT_EQ(count_of(err, "refused a connection"), 5u) << err;
  EXPECT_NE(err.find("closed before its greeting"), std::string::npos) << err;
  EXPECT_NE(err.find("wrong token"), std::string::npos) << err;
  EXPECT_NE(err.find("not an agent's greeting"), std::string::npos) << err;
  EXPECT_NE(err.find("node 'node2' has its agent already"), std::string::npos) << err;
  EXPECT_NE(err.find("node 'elsewhere' is not a host of this job"), std::string::npos) << err;
}

TEST(PmrunSlurm, PmrunInsideAJobStepStartsItsOwnStep) {
  NEED_SLURM();
  slurm_cluster c(3);
  // The step's nodes are pmrun's allocation: one task per node, so -np 3 by default.
  const auto pmrun = pmrun_args({"sh", "-c", "echo rank=$OMPI_COMM_WORLD_RANK host=$(hostname)"});
  std::string line;
  for (const auto& w : pmrun) line += "'" + w + "' ";
  const auto r =
      run_command(c.on_node("node1", {"salloc", "-N3", "--ntasks-per-node=2", "--quiet", "srun",
                                      "-N3", "-n3", "--ntasks-per-node=1", "sh", "-c",
                                      "if [ \"$SLURM_PROCID\" = 0 ]; then exec " + line + "; fi"}),
                  60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank) + " host=node" + std::to_string(rank + 1)),
              std::string::npos)
        << r.out << r.err;
  }
  EXPECT_EQ(count_of(r.out, "rank="), 3u) << r.out;
}

TEST(PmrunSlurm, PmrunInAnSbatchScriptWithExportNone) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  ::chmod(t.dir.c_str(), 0755);
  {
    std::ofstream script(t.dir + "/job.sh");
    script << "#!/bin/sh\nexec " << pm::test::pmrun_path()
           << " --allow-run-as-root sh -c 'echo rank=$OMPI_COMM_WORLD_RANK host=$(hostname)'\n";
  }
  // sbatch --wait polls every few seconds: the test polls the job itself.
  const auto r =
      run_command(c.on_node("node1", {"sbatch", "--parsable", "-N3", "--ntasks-per-node=2",
                                      "--export=NONE", "-o", t.dir + "/out", t.dir + "/job.sh"}),
                  30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  std::string state;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    state = run_command(c.on_node("node1", {"scontrol", "-o", "show", "job", id})).out;
    if (state.find("JobState=COMPLETED") != std::string::npos ||
        state.find("JobState=FAILED") != std::string::npos ||
        state.find("JobState=CANCELLED") != std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(state.find("JobState=COMPLETED"), std::string::npos) << state;
  EXPECT_NE(state.find("ExitCode=0:0"), std::string::npos) << state;
  std::ifstream in(t.dir + "/out");
  const std::string out((std::istreambuf_iterator<char>(in)), {});
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(
        out.find("rank=" + std::to_string(rank) + " host=node" + std::to_string(rank / 2 + 1)),
        std::string::npos)
        << out;
  }
}

// No cluster needed: what pmrun says before anything starts.
std::vector<std::string> fake_allocation_env(const std::string& path) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (kv.starts_with("PATH=") || kv.starts_with("SLURM_")) continue;
    env.emplace_back(kv);
  }
  env.push_back("PATH=" + path);
  env.push_back("SLURM_JOB_ID=4242");
  env.push_back("SLURM_JOB_NODELIST=pmt-nosuch[1-2]");
  env.push_back("SLURM_TASKS_PER_NODE=1(x2)");
  return env;
}

TEST(PmrunSlurmErrors, AMissingSrunIsOneLineAndNothingStarts) {
  temp_files t;
  const std::string marker = t.dir + "/ran";
  const auto env = fake_allocation_env(t.dir + "/empty-bin");
  const auto r = run_command(pmrun_args({"/bin/touch", marker}), 20s, "", &env);
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
  EXPECT_NE(r.err.find("srun"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(PmrunSlurmErrors, LauncherSrunOutsideAnAllocationIsAUsageError) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("SLURM_")) env.emplace_back(*e);
  }
  const auto r = run_command(pmrun_args({"--launcher", "srun", "true"}), 20s, "", &env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not inside a Slurm allocation"), std::string::npos) << r.err;
}

TEST(PmrunSlurmErrors, LauncherLocalIgnoresTheAllocation) {
  const auto env = fake_allocation_env("/usr/bin:/bin");
  const auto r =
      run_command(pmrun_args({"--launcher", "local", "-np", "2", "hostname"}), 20s, "", &env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "\n"), 2u) << r.out;
}

}  // namespace

namespace {

// A DVM inside a Slurm allocation (docs/dvm.md): node1's daemon is pmrun's child, node2's and
// node3's start with one srun step and dial back. Jobs on it run where the allocation's tasks
// are, a job's failure is that job's, the DVM survives its jobs, and stopping it leaves nothing.
TEST(PmrunSlurm, ADvmInsideTheAllocationRunsJobsOnDaemonsStartedBySrun) {
  NEED_SLURM();
  slurm_cluster c(3);
  temp_files t;
  const std::string p = pm::test::pmrun_path() + " --allow-run-as-root";
  const std::string uri = "--dvm-uri file:" + t.dir + "/uri";
  const std::string script =
      "export PM_STATUS_DIR=" + t.dir + "/st; " + p + " --dvm start --report-uri " + t.dir +
      "/uri || exit 90; " + p + " " + uri +
      " -np 6 sh -c 'echo rank=$OMPI_COMM_WORLD_RANK host=$(hostname)'; echo first=$?; " + p + " " +
      uri + " -np 6 sh -c 'exit $((NODE_RANK == 1 ? 5 : 0))'; echo second=$?; " + p + " " + uri +
      " -np 2 true; echo third=$?; " + p + " --dvm stop " + uri + "; echo stop=$?";
  const auto r = run_command(
      c.on_node("node1", {"salloc", "-N3", "--ntasks-per-node=2", "--quiet", "sh", "-c", script}),
      120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& hosts = c.hosts().hosts();
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank) +
                         " host=" + hosts[static_cast<std::size_t>(rank / 2)].name),
              std::string::npos)
        << r.out << r.err;
  }
  EXPECT_NE(r.out.find("first=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("second=5"), std::string::npos) << r.out << r.err;  // node 1's ranks
  EXPECT_NE(r.out.find("third=0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stop=0"), std::string::npos) << r.out;
  EXPECT_TRUE(nodes_clean(c, {"node1", "node2", "node3"}))
      << left_on(c, {"node1", "node2", "node3"});
}

}  // namespace
