// The launch's set-up over real sshd hosts (issue 20; docs/failure-semantics.md "Set-up",
// docs/multihost.md "Failures across hosts"): a host lost before its agent's hello fails the
// launch at once (125, one line with ssh's reason) and releases everything that waited on it; a
// signal or --timeout ends the launch from any state, also while a host never answers; a second
// SIGINT escalates at once; an agent killed by a signal is named; the abort line counts the ranks
// it signals. Every test checks by pids that nothing is left on any host, nor of pmrun's own
// process group (its ssh clients) here.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/command.hpp"
#include "support/multihost.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
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

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// True once no process is left in process group `pgid` (pmrun's: its ssh clients), within `within`.
bool group_gone(pid_t pgid, std::chrono::milliseconds within = 3s) {
  const auto until = clock_type::now() + within;
  while (kill(-pgid, 0) == 0) {
    if (clock_type::now() > until) return false;
    std::this_thread::sleep_for(20ms);
  }
  return errno == ESRCH;
}

// pmrun in the background, in its own process group, stderr to a file: for tests that signal it.
struct background_pmrun {
  pid_t pid = -1;
  std::string err_path;
  int status = 0;
  bool reaped = false;

  background_pmrun(std::vector<std::string> argv, std::string err_file)
      : err_path(std::move(err_file)) {
    std::vector<char*> c_args;
    for (auto& a : argv) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      const int null = open("/dev/null", O_RDWR);
      const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(null, 0);
      dup2(null, 1);
      dup2(err, 2);
      execv(c_args[0], c_args.data());
      _exit(127);
    }
    setpgid(pid, pid);  // both sides, so that a signal to the group cannot race the child's
  }
  ~background_pmrun() {
    if (pid > 0 && !reaped) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  // Waits for pmrun's end: false if it is still running after `within`.
  bool wait(std::chrono::milliseconds within) {
    const auto until = clock_type::now() + within;
    while (clock_type::now() < until) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  std::string err() const {
    std::ifstream in(err_path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// A stopped sshd: it accepts no connection (the kernel completes the handshake, no banner ever
// comes), like a host that hangs. Continued when the test ends, whatever happens.
struct stopped_sshd {
  pid_t pid;
  explicit stopped_sshd(pid_t p) : pid(p) { kill(pid, SIGSTOP); }
  ~stopped_sshd() { kill(pid, SIGCONT); }
};

// The agent (pmd itself, not the remote shell around it) on `host` once it runs `ranks` ranks of
// `program`, or 0 if that does not happen within 10 s.
pid_t agent_on(const multihost_fixture& f, const std::string& host, const std::string& program,
               std::size_t ranks) {
  const std::string pmd = std::string(PM_BINARY_DIR) + "/bin/pmd";
  const auto until = clock_type::now() + 10s;
  while (clock_type::now() < until) {
    pid_t agent = 0;
    std::size_t running = 0;
    for (const auto pid : f.pids_on(host)) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
      const std::string cmd((std::istreambuf_iterator<char>(in)), {});
      if (cmd.rfind(pmd + '\0', 0) == 0) agent = pid;
      if (cmd.rfind(program + '\0', 0) == 0) ++running;
    }
    if (agent > 0 && running >= ranks) return agent;
    std::this_thread::sleep_for(20ms);
  }
  return 0;
}

std::string write_hostfile(const multihost_fixture& f, const std::string& text) {
  const std::string path = f.state_dir() + "/setup-hostfile";
  std::ofstream(path) << text;
  return path;
}

TEST(PmrunSetup, ARefusedFirstHostFailsTheLaunchAtOnceWithOneLine) {
  NEED_HOSTS();
  multihost_fixture f(2);
  // The issue's repro: node1 (rank 0's host) has nothing listening on port 2222.
  const auto hostfile = write_hostfile(
      f, f.hosts()[0].name + " slots=2 port=2222\n" + f.hosts()[1].name + " slots=2\n");
  const auto start = clock_type::now();
  const auto r = run_command(
      pmrun(f, {"--hostfile", hostfile, "-np", "4", pm::test::payload_path(), "sleep", "30"}), 30s);
  const auto took = clock_type::now() - start;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 125) << r.err;  // a set-up failure, not a lost host (213)
  EXPECT_LT(took, 2s) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("pmrun: the agent on " + f.hosts()[0].name + " did not start (ssh to " +
                       f.hosts()[0].name + " (port 2222) failed"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("port 2222: Connection refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its 2 ranks could not start"), std::string::npos) << r.err;
  std::cerr << "refused first host: exit " << r.exit_code << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_TRUE(group_gone(r.pid));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunSetup, ARefusedLaterHostStopsTheRanksAlreadyRunning) {
  NEED_HOSTS();
  multihost_fixture f(2);
  // Rank 0's host answers, so its ranks start; node1 refuses: the launch fails all the same.
  const auto hostfile = write_hostfile(
      f, f.hosts()[1].name + " slots=2\n" + f.hosts()[0].name + " slots=2 port=2222\n");
  const auto start = clock_type::now();
  const auto r = run_command(
      pmrun(f, {"--hostfile", hostfile, "-np", "4", pm::test::payload_path(), "sleep", "30"}), 30s);
  const auto took = clock_type::now() - start;
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_LT(took, 3s) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("the agent on " + f.hosts()[0].name + " did not start"), std::string::npos)
      << r.err;
  EXPECT_TRUE(group_gone(r.pid));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunSetup, AnUnknownUserFailsTheLaunchAtOnce) {
  NEED_HOSTS();
  multihost_fixture f(2);
  const auto start = clock_type::now();
  const auto r =
      run_command(pmrun(f, {"-H", "bob@" + f.hosts()[0].name + ":2," + f.hosts()[1].name + ":2",
                            "-np", "4", pm::test::payload_path(), "sleep", "30"}),
                  30s);
  const auto took = clock_type::now() - start;
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_LT(took, 2s) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("the agent on " + f.hosts()[0].name + " did not start (ssh to bob@" +
                       f.hosts()[0].name + " failed"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  std::cerr << "unknown user: exit " << r.exit_code << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_TRUE(group_gone(r.pid));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// Ctrl-C while a host never answers (its sshd stopped: ssh waits for a banner, 10 s): pmrun
// ends within a second of the signal, by the signal, whichever host holds rank 0.
void sigint_while_a_host_is_silent(bool rank0_silent) {
  multihost_fixture f(2);
  const auto& silent = f.hosts()[0];
  const auto& alive = f.hosts()[1];
  stopped_sshd stop(silent.sshd_pid);
  const std::string hosts = rank0_silent ? silent.name + ":2," + alive.name + ":2"
                                         : alive.name + ":2," + silent.name + ":2";
  background_pmrun p(pmrun(f, {"-H", hosts, "-np", "4", pm::test::payload_path(), "sleep", "60"}),
                     f.state_dir() + "/pmrun.err");
  // Let the launch get stuck on the silent host (and, with rank 0 elsewhere, its ranks run).
  if (!rank0_silent) {
    EXPECT_GT(agent_on(f, alive.name, pm::test::payload_path(), 2), 0) << left_on_hosts(f);
  }
  std::this_thread::sleep_for(1500ms);
  const auto sent = clock_type::now();
  kill(p.pid, SIGINT);
  ASSERT_TRUE(p.wait(5s)) << "pmrun still running 5 s after SIGINT: " << p.err();
  const auto took = clock_type::now() - sent;
  std::cerr << "SIGINT with a silent host (rank 0 " << (rank0_silent ? "there" : "elsewhere")
            << "): pmrun gone "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after the signal\n";
  EXPECT_LT(took, 1s) << p.err();
  EXPECT_TRUE(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGINT) << p.status << p.err();
  const auto err = p.err();
  EXPECT_NE(err.find("pmrun: interrupted by SIGINT"), std::string::npos) << err;
  if (!rank0_silent) {
    EXPECT_NE(err.find("(SIGINT to 2 ranks)"), std::string::npos) << err;
  }
  EXPECT_TRUE(group_gone(p.pid));
  kill(silent.sshd_pid, SIGCONT);  // its half-open connection then closes
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunSetup, SigintWhileRankZerosHostIsSilentEndsWithinASecond) {
  NEED_HOSTS();
  sigint_while_a_host_is_silent(true);
}

TEST(PmrunSetup, SigintWhileAnotherHostIsSilentEndsWithinASecond) {
  NEED_HOSTS();
  sigint_while_a_host_is_silent(false);
}

TEST(PmrunSetup, TimeoutWhileAHostIsSilentEndsWithinTheGrace) {
  NEED_HOSTS();
  multihost_fixture f(2);
  stopped_sshd stop(f.hosts()[0].sshd_pid);
  const auto start = clock_type::now();
  const auto r =
      run_command(pmrun(f, {"--timeout", "3", "--kill-grace", "1", "-H", hosts_with_slots(f, 2),
                            "-np", "4", pm::test::payload_path(), "sleep", "60"}),
                  30s);
  const auto took = clock_type::now() - start;
  std::cerr << "--timeout 3 with a silent host: exit " << r.exit_code << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(took, 3s + 1s) << r.err;  // the timeout, then at most the grace
  EXPECT_NE(r.err.find("pmrun: job timed out after 3 s"), std::string::npos) << r.err;
  EXPECT_TRUE(group_gone(r.pid));
  kill(f.hosts()[0].sshd_pid, SIGCONT);
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// Ranks that ignore SIGINT and SIGTERM, a 30 s grace: the first SIGINT waits for them, the
// second kills them at once and pmrun is gone.
TEST(PmrunSetup, ASecondSigintEscalatesAtOnce) {
  NEED_HOSTS();
  multihost_fixture f(2);
  background_pmrun p(pmrun(f, {"--kill-grace", "30", "-H", hosts_with_slots(f, 2), "-np", "4",
                               "/bin/sh", "-c", "trap '' INT TERM; exec sleep 60"}),
                     f.state_dir() + "/pmrun.err");
  for (const auto& h : f.hosts()) ASSERT_GT(agent_on(f, h.name, "sleep", 2), 0) << left_on_hosts(f);
  kill(p.pid, SIGINT);
  EXPECT_FALSE(p.wait(1500ms)) << "the ranks ignore SIGINT: the grace should hold pmrun";
  const auto sent = clock_type::now();
  kill(p.pid, SIGINT);
  ASSERT_TRUE(p.wait(5s)) << p.err();
  const auto took = clock_type::now() - sent;
  std::cerr << "second SIGINT: pmrun gone "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after it\n";
  EXPECT_LT(took, 1s) << p.err();
  EXPECT_TRUE(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGINT) << p.err();
  EXPECT_NE(p.err().find("received SIGINT again; sending SIGKILL to 4 ranks"), std::string::npos)
      << p.err();
  EXPECT_TRUE(group_gone(p.pid));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// The same with node2's agent stopped (SIGSTOP: it answers nothing, its heartbeats stop): the
// second SIGINT does not wait for it either; once continued it finds the link closed and ends
// its ranks itself.
TEST(PmrunSetup, ASecondSigintDoesNotWaitForAnAgentThatDoesNotAnswer) {
  NEED_HOSTS();
  multihost_fixture f(2);
  background_pmrun p(
      pmrun(f, {"--kill-grace", "4", "--heartbeat-misses", "40", "-H", hosts_with_slots(f, 2),
                "-np", "4", "/bin/sh", "-c", "trap '' INT TERM; exec sleep 60"}),
      f.state_dir() + "/pmrun.err");
  ASSERT_TRUE(every_host_busy(f, 2)) << left_on_hosts(f);
  const pid_t agent = agent_on(f, f.hosts()[1].name, "sleep", 2);
  ASSERT_GT(agent, 0) << left_on_hosts(f);
  kill(agent, SIGSTOP);
  kill(p.pid, SIGINT);
  EXPECT_FALSE(p.wait(1s));
  const auto sent = clock_type::now();
  kill(p.pid, SIGINT);
  const bool ended = p.wait(5s);
  const auto took = clock_type::now() - sent;
  kill(agent, SIGCONT);
  ASSERT_TRUE(ended) << p.err();
  std::cerr << "second SIGINT with a stopped agent: pmrun gone "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after it\n";
  EXPECT_LT(took, 1500ms) << p.err();
  EXPECT_TRUE(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGINT) << p.err();
  EXPECT_TRUE(group_gone(p.pid));
  // Its agent, continued, reads the end of its link and ends its ranks (SIGTERM is ignored: the
  // job's 4 s grace, then SIGKILL). Nothing is left after that.
  EXPECT_TRUE(hosts_clean(f, 15s)) << left_on_hosts(f);
}

TEST(PmrunSetup, ARemoteAgentKilledBySigkillIsNamed) {
  NEED_HOSTS();
  multihost_fixture f(2);
  background_pmrun p(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", pm::test::payload_path(), "sleep", "60"}),
      f.state_dir() + "/pmrun.err");
  ASSERT_TRUE(every_host_busy(f, 2)) << left_on_hosts(f);
  const pid_t agent = agent_on(f, f.hosts()[1].name, pm::test::payload_path(), 2);
  ASSERT_GT(agent, 0) << left_on_hosts(f);
  kill(agent, SIGKILL);
  ASSERT_TRUE(p.wait(20s)) << p.err();
  const auto err = p.err();
  EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 213) << p.status << err;
  EXPECT_NE(err.find("host " + f.hosts()[1].name + " was lost"), std::string::npos) << err;
  EXPECT_NE(err.find("the agent pmd on " + f.hosts()[1].name + " was killed by SIGKILL"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("ssh exited with code 255"), std::string::npos) << err;
  EXPECT_TRUE(group_gone(p.pid));
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

// A rank fails while node2 is still being set up (its sshd stopped): the abort signals the one
// rank that runs and says so, and the launch does not wait for node2's ssh.
TEST(PmrunSetup, TheAbortLineCountsTheRanksStillRunning) {
  NEED_HOSTS();
  multihost_fixture f(2);
  stopped_sshd stop(f.hosts()[1].sshd_pid);
  const auto start = clock_type::now();
  const auto r = run_command(
      pmrun(f, {"-H", hosts_with_slots(f, 2), "-np", "4", pm::test::payload_path(), "if-rank", "0",
                "sleep", "1", "if-rank", "0", "exit", "7", "sleep", "30"}),
      30s);
  const auto took = clock_type::now() - start;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.err, "pmrun: rank 0 on " + f.hosts()[0].name +
                       " exited with code 7; aborting the job (SIGTERM to 1 rank)\n");
  EXPECT_LT(took, 4s) << r.err;  // not ssh's 10 s connect timeout
  EXPECT_TRUE(group_gone(r.pid));
  kill(f.hosts()[1].sshd_pid, SIGCONT);
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

}  // namespace
