// A DVM on this machine (docs/dvm.md): `pmrun --dvm start`, jobs with --dvm-uri, `pmrun --ps
// --dvm-uri`, `pmrun --dvm stop`, shared slots, a submitter or the server SIGKILLed, another user.
// Every test ends its DVM by the pid it started (the socket's name carries it), also on failure.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/processes.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::background;
using pm::test::run_command;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Sends `bytes` on a fresh connection to the DVM's socket (`half_close`: then shuts its writing
// side) and returns what comes back until the server closes (5 s at most).
// (Not "exchange": ADL would find std::exchange for two strings.)
std::string talk(const std::string& socket, const std::string& bytes, bool half_close = true) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "(no socket)";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "(no connection)";
  }
  const timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed it: what it said is still read below
    sent += static_cast<std::size_t>(n);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string got;
  char buf[4096];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class PmrunDvm : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pm-dvm-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root = tmpl;
    dir = root + "/st";
    uri_file = root + "/uri";
    setenv("PM_STATUS_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    if (server > 0 && pm::test::alive(server)) {
      ::kill(server, SIGTERM);
      if (!pm::test::all_gone({server}, 10s)) ::kill(server, SIGKILL);
    }
    unsetenv("PM_STATUS_DIR");
    std::filesystem::remove_all(root);
  }

  // `pmrun --dvm start` on this machine with `slots` slots; the server's pid from its URI.
  void start(int slots, std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {pm::test::pmrun_path(),
                                     "--allow-run-as-root",
                                     "--dvm",
                                     "start",
                                     "-H",
                                     "localhost:" + std::to_string(slots),
                                     "--report-uri",
                                     uri_file};
    argv.insert(argv.end(), more.begin(), more.end());
    started = run_command(argv, 30s);
    ASSERT_EQ(started.exit_code, 0) << started.err;
    const auto uri = read_file(uri_file);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(uri, m, std::regex(R"(^unix:(.*/dvm\.(\d+)\.sock)\n$)"))) << uri;
    socket = m[1];
    server = static_cast<pid_t>(std::stoi(m[2]));
    ASSERT_TRUE(pm::test::alive(server));
  }
  std::vector<std::string> job(std::vector<std::string> args) {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "--dvm-uri",
                                     "file:" + uri_file};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  nlohmann::json ps() {
    const auto r = run_command(
        {pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file, "--json"}, 10s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  // The DVM's jobs, once `count` run (5 s at most).
  void wait_jobs(std::size_t count) {
    for (int i = 0; i < 100; ++i) {
      if (ps().value("jobs", nlohmann::json::array()).size() == count) return;
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "the DVM never had " << count << " jobs";
  }
  std::string log() { return read_file(dir + "/dvm." + std::to_string(server) + ".log"); }
  pid_t daemon_pid() {
    const auto hosts = ps().value("hosts", nlohmann::json::array());
    return hosts.empty() ? -1 : static_cast<pid_t>(hosts.at(0).value("daemon_pid", 0));
  }

  std::string root, dir, uri_file, socket;
  pid_t server = -1;
  pm::test::command_result started;  // the last start's
};

TEST_F(PmrunDvm, JobsRunWithTheContractEnvironmentAndStopLeavesNothing) {
  start(4);
  const auto daemon = daemon_pid();
  ASSERT_GT(daemon, 0);
  // The default URI file names the same DVM: --dvm-uri search finds it.
  EXPECT_EQ(read_file(dir + "/dvm.uri"), read_file(uri_file));
  for (int round = 0; round < 3; ++round) {
    const auto r = run_command(
        job({"-np", "3", "sh", "-c",
             "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE local=$LOCAL_RANK"}),
        30s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_NE(
          r.out.find("rank=" + std::to_string(rank) + " size=3 local=" + std::to_string(rank)),
          std::string::npos)
          << r.out;
    }
  }
  // The same daemon served every job: it was kept.
  EXPECT_EQ(daemon_pid(), daemon);
  const auto exit7 = run_command(job({"-np", "2", "sh", "-c", "exit 7"}), 30s);
  EXPECT_EQ(exit7.exit_code, 7) << exit7.err;
  const auto stop = run_command(
      {pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "stop", "--dvm-uri", "search"}, 30s);
  ASSERT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_FALSE(pm::test::alive(server));
  EXPECT_TRUE(pm::test::all_gone({daemon}, 5s));
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(dir + "/dvm.uri"));
}

TEST_F(PmrunDvm, AJobWhoseSlotsAreTakenWaitsOrIsRefusedAsAsked) {
  start(2);
  background holder(job({"-np", "2", "sh", "-c", "echo up; sleep 2"}));
  holder.wait_lines(2);
  wait_jobs(1);
  const auto refused = run_command(job({"--dvm-no-wait", "-np", "1", "true"}), 30s);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("free slots now and the job needs 1"), std::string::npos)
      << refused.err;
  // Never fits: map_job's own words, at once.
  const auto never = run_command(job({"-np", "3", "true"}), 30s);
  EXPECT_EQ(never.exit_code, 2) << never.err;
  EXPECT_NE(never.err.find("not enough slots"), std::string::npos) << never.err;
  // Waits for the holder's slots, then runs.
  const auto waited = run_command(job({"-np", "2", "echo", "ran"}), 30s);
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  EXPECT_NE(waited.err.find("waiting for 2 slots of the DVM"), std::string::npos) << waited.err;
  EXPECT_EQ(waited.out, "ran\nran\n");
  EXPECT_EQ(holder.wait_status(), 0);
}

// Several submitters at once share the DVM's slots: none loses a job or a line of output.
TEST_F(PmrunDvm, SubmittersAtOnceLoseNoJobAndNoOutput) {
  start(4);
  constexpr int submitters = 4, jobs = 6;
  std::vector<std::unique_ptr<background>> running;
  for (int k = 0; k < submitters; ++k) {
    std::string loop = "for j in $(seq " + std::to_string(jobs) + "); do ";
    for (const auto& word : job({"-np", "2", "sh", "-c", "echo s$0 j$1 r$OMPI_COMM_WORLD_RANK"})) {
      loop += "'" + word + "' ";
    }
    loop += std::to_string(k) + " $j || echo s" + std::to_string(k) + " j$j FAILED; done";
    running.push_back(
        std::make_unique<background>(std::vector<std::string>{"/bin/sh", "-c", loop}));
  }
  for (int k = 0; k < submitters; ++k) {
    auto& b = *running[static_cast<std::size_t>(k)];
    b.wait_lines(jobs * 2);
    EXPECT_EQ(b.wait_status(), 0);
    for (int j = 1; j <= jobs; ++j) {
      for (int r = 0; r < 2; ++r) {
        const auto line =
            "s" + std::to_string(k) + " j" + std::to_string(j) + " r" + std::to_string(r) + "\n";
        EXPECT_NE(b.text.find(line), std::string::npos) << line << b.text;
      }
    }
    EXPECT_EQ(b.text.find("FAILED"), std::string::npos) << b.text;
  }
  wait_jobs(0);
}

TEST_F(PmrunDvm, AKilledSubmitterEndsItsRanksNotTheDvm) {
  start(2);
  background victim(job({"-np", "2", "sh", "-c", "echo pid $$; exec sleep 60"}));
  victim.wait_lines(2);
  const auto ranks = pm::test::printed_pids(victim.text, "pid");
  ASSERT_EQ(ranks.size(), 2u) << victim.text;
  ::kill(victim.pid, SIGKILL);
  EXPECT_TRUE(pm::test::all_gone(ranks, 10s));
  // Its slots come back and the DVM runs the next job.
  wait_jobs(0);
  const auto next = run_command(job({"--dvm-no-wait", "-np", "2", "true"}), 30s);
  EXPECT_EQ(next.exit_code, 0) << next.err;
}

// A job agent killed outright (SIGKILL, the OOM killer): its ranks die with it (their
// parent-death signal), and what they started in sessions of their own comes to the host's
// daemon (a child subreaper), which ends it. It went to init and ran on. The job fails, the DVM
// goes on.
TEST_F(PmrunDvm, AKilledJobAgentLeavesNothingOfItsRanks) {
  start(2);
  const auto daemon = daemon_pid();
  ASSERT_GT(daemon, 0);
  background victim(job({"-np", "2", pm::test::payload_path(), "daemon", "300", "sleep", "300"}));
  victim.wait_lines(2);
  const auto left = pm::test::printed_pids(victim.text, "daemon");
  ASSERT_EQ(left.size(), 2u) << victim.text;
  std::ifstream children("/proc/" + std::to_string(daemon) + "/task/" + std::to_string(daemon) +
                         "/children");
  pid_t agent = 0;
  children >> agent;
  ASSERT_GT(agent, 0);
  ::kill(agent, SIGKILL);
  EXPECT_TRUE(pm::test::all_gone(left, 5s));
  const int status = victim.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 213) << status;
  EXPECT_TRUE(pm::test::alive(daemon));
  EXPECT_EQ(run_command(job({"-np", "1", "true"}), 30s).exit_code, 0);
}

TEST_F(PmrunDvm, ASigkilledServerLeavesNothingRunning) {
  start(2);
  const auto daemon = daemon_pid();
  background victim(job({"-np", "2", "sh", "-c", "echo pid $$; exec sleep 60"}));
  victim.wait_lines(2);
  const auto ranks = pm::test::printed_pids(victim.text, "pid");
  ASSERT_EQ(ranks.size(), 2u) << victim.text;
  ::kill(server, SIGKILL);
  auto everything = ranks;
  everything.push_back(daemon);
  EXPECT_TRUE(pm::test::all_gone(everything, 10s));
  // The submitter's job ends too, with a failure.
  const int status = victim.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
}

TEST_F(PmrunDvm, AnIdleDvmStopsByItself) {
  start(1, {"--dvm-idle-timeout", "1"});
  const auto daemon = daemon_pid();
  EXPECT_EQ(run_command(job({"-np", "1", "true"}), 30s).exit_code, 0);
  EXPECT_TRUE(pm::test::all_gone({server, daemon}, 10s));
  EXPECT_FALSE(std::filesystem::exists(socket));
}

TEST_F(PmrunDvm, AnotherUserCannotSubmitOrLook) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  if (!other) GTEST_SKIP() << why;
  start(2);
  // Through the directory: closed to others.
  const auto r = run_command(
      other->as({pm::test::pmrun_path(), "--dvm-uri", "unix:" + socket, "-np", "1", "/bin/true"}),
      30s);
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("no DVM answers at"), std::string::npos) << r.err;
  // Even with the directory and socket opened up, the server checks who calls.
  ASSERT_EQ(::chmod(root.c_str(), 0711), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0711), 0);
  ASSERT_EQ(::chmod(socket.c_str(), 0666), 0);
  const auto ps_other =
      run_command(other->as({pm::test::pmrun_path(), "--ps", "--dvm-uri", "unix:" + socket}), 30s);
  EXPECT_NE(ps_other.exit_code, 0);
  EXPECT_EQ(ps_other.out, "");
  const auto job_other = run_command(
      other->as({pm::test::pmrun_path(), "--dvm-uri", "unix:" + socket, "-np", "1", "/bin/true"}),
      30s);
  EXPECT_EQ(job_other.exit_code, 125) << job_other.err;
  // pmrun checks whose DVM it reached before it says anything ...
  EXPECT_NE(job_other.err.find("is not this user's (uid 0); not used"), std::string::npos)
      << job_other.err;
  // ... and the server whose caller it got: a client that asks anyway gets nothing.
  const auto raw = run_command(
      other->as({"/usr/bin/python3", "-c",
                 "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n"
                 "try:\n  s.sendall(b'{\"op\":\"ps\"}\\n')\n  got=s.recv(4096)\n"
                 "except OSError:\n  got=b''\nprint(repr(got))",
                 socket}),
      30s);
  EXPECT_EQ(raw.out, "b''\n") << raw.err;
  // A flood of them is one line in the log (and a count every 10 s): each made its own line.
  const auto flood = run_command(
      other->as({"/usr/bin/python3", "-c",
                 "import socket,sys\nfor i in range(1000):\n  s=socket.socket(socket.AF_UNIX)\n"
                 "  s.connect(sys.argv[1])\n  s.close()",
                 socket}),
      60s);
  EXPECT_EQ(flood.exit_code, 0) << flood.err;
  EXPECT_TRUE(other->processes().empty());
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  const auto said = log();
  EXPECT_EQ(count_of(said, "refused a connection from uid " + std::to_string(other->uid()) +
                               ": only the DVM's own user may use it"),
            1u)
      << said;
  EXPECT_LE(count_of(said, "\n"), 3u) << said;
  EXPECT_EQ(ps().value("jobs", nlohmann::json::array()).size(), 0u);
}

// A client gone before its answer is written (a submitter killed at the wrong moment, or anyone
// who may use the DVM): the server's write raised SIGPIPE, which ended the DVM and every job on
// it. And `pmrun --ps` (text) showed a job's slots from a destroyed temporary: a crash.
// Stopping the DVM while a job's ranks ignore SIGTERM and have children: the daemon gave each job
// agent 2 s before its SIGKILL, less than the ranks' 3 s grace, so the agent died before it could
// kill the ranks' groups, and their children ran on, orphaned.
TEST_F(PmrunDvm, StoppingItEndsWhatRanksThatIgnoreTermStarted) {
  start(2);
  background victim(
      job({"-np", "2", "sh", "-c", "trap '' TERM; sleep 60 & echo kid $!; echo pid $$; wait"}));
  victim.wait_lines(4);
  auto pids = pm::test::printed_pids(victim.text, "pid");
  const auto kids = pm::test::printed_pids(victim.text, "kid");
  ASSERT_EQ(pids.size(), 2u) << victim.text;
  ASSERT_EQ(kids.size(), 2u) << victim.text;
  pids.insert(pids.end(), kids.begin(), kids.end());
  const auto stop = run_command(
      {pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "stop", "--dvm-uri", "search"}, 30s);
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(pm::test::all_gone(pids, 10s)) << "a rank or its child outlived the DVM";
  for (auto p : pids) ::kill(p, SIGKILL);
  victim.wait_status(20);
}

// A command line past the channel's 1 MiB line runs: it is only shown (cut); the server ended the
// connection without a word.
TEST_F(PmrunDvm, AVeryLongCommandLineRuns) {
  start(1);
  std::vector<std::string> args = {"-np", "1", "sh", "-c", "echo $#", "sh"};
  for (int i = 0; i < 1100; ++i) args.push_back(std::string(1000, 'x'));
  const auto r = run_command(job(args), 30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1100\n");
}

TEST_F(PmrunDvm, AClientGoneBeforeItsAnswerLeavesTheDvmRunning) {
  start(2);
  background running(job({"-np", "1", "sh", "-c", "echo up; exec sleep 30"}));
  running.wait_lines(1);
  for (int i = 0; i < 50; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string ask = "{\"op\":\"hosts\"}\n";
    ASSERT_EQ(::write(fd, ask.data(), ask.size()), static_cast<ssize_t>(ask.size()));
    ::close(fd);
  }
  ASSERT_TRUE(pm::test::alive(server));
  const auto text = run_command({pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("sh -c 'echo up; exec sleep 30'"), std::string::npos) << text.out;
  ::kill(running.pid, SIGINT);
  running.wait_status();
  const auto next = run_command(job({"-np", "2", "true"}), 30s);
  EXPECT_EQ(next.exit_code, 0) << next.err;
}

// A host daemon fed garbage (a broken server, or someone else's bytes) says so in one line and
// ends, with the job agents it started; a start request for anything but pmd's dial-back is
// refused.
TEST_F(PmrunDvm, AHostDaemonTakesNothingButItsProtocol) {
  const std::string pmd = std::string(PM_BINARY_DIR) + "/bin/pmd";
  auto r = run_command({pmd, "--dvm-host"}, 10s, "{\"op\":\"ping\"}\nnot json\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("{\"ev\":\"pong\"}"), std::string::npos) << r.out;
  EXPECT_EQ(r.err,
            "pmd: the server sent a line that is not a JSON object; ending 0 job agent(s)\n");
  r = run_command({pmd, "--dvm-host"}, 10s,
                  "{\"op\":\"start\",\"tag\":\"1/0\",\"node\":\"n\",\"addrs\":\"127.0.0.1\","
                  "\"port\":9,\"token\":\"t\",\"args\":[\"--stdio\",\"--nonce\",\"1\"]}\n"
                  "{\"op\":\"rm -rf\"}\n");
  EXPECT_NE(r.out.find("{\"ev\":\"failed\",\"tag\":\"1/0\",\"why\":\"a start request this "
                       "daemon does not take\"}"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "pmd: the server sent an unknown \"op\"; ending 0 job agent(s)\n");
  EXPECT_EQ(r.exit_code, 1);
  // Its stdin's end is the server's: a quiet exit.
  r = run_command({pmd, "--dvm-host"}, 10s, "");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
}

// A second start never overwrites the only record of a DVM that still runs: the first would run on
// unseen (and its slots with it).
TEST_F(PmrunDvm, ASecondStartLeavesTheFirstDvmsUriAlone) {
  start(1);
  const auto first = read_file(uri_file);
  const auto default_file = dir + "/dvm.uri";
  ASSERT_EQ(read_file(default_file), first);
  const auto p = pm::test::pmrun_path();
  const std::vector<std::string> again = {p,    "--allow-run-as-root", "--dvm", "start",
                                          "-H", "localhost:1"};
  // Over the same --report-uri, or with none (the default file names the first): refused.
  auto same = again;
  same.insert(same.end(), {"--report-uri", uri_file});
  for (const auto& argv : {same, again}) {
    const auto r = run_command(argv, 30s);
    EXPECT_EQ(r.exit_code, 125) << r.err;
    EXPECT_NE(r.err.find("pmrun: --dvm start: a DVM already runs at " +
                         first.substr(0, first.size() - 1)),
              std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(read_file(uri_file), first);
  EXPECT_EQ(read_file(default_file), first);
  // Recorded elsewhere: it runs, and the default file still names the first.
  const auto other = root + "/other.uri";
  auto elsewhere = again;
  elsewhere.insert(elsewhere.end(), {"--report-uri", other});
  const auto r = run_command(elsewhere, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  const auto second = read_file(other);
  ASSERT_TRUE(std::regex_search(second, m, std::regex(R"(dvm\.(\d+)\.sock)"))) << second;
  const auto second_server = static_cast<pid_t>(std::stoi(m[1]));
  EXPECT_EQ(read_file(default_file), first);
  const auto stop =
      run_command({p, "--allow-run-as-root", "--dvm", "stop", "--dvm-uri", "file:" + other}, 30s);
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  if (!pm::test::all_gone({second_server}, 10s)) ::kill(second_server, SIGKILL);
  EXPECT_EQ(read_file(default_file), first);
  // A URI file whose DVM is gone is overwritten as before.
  ::kill(server, SIGKILL);
  ASSERT_TRUE(pm::test::all_gone({server}, 10s));
  start(1);
  EXPECT_NE(read_file(uri_file), first);
}

// A host left out at the start is said where the user looks, not only in the DVM's log.
TEST_F(PmrunDvm, AHostLeftOutAtTheStartIsNamedOnTheTerminal) {
  setenv("PM_RSH_AGENT", "/bin/false", 1);  // the other host's daemon never starts
  start(1, {"-H", "localhost:1,nohost:1"});
  unsetenv("PM_RSH_AGENT");
  // Which the server notices first, the channel's end or the carrier's exit, is a race.
  EXPECT_TRUE(std::regex_match(started.err,
                               std::regex("pmrun: --dvm start: host nohost is left out of the "
                                          "DVM: (its daemon's channel ended|its carrier exited "
                                          "with code 1)\n")))
      << started.err;
  const auto hosts = ps().value("hosts", nlohmann::json::array());
  ASSERT_EQ(hosts.size(), 2u) << hosts.dump();
  // The DVM runs on what came up.
  const auto r = run_command(job({"-np", "1", "hostname"}), 30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(PmrunDvm, BadInputIsOneLine) {
  const auto p = pm::test::pmrun_path();
  const auto bad_action = run_command({p, "--allow-run-as-root", "--dvm", "begin"}, 10s);
  EXPECT_EQ(bad_action.exit_code, 2);
  EXPECT_NE(bad_action.err.find("--dvm 'begin': start or stop"), std::string::npos)
      << bad_action.err;
  const auto with_program =
      run_command({p, "--allow-run-as-root", "--dvm", "start", "/bin/true"}, 10s);
  EXPECT_EQ(with_program.exit_code, 2);
  EXPECT_NE(with_program.err.find("--dvm start runs no program"), std::string::npos)
      << with_program.err;
  const auto nobody = run_command(
      {p, "--allow-run-as-root", "--dvm-uri", "unix:" + root + "/none.sock", "-np", "1", "true"},
      10s);
  EXPECT_EQ(nobody.exit_code, 125);
  EXPECT_NE(nobody.err.find("no DVM answers at unix:" + root + "/none.sock"), std::string::npos)
      << nobody.err;
  const auto scheme = run_command(
      {p, "--allow-run-as-root", "--dvm-uri", "tcp://1.2.3.4:5", "-np", "1", "true"}, 10s);
  EXPECT_EQ(scheme.exit_code, 2);
  EXPECT_NE(scheme.err.find("a DVM's URI is file:PATH or unix:PATH"), std::string::npos)
      << scheme.err;
  // The DVM's hosts are the job's: a host list or hostfile beside --dvm-uri is a mistake.
  for (const auto& option : {"-H", "--hostfile"}) {
    const auto r = run_command({p, "--allow-run-as-root", "--dvm-uri", "unix:" + root + "/x.sock",
                                option, "localhost", "-np", "1", "true"},
                               10s);
    EXPECT_EQ(r.exit_code, 2) << option;
    EXPECT_EQ(r.err,
              "pmrun: a job on a DVM runs on the DVM's hosts; -H and --hostfile go with --dvm "
              "start\n")
        << option;
  }
  const auto stop_none = run_command({p, "--allow-run-as-root", "--dvm", "stop"}, 10s);
  EXPECT_EQ(stop_none.exit_code, 2);
  EXPECT_NE(stop_none.err.find("--dvm stop needs --dvm-uri"), std::string::npos) << stop_none.err;
  // A URI file is a short regular file: a FIFO waited for a writer for ever, /dev/zero was read
  // up to 256 MiB.
  const auto fifo = root + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto from_fifo =
      run_command({p, "--allow-run-as-root", "--dvm-uri", "file:" + fifo, "-np", "1", "true"}, 10s);
  EXPECT_EQ(from_fifo.exit_code, 125);
  EXPECT_EQ(from_fifo.err,
            "pmrun: --dvm-uri file:" + fifo + ": it is not a regular file (is a DVM running?)\n");
  for (const auto& r : {bad_action, with_program, nobody, scheme, stop_none, from_fifo}) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Lines of the wrong shape from the DVM's own user (any process of it can connect): each ends
// its connection with one line naming the problem, and one in the log; the DVM and its jobs go
// on. One claim_more with "share":1 threw out of the server's loop (a JSON type error), which
// ended the DVM and every job on it without a word.
TEST_F(PmrunDvm, MalformedLinesEndTheirConnectionNotTheDvm) {
  start(2);
  background running(job({"-np", "1", "sh", "-c", "echo up; sleep 2; echo done"}));
  running.wait_lines(1);
  const std::string claim = "{\"op\":\"claim\",\"slots\":{}}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {claim + "{\"op\":\"claim_more\",\"id\":1,\"slots\":{},\"share\":1}\n",
       "a claim_more whose \\\"share\\\" is not true or false"},
      {claim + "{\"op\":\"claim_more\",\"id\":1,\"slots\":{},\"share\":\"yes\"}\n",
       "a claim_more whose \\\"share\\\" is not true or false"},
      {claim + "{\"op\":\"claim_more\",\"id\":-3,\"slots\":{}}\n",
       "a claim_more without \\\"id\\\" (a number)"},
      {claim + "{\"op\":\"claim_more\",\"id\":1,\"slots\":{\"localhost\":\"2\"}}\n",
       "a claim whose counts are not numbers"},
      {"{\"op\":\"claim\",\"slots\":{\"localhost\":4294967297}}\n",
       "a claim whose counts are not numbers from 0 to 4294967295"},
      {"{\"op\":\"claim\",\"slots\":{\"localhost\":-1}}\n", "a claim whose counts are not numbers"},
      {"{\"op\":\"claim\",\"slots\":[1]}\n", "a claim without \\\"slots\\\" (an object)"},
      {"{\"op\":\"claim\",\"slots\":{},\"command\":\"rm\"}\n",
       "a claim whose \\\"command\\\" is not a list of strings"},
      {claim + claim, "a second claim"},
      {claim + "{\"op\":\"start\",\"hosts\":\"localhost\",\"port\":99999}\n",
       "a start without its fields"},
      {"{\"op\":\"start\",\"hosts\":[],\"args\":[],\"addrs\":\"\",\"token\":\"\",\"port\":1}\n",
       "a start before a claim"},
      {"{\"op\":5}\n", "a request without \\\"op\\\""},
      {"{\"op\":\"rm -rf\"}\n", "an unknown request 'rm -rf'"},
      {"[1,2]\n", "a line that is not a JSON object"},
      {std::string("\x00\xff garbage\n", 11), "a line that is not a JSON object"},
  };
  for (const auto& [bytes, why] : cases) {
    const auto got = talk(socket, bytes);
    // One line naming it, last: then the connection ended.
    const auto last = got.substr(got.rfind('\n', got.size() - 2) + 1);
    EXPECT_EQ(last.rfind("{\"error\":\"the DVM ends this connection: it sent ", 0), 0u)
        << bytes << " -> " << got;
    EXPECT_NE(last.find(why), std::string::npos) << bytes << " -> " << got;
    ASSERT_TRUE(pm::test::alive(server)) << bytes;
  }
  // A line past 1 MiB: the connection ends (the server stops reading mid-line, so its answer
  // may be lost in the reset) and the log names it.
  talk(socket, std::string(2 << 20, 'x') + "\n");
  ASSERT_TRUE(pm::test::alive(server));
  running.wait_lines(2);
  EXPECT_EQ(running.wait_status(30), 0);
  EXPECT_EQ(running.text, "up\ndone\n");
  // The DVM runs the next job; the log named each kind, bounded (the first 8 in full).
  const auto next = run_command(job({"-np", "2", "echo", "ran"}), 30s);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(next.out, "ran\nran\n");
  const auto said = log();
  EXPECT_NE(said.find("closed a connection from pid "), std::string::npos) << said;
  EXPECT_NE(said.find(": it sent a claim_more whose \"share\" is not true or false; job "),
            std::string::npos)
      << said;
  EXPECT_LE(count_of(said, "closed a connection from"), 8u) << said;
  // Stopped as asked: the summary of what was counted goes to the log, which is removed.
  wait_jobs(0);
}

// Connections that break the protocol, however many, make a few lines in the DVM's log: the
// first ones in full, the rest counted.
TEST_F(PmrunDvm, AFloodOfGarbageIsAFewLinesInTheLog) {
  start(1);
  for (int i = 0; i < 300; ++i) talk(socket, "garbage\n");
  ASSERT_TRUE(pm::test::alive(server));
  const auto said = log();
  // One line for this process's kind of trouble; the rest counted, said every 10 s at most.
  EXPECT_EQ(count_of(said, "closed a connection from pid "), 1u) << said;
  EXPECT_LE(count_of(said, "\n"), 2u) << said;
  // What was counted and not said yet is said at the end.
  ::kill(server, SIGTERM);
  ASSERT_TRUE(pm::test::all_gone({server}, 10s));
  const auto all = log();
  EXPECT_NE(all.find("closed 299 more connections in the last "), std::string::npos) << all;
  EXPECT_LE(count_of(all, "\n"), 4u) << all;
}

// Only jobs keep a DVM from its idle stop: `pmrun --ps` polled every 200 ms re-armed the timer
// with each connection, and the DVM never stopped.
TEST_F(PmrunDvm, AnIdleDvmStopsWhilePolledWithPs) {
  start(1, {"--dvm-idle-timeout", "2"});
  EXPECT_EQ(run_command(job({"-np", "1", "true"}), 30s).exit_code, 0);
  const auto since = std::chrono::steady_clock::now();
  while (pm::test::alive(server) && std::chrono::steady_clock::now() - since < 15s) {
    run_command({pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file}, 5s);
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_FALSE(pm::test::alive(server));
  EXPECT_LT(std::chrono::steady_clock::now() - since, 8s);
}

// Two starts at once with the same --report-uri: exactly one records its URI and runs; the
// other is refused in one line and its server ends. Both passed the check before either wrote,
// and one DVM ran unseen.
TEST_F(PmrunDvm, TwoStartsAtOnceRecordOneDvm) {
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (int round = 0; round < 3; ++round) {
    std::string one;
    for (const auto& word : {pm::test::pmrun_path(), std::string("--allow-run-as-root"),
                             std::string("--dvm"), std::string("start"), std::string("-H"),
                             std::string("localhost:1"), std::string("--report-uri"), uri_file}) {
      one += "'" + word + "' ";
    }
    const auto r = run_command(
        {"/bin/sh", "-c", "(" + one + "; echo rc=$?) & (" + one + "; echo rc=$?) & wait"}, 60s);
    EXPECT_EQ(count_of(r.out, "rc=0\n"), 1u) << r.out << r.err;
    EXPECT_EQ(count_of(r.out, "rc=125\n"), 1u) << r.out << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("pmrun: --dvm start: a DVM already runs at unix:", 0), 0u) << r.err;
    // The file names the DVM that runs; no other server is left.
    const auto uri = read_file(uri_file);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(uri, m, std::regex(R"(dvm\.(\d+)\.sock)"))) << uri;
    server = static_cast<pid_t>(std::stoi(m[1]));
    EXPECT_TRUE(pm::test::alive(server));
    std::vector<pid_t> others;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::smatch f;
      const auto name = e.path().filename().string();
      if (std::regex_match(name, f, std::regex(R"(dvm\.(\d+)\.log)")) &&
          std::stoi(f[1]) != server) {
        others.push_back(static_cast<pid_t>(std::stoi(f[1])));
      }
    }
    EXPECT_TRUE(pm::test::all_gone(others, 10s));
    for (auto p : others) ::kill(p, SIGKILL);
    EXPECT_EQ(run_command(job({"-np", "1", "true"}), 30s).exit_code, 0);
    const auto stop = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "stop",
                                   "--dvm-uri", "file:" + uri_file},
                                  30s);
    EXPECT_EQ(stop.exit_code, 0) << stop.err;
    EXPECT_TRUE(pm::test::all_gone({server}, 10s));
    for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e);
  }
}

// Small ones: a relative PM_STATUS_DIR gives an absolute URI; `--dvm stop` as root runs no
// program and needs no --allow-run-as-root (as --ps); --dvm-idle-timeout says what it takes;
// the DVM's --ps quotes a job's command as plain --ps does.
TEST_F(PmrunDvm, SmallOnesAbsoluteUriStopAsRootIdleTextQuotedCommand) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(root);
  setenv("PM_STATUS_DIR", "st", 1);
  start(1);
  std::filesystem::current_path(cwd);
  setenv("PM_STATUS_DIR", dir.c_str(), 1);
  EXPECT_EQ(read_file(uri_file), "unix:" + dir + "/dvm." + std::to_string(server) + ".sock\n");
  background running(job({"-np", "1", "sh", "-c", "echo up; exec sleep 30"}));
  running.wait_lines(1);
  const auto text = run_command({pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file});
  EXPECT_NE(text.out.find(" -np 1 sh -c 'echo up; exec sleep 30'\n"), std::string::npos)
      << text.out;
  ::kill(running.pid, SIGINT);
  running.wait_status();
  const auto bad = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "start",
                                "-H", "localhost:1", "--dvm-idle-timeout", "soon"},
                               10s);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "pmrun: --dvm-idle-timeout 'soon': expected a number of seconds, 0 or more (0: "
            "never)\n");
  const auto stop =
      run_command({pm::test::pmrun_path(), "--dvm", "stop", "--dvm-uri", "file:" + uri_file}, 30s);
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(pm::test::all_gone({server}, 10s));
}

// Waiting jobs go first come, first served: a 2-slot job waiting on a 2-slot DVM runs although
// one-slot jobs keep coming (they raced at each "freed", and the one-slot ones always won).
TEST_F(PmrunDvm, AWideJobIsNotStarvedByNarrowOnes) {
  start(2);
  std::vector<std::unique_ptr<background>> loops;
  std::string one;
  for (const auto& word : job({"-np", "1", "sleep", "0.5"})) one += "'" + word + "' ";
  for (int k = 0; k < 6; ++k) {
    loops.push_back(std::make_unique<background>(std::vector<std::string>{
        "/bin/sh", "-c", "echo go; for i in $(seq 40); do " + one + "; done"}));
  }
  for (auto& l : loops) l->wait_lines(1);
  std::this_thread::sleep_for(1s);
  const auto wide = run_command(job({"-np", "2", "echo", "wide"}), 20s);
  EXPECT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_EQ(wide.out, "wide\nwide\n");
  for (auto& l : loops) {
    ::kill(-l->pid, SIGKILL);
    l->wait_status();
  }
  wait_jobs(0);
}

}  // namespace
