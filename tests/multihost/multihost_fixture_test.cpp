// The multi-host fixture itself (tests/multihost/hosts.sh through tests/support/multihost.hpp):
// every host answers ssh under its own name, from the test and from the other hosts; faults do
// what they say; and nothing of a run is left after it, also after a failed up or a dead owner.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/multihost.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::command_result;
using pm::test::multihost_fixture;
using pm::test::multihost_options;
using pm::test::run_command;

#define SKIP_UNLESS_AVAILABLE()                                                        \
  if (!multihost_fixture::available()) {                                               \
    GTEST_SKIP() << "no fake hosts here: " << multihost_fixture::unavailable_reason(); \
  }

std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

std::string shell(const std::string& command) {
  return run_command({"/bin/sh", "-c", command}, 30s).out;
}

std::chrono::duration<double> timed(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::steady_clock::now() - start;
}

// Start time of a running process (field 22 of /proc/PID/stat), nullopt if gone or a zombie.
std::optional<std::string> process_start(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
  if (f.size() < 20 || f[0] == "Z") return std::nullopt;
  return f[19];
}

// What is left of a run on this machine, in words; "" when nothing is.
struct run_trace {
  std::string run_id, state_dir;
  std::vector<std::pair<pid_t, std::string>> processes;  // pid, start time

  explicit run_trace(const multihost_fixture& f) : run_id(f.run_id()), state_dir(f.state_dir()) {
    for (const auto& h : f.hosts()) track(h.sshd_pid);
  }
  run_trace(std::string id, std::string dir) : run_id(std::move(id)), state_dir(std::move(dir)) {}

  void track(pid_t pid) {
    if (auto start = process_start(pid)) processes.emplace_back(pid, *start);
  }

  std::string leftovers() const {
    std::string left;
    const auto netns = shell("ip netns list | grep -F 'pmt-" + run_id + "-' || true");
    if (!netns.empty()) left += "netns: " + netns;
    const auto links = shell("ip -o link show | grep -E ': (pmtb" + run_id + "|pmt" + run_id +
                             "v[0-9]+)[@:]' || true");
    if (!links.empty()) left += "links: " + links;
    for (const auto& [pid, start] : processes) {
      if (process_start(pid) == start) left += "process " + std::to_string(pid) + " still runs\n";
    }
    const auto etc = shell("ls -d /etc/netns/pmt-" + run_id + "-* 2>/dev/null || true");
    if (!etc.empty()) left += "/etc/netns: " + etc;
    if (std::filesystem::exists(state_dir)) left += "state dir " + state_dir + "\n";
    if (std::filesystem::exists("/run/pmt-fixture/" + run_id + ".env")) left += "run record\n";
    return left;
  }
};

// A process left on `host` that outlives the ssh session which started it; returns its pid.
pid_t leave_sleeper(const multihost_fixture& f, const std::string& host) {
  const auto r = run_command(
      f.ssh_command(host, "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"), 20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return static_cast<pid_t>(std::stol(last_line(r.out)));
}

TEST(MultihostFixture, EveryHostAnswersSshUnderItsNameFromTheTestAndFromOtherHosts) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(3, multihost_options().with_noise_host(2));
  ASSERT_EQ(f.hosts().size(), 3u);
  for (const auto& h : f.hosts()) {
    const auto r = run_command(f.ssh_command(h.name, "hostname"), 20s);
    EXPECT_EQ(r.exit_code, 0) << h.name << ": " << r.err;
    const auto noise = h.name == "node2" ? f.noise_line() + "\n" : "";
    EXPECT_EQ(r.out, noise + h.name + "\n");
  }
  // Host to host, straight from node1's namespace and through a session on node1 (a tree launch).
  auto r = run_command(f.on_host("node1", f.ssh_command("node3", "hostname")), 20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "node3\n");
  r = run_command(f.ssh_command("node1", "ssh -F " + f.ssh_config() + " node3 hostname"), 20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "node3\n");
  // Names resolve on every host; `exec` runs as the host.
  r = run_command(f.ssh_command("node2", "getent hosts node3"), 20s);
  EXPECT_EQ(last_line(r.out).substr(0, f.host("node3").ip.size() + 1), f.host("node3").ip + " ");
  r = run_command(f.on_host("node2", {"/bin/hostname"}), 20s);
  EXPECT_EQ(r.out, "node2\n");
}

TEST(MultihostFixture, HostsReachTheTestAtTheBridgeAddress) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(2);
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ASSERT_EQ(inet_pton(AF_INET, f.bridge_ip().c_str(), &address.sin_addr), 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const auto port = std::to_string(ntohs(address.sin_port));
  // The connection completes into the backlog; accept it afterwards.
  const auto r = run_command(
      f.ssh_command("node2", "echo hello from $(hostname) >/dev/tcp/" + f.bridge_ip() + "/" + port),
      20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const int peer = accept(listener, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  char buffer[64] = {};
  const auto n = read(peer, buffer, sizeof buffer - 1);
  close(peer);
  close(listener);
  EXPECT_EQ(std::string(buffer, n > 0 ? static_cast<std::size_t>(n) : 0), "hello from node2\n");
}

TEST(MultihostFixture, TheNoiseHostPrintsItsLineBeforeTheCommandsOutput) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(3, multihost_options().with_noise_host(2));
  EXPECT_EQ(f.noise_host(), "node2");
  ASSERT_FALSE(f.noise_line().empty());
  auto r = run_command(f.ssh_command("node2", "echo payload; hostname"), 20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, f.noise_line() + "\npayload\nnode2\n");
  // The remote command keeps its exit code, and other hosts print no noise.
  r = run_command(f.ssh_command("node2", "exit 7"), 20s);
  EXPECT_EQ(r.exit_code, 7);
  r = run_command(f.ssh_command("node1", "echo payload"), 20s);
  EXPECT_EQ(r.out.find(f.noise_line()), std::string::npos);
  EXPECT_EQ(last_line(r.out), "payload");
}

TEST(MultihostFixture, MaxStartupsAndSshdOptionsReachEverySshd) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(
      2, multihost_options().with_max_startups("50:30:100").with_sshd_option("MaxSessions 3"));
  for (const auto& h : f.hosts()) {
    std::ifstream in("/proc/" + std::to_string(h.sshd_pid) + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(cmdline.find("of 50-100 startups"), std::string::npos) << cmdline;
  }
  const auto config = shell("cat " + f.state_dir() + "/node1/sshd_config");
  EXPECT_NE(config.find("\nMaxSessions 3\n"), std::string::npos) << config;
}

TEST(MultihostFixture, CrashKillsEveryProcessOnTheHostAndLeavesTheOthers) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(3);
  const pid_t sleeper = leave_sleeper(f, "node1");
  EXPECT_EQ(f.pids_on("node1"), std::vector<pid_t>{sleeper});
  EXPECT_TRUE(f.pids_on("node2").empty());

  f.crash("node1");
  EXPECT_TRUE(f.pids_on("node1").empty());
  EXPECT_EQ(shell("ip netns pids " + f.host("node1").netns), "");  // its sshd too
  EXPECT_FALSE(process_start(sleeper).has_value());
  command_result r;
  const auto took = timed([&] { r = run_command(f.ssh_command("node1", "true"), 20s); });
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("refused"), std::string::npos) << r.err;  // the address stays, sshd is gone
  EXPECT_LT(took.count(), 3.0);
  r = run_command(f.ssh_command("node2", "hostname"), 20s);
  EXPECT_EQ(r.out, "node2\n");
}

TEST(MultihostFixture, PartitionDropsTheHostsTrafficAndHealBringsItBack) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(3);
  const pid_t sleeper = leave_sleeper(f, "node2");

  f.partition("node2");
  command_result r;
  auto took = timed([&] { r = run_command(f.ssh_command("node2", "true"), 30s); });
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_EQ(r.err.find("refused"), std::string::npos) << r.err;  // dropped, not refused
  EXPECT_LT(took.count(), 5.0 + 3.0);                            // ConnectTimeout 5 and slack
  EXPECT_EQ(f.pids_on("node2"), std::vector<pid_t>{sleeper});    // the host itself lives on
  r = run_command(f.on_host("node1", f.ssh_command("node2", "true")), 30s);
  EXPECT_EQ(r.exit_code, 255);  // cut off from the other hosts too
  r = run_command(f.ssh_command("node3", "hostname"), 20s);
  EXPECT_EQ(r.out, "node3\n");

  f.heal("node2");
  took = timed([&] { r = run_command(f.ssh_command("node2", "hostname"), 20s); });
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "node2\n");
  EXPECT_LT(took.count(), 5.0);
}

TEST(MultihostFixture, DownLeavesNothingOfTheRunAndIsIdempotent) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture f(3, multihost_options().with_noise_host(3));
  run_trace trace(f);
  trace.track(leave_sleeper(f, "node1"));
  trace.track(leave_sleeper(f, "node3"));
  ASSERT_EQ(trace.processes.size(), 5u);
  ASSERT_NE(trace.leftovers(), "");  // the check sees a live run

  EXPECT_EQ(f.down(), "");
  EXPECT_EQ(trace.leftovers(), "");
  EXPECT_EQ(f.down(), "");
  const auto again =
      run_command({"/bin/bash", multihost_fixture::script(), "down", "--state", f.state_dir()});
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST(MultihostFixture, TwoFixturesUpAtOnceDoNotCollide) {
  SKIP_UNLESS_AVAILABLE();
  auto make = [] { return std::make_unique<multihost_fixture>(2); };
  auto first = std::async(std::launch::async, make);
  auto second = std::async(std::launch::async, make);
  auto a = first.get();
  auto b = second.get();
  EXPECT_NE(a->run_id(), b->run_id());
  EXPECT_NE(a->subnet(), b->subnet());
  EXPECT_NE(a->bridge(), b->bridge());
  EXPECT_NE(a->state_dir(), b->state_dir());
  for (const auto* f : {a.get(), b.get()}) {
    // node1 of each run is that run's node1.
    const auto r = run_command(f->ssh_command("node1", "hostname; ip -4 -o addr show eth0"), 20s);
    EXPECT_EQ(first_line(r.out), "node1");
    EXPECT_NE(r.out.find(" " + f->host("node1").ip + "/24 "), std::string::npos) << r.out;
  }
  run_trace trace_a(*a), trace_b(*b);
  auto down_a = std::async(std::launch::async, [&] { return a->down(); });
  auto down_b = std::async(std::launch::async, [&] { return b->down(); });
  EXPECT_EQ(down_a.get(), "");
  EXPECT_EQ(down_b.get(), "");
  EXPECT_EQ(trace_a.leftovers(), "");
  EXPECT_EQ(trace_b.leftovers(), "");
}

TEST(MultihostFixture, AStaleRunIsReapedByTheNextUpAndALiveOneIsNot) {
  SKIP_UNLESS_AVAILABLE();
  multihost_fixture live(1);
  // A run owned by a process that then dies, as when a test binary is SIGKILLed.
  pid_t owner = 0;
  char* const sleep_argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("300"), nullptr};
  ASSERT_EQ(posix_spawn(&owner, "/bin/sleep", nullptr, nullptr, sleep_argv, environ), 0);
  char dir_template[] = "/tmp/pm-multihost-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string state = dir_template;
  auto r = run_command({"/bin/bash", multihost_fixture::script(), "up", "--hosts", "2", "--state",
                        state, "--owner", std::to_string(owner)},
                       60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto id = shell("cat " + state + "/.pmt-fixture");
  run_trace trace(id.substr(0, id.find('\n')), state);
  for (const auto* key : {"PM_MH_HOST1_SSHD_PID", "PM_MH_HOST2_SSHD_PID"}) {
    trace.track(std::stoi(shell(". " + state + "/hosts.env; echo $" + key)));
  }
  ASSERT_NE(trace.leftovers(), "");
  r = run_command({"/bin/bash", multihost_fixture::script(), "reap-stale"}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(trace.leftovers(), "") << "reaped while its owner lives";

  // Its owner dies; the next run's up reaps it (as `hosts.sh reap-stale` would).
  kill(owner, SIGKILL);
  waitpid(owner, nullptr, 0);
  multihost_fixture next(1);
  EXPECT_EQ(trace.leftovers(), "");
  // The live run was left alone.
  r = run_command(live.ssh_command("node1", "hostname"), 20s);
  EXPECT_EQ(r.out, "node1\n");
}

TEST(MultihostFixture, AFailedUpSaysWhyAndLeavesNothing) {
  SKIP_UNLESS_AVAILABLE();
  char dir_template[] = "/tmp/pm-multihost-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string state = dir_template;
  const auto r = run_command({"/bin/bash", multihost_fixture::script(), "up", "--hosts", "3",
                              "--state", state, "--sshd-option", "NoSuchOption yes"},
                             60s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("Bad configuration option: NoSuchOption"), std::string::npos) << r.err;
  std::smatch id;
  ASSERT_TRUE(std::regex_search(r.err, id, std::regex("tearing down run ([0-9a-f]{6})"))) << r.err;
  EXPECT_EQ(run_trace(id[1], state).leftovers(), "");

  // Through the C++ fixture: the constructor throws with the reason.
  try {
    multihost_fixture f(2, multihost_options().with_sshd_option("NoSuchOption yes"));
    ADD_FAILURE() << "up succeeded with a broken sshd_config";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NoSuchOption"), std::string::npos) << e.what();
  }
}

}  // namespace
