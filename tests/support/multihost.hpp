// Fake hosts for multi-host tests: a gtest-side handle on tests/multihost/hosts.sh.
//
// A multihost_fixture brings up N hosts on this machine (a network namespace, a hostname and an
// sshd each, on a bridge of their own) when constructed and tears every one of them down when
// destroyed, also when the test fails or throws. Reach the hosts with `ssh -F ssh_config() nodeK`
// from the test process or from any host; they reach the test process at bridge_ip().
//
//   if (!pm::test::multihost_fixture::available()) GTEST_SKIP() << ...unavailable_reason();
//   pm::test::multihost_fixture fixture(3, pm::test::multihost_options().with_noise_host(2));
//   auto r = pm::test::run_command(fixture.ssh_command("node2", "hostname"));
//
// Thread safety: distinct fixtures may be built and destroyed on different threads at once (and
// in different processes, as under `ctest -j`); one fixture is not meant to be shared by threads.
// Needs PM_SOURCE_DIR (the source tree, where hosts.sh lives) defined by the build.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/command.hpp"

namespace pm::test {

/// One fake host, as hosts.env describes it.
struct multihost_host {
  std::string name;   // its hostname and its Host name in ssh_config(): node1, node2, ...
  std::string ip;     // its address on the bridge
  std::string netns;  // its network namespace (ip netns exec NETNS ...)
  std::string veth;   // the main namespace's end of its link (what partition() downs)
  pid_t sshd_pid = 0;
};

/// How to bring the hosts up; the defaults suit most tests. Setters chain:
/// `multihost_options().with_noise_host(2)`.
struct multihost_options {
  int noise_host = 0;        // 1-based: that host's sshd prints noise_line() before each command
  std::string max_startups;  // sshd MaxStartups; empty: 200:30:400
  std::vector<std::string> sshd_options;  // extra sshd_config lines for every host
  std::chrono::seconds timeout{10};       // how long up waits for the sshds
  std::map<int, std::vector<std::string>> host_sshd_options;  // 1-based host: its own lines
  std::map<int, std::string> topologies;  // 1-based host: the hwloc XML it has the shape of

  multihost_options& with_noise_host(int k) {
    noise_host = k;
    return *this;
  }
  multihost_options& with_max_startups(std::string spec) {
    max_startups = std::move(spec);
    return *this;
  }
  multihost_options& with_sshd_option(std::string line) {
    sshd_options.push_back(std::move(line));
    return *this;
  }
  /// An sshd_config line for host k alone.
  multihost_options& with_host_sshd_option(int k, std::string line) {
    host_sshd_options[k].push_back(std::move(line));
    return *this;
  }
  /// Host k has the shape of the machine in `xml` (hwloc's HWLOC_XMLFILE in its ssh sessions:
  /// pmd, its ranks and their PMIx server read that machine instead of this one).
  multihost_options& with_topology(int k, std::string xml) {
    topologies[k] = std::move(xml);
    return *this;
  }
  multihost_options& with_timeout(std::chrono::seconds t) {
    timeout = t;
    return *this;
  }
};

class multihost_fixture {
 public:
  /// Path of hosts.sh in the source tree.
  static std::string script() { return std::string(PM_SOURCE_DIR) + "/tests/multihost/hosts.sh"; }

  /// Why this machine cannot host fake hosts (not root, no sshd, no `ip netns add`), or "" if it
  /// can. Asked once per process.
  static const std::string& unavailable_reason() {
    static const std::string reason = [] {
      auto r = run_command({"/bin/bash", script(), "probe"}, std::chrono::seconds(20));
      if (r.exit_code == 0) return std::string();
      auto text = r.err.empty() ? std::string("hosts.sh probe failed") : r.err;
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text;
    }();
    return reason;
  }
  static bool available() { return unavailable_reason().empty(); }

  /// Runs `hosts.sh up` in a fresh temporary state dir; throws std::runtime_error with hosts.sh's
  /// one-line reason if it fails (nothing of the run is left then).
  explicit multihost_fixture(int hosts = 3, multihost_options options = {})
      : options_(std::move(options)) {
    // A bring-up that fails is tried again (a busy machine, a run of another test reaped at the
    // same moment); each failed attempt is reported on stderr, so a flaky fixture stays visible.
    std::string reasons;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      const std::string why = try_up(hosts);
      if (why.empty()) break;
      std::fprintf(stderr, "multihost fixture: attempt %d: %s\n", attempt, why.c_str());
      reasons += (reasons.empty() ? "" : "; ") + why;
      if (attempt == 3) throw std::runtime_error(reasons);
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * attempt));
    }
    try {
      load(state_dir_ + "/hosts.env");
    } catch (...) {
      down();  // no destructor runs after a throwing constructor
      throw;
    }
  }

  /// Tears the run down (hosts.sh down); a failure there fails the running test.
  ~multihost_fixture() {
    const std::string problem = down();
    if (!problem.empty()) ADD_FAILURE() << problem;
  }

  multihost_fixture(const multihost_fixture&) = delete;
  multihost_fixture& operator=(const multihost_fixture&) = delete;

  /// One `hosts.sh up` in a fresh temporary state dir: "" when the run is up, else the one-line
  /// reason (nothing of the run is left then).
  std::string try_up(int hosts) {
    char dir_template[] = "/tmp/pm-multihost-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return "mkdtemp failed";
    state_dir_ = dir_template;
    std::vector<std::string> argv = {"/bin/bash", script(), "up", "--hosts", std::to_string(hosts)};
    argv.insert(argv.end(), {"--state", state_dir_, "--owner", std::to_string(getpid())});
    argv.insert(argv.end(), {"--timeout", std::to_string(options_.timeout.count())});
    if (options_.noise_host != 0) {
      argv.insert(argv.end(), {"--noise", std::to_string(options_.noise_host)});
    }
    if (!options_.max_startups.empty()) {
      argv.insert(argv.end(), {"--maxstartups", options_.max_startups});
    }
    for (const auto& line : options_.sshd_options) argv.insert(argv.end(), {"--sshd-option", line});
    for (const auto& [k, lines] : options_.host_sshd_options) {
      for (const auto& line : lines) {
        argv.insert(argv.end(), {"--host-sshd-option", std::to_string(k), line});
      }
    }
    for (const auto& [k, xml] : options_.topologies) {
      argv.insert(argv.end(), {"--topology", std::to_string(k), xml});
    }
    const auto r = run_command(argv, options_.timeout + std::chrono::seconds(30));
    if (r.exit_code != 0) {
      // up undoes a half-made run itself, unless it was killed; down covers that case too.
      run_command({"/bin/bash", script(), "down", "--state", state_dir_});
      rmdir(state_dir_.c_str());
      return "hosts.sh up failed" + (r.timed_out ? std::string(" (timed out)") : std::string()) +
             ": " + r.err;
    }
    up_ = true;
    return "";
  }

  /// Tears the run down now; returns "" or what went wrong. Later calls do nothing.
  std::string down() {
    if (!up_) return "";
    up_ = false;
    const auto r = run_command({"/bin/bash", script(), "down", "--state", state_dir_},
                               std::chrono::seconds(60));
    if (r.exit_code != 0) return "hosts.sh down failed: " + r.err;
    return "";
  }

  const std::vector<multihost_host>& hosts() const { return hosts_; }
  const multihost_host& host(std::string_view name) const {
    for (const auto& h : hosts_) {
      if (h.name == name) return h;
    }
    throw std::out_of_range("no host " + std::string(name) + " in this fixture");
  }

  const std::string& ssh_config() const { return value("PM_MH_SSH_CONFIG"); }
  const std::string& bridge_ip() const { return value("PM_MH_BRIDGE_IP"); }  // the test's address
  const std::string& bridge() const { return value("PM_MH_BRIDGE"); }        // interface name
  const std::string& subnet() const { return value("PM_MH_SUBNET"); }        // A.B.C.0/24
  const std::string& run_id() const { return value("PM_MH_RUN_ID"); }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& noise_host() const { return value("PM_MH_NOISE_HOST"); }  // "" if none
  const std::string& noise_line() const { return value("PM_MH_NOISE_LINE"); }
  /// Every KEY="value" of hosts.env (README.md lists them).
  const std::map<std::string, std::string>& env() const { return env_; }

  /// argv of `ssh -F ssh_config() host remote_command`, for run_command.
  std::vector<std::string> ssh_command(std::string_view host,
                                       std::string_view remote_command) const {
    return {"/usr/bin/ssh", "-F", ssh_config(), std::string(host), std::string(remote_command)};
  }

  /// argv that runs `argv` as if on `host` (its network namespace and hostname), without ssh.
  std::vector<std::string> on_host(std::string_view host,
                                   const std::vector<std::string>& argv) const {
    std::vector<std::string> out = {"/bin/bash", script(),          "exec", "--state",
                                    state_dir_,  std::string(host), "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  /// SIGKILL every process on `host`, its sshd included; returns when none is left.
  void crash(std::string_view host) { fault("crash", host); }
  /// Cut `host` off the bridge: its frames are dropped silently, no connection is refused.
  void partition(std::string_view host) { fault("partition", host); }
  /// Undo partition(host).
  void heal(std::string_view host) { fault("heal", host); }

  /// The processes on `host` other than its sshd and the sshd processes serving connections:
  /// empty when nothing a test started is left there.
  std::vector<pid_t> pids_on(std::string_view host) const {
    const auto r = script_command("pids", host);
    std::vector<pid_t> pids;
    std::istringstream lines(r.out);
    for (long pid = 0; lines >> pid;) pids.push_back(static_cast<pid_t>(pid));
    return pids;
  }

 private:
  void load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
      auto v = line.substr(eq + 1);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      env_[line.substr(0, eq)] = v;
    }
    const int n = std::stoi(value("PM_MH_N"));
    for (int k = 1; k <= n; ++k) {
      const auto key = "PM_MH_HOST" + std::to_string(k) + "_";
      hosts_.push_back({value(key + "NAME"), value(key + "IP"), value(key + "NETNS"),
                        value(key + "VETH"),
                        static_cast<pid_t>(std::stol(value(key + "SSHD_PID")))});
    }
  }

  const std::string& value(const std::string& key) const {
    const auto it = env_.find(key);
    if (it == env_.end()) throw std::runtime_error("hosts.env has no " + key);
    return it->second;
  }

  command_result script_command(const char* command, std::string_view host) const {
    auto r = run_command({"/bin/bash", script(), command, "--state", state_dir_, std::string(host)},
                         std::chrono::seconds(30));
    if (r.exit_code != 0) {
      throw std::runtime_error(std::string("hosts.sh ") + command + " failed: " + r.err);
    }
    return r;
  }

  void fault(const char* command, std::string_view host) { script_command(command, host); }

  multihost_options options_;
  std::string state_dir_;
  std::map<std::string, std::string> env_;
  std::vector<multihost_host> hosts_;
  bool up_ = false;
};

/// "node1:N,node2:N,...": every host of the fixture with `slots` slots, for -H.
inline std::string hosts_with_slots(const multihost_fixture& f, int slots) {
  std::string list;
  for (const auto& h : f.hosts())
    list += (list.empty() ? "" : ",") + h.name + ":" + std::to_string(slots);
  return list;
}

/// Waits until no process a test started is left on any host (sshd aside).
inline bool hosts_clean(const multihost_fixture& f,
                        std::chrono::milliseconds within = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    bool any = false;
    for (const auto& h : f.hosts()) any = any || !f.pids_on(h.name).empty();
    if (!any) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// What is left on the hosts, "host: pid cmdline" a line, for a failing hosts_clean.
inline std::string left_on_hosts(const multihost_fixture& f) {
  std::string out;
  for (const auto& h : f.hosts()) {
    for (auto pid : f.pids_on(h.name)) {
      std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
      std::string text((std::istreambuf_iterator<char>(cmd)), {});
      for (char& c : text) c = c == '\0' ? ' ' : c;
      out += h.name + ": " + std::to_string(pid) + " " + text + "\n";
    }
  }
  return out;
}

/// True once every host runs its agent and at least `ranks` ranks. Not that pmrun has heard from
/// every agent: a relayed host's ranks may run before its hello crossed its parent (a test that
/// then cuts a host off waits for the ranks' output instead, as pmrun_tree_test does).
inline bool every_host_busy(const multihost_fixture& f, std::size_t ranks,
                            std::chrono::milliseconds within = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    bool all = true;
    for (const auto& h : f.hosts()) all = all && f.pids_on(h.name).size() >= ranks + 1;
    if (all) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// The lines "rank=R REST" of a job's output, REST by rank.
inline std::map<int, std::string> lines_by_rank(const std::string& out) {
  std::map<int, std::string> lines;
  const std::regex re(R"(rank=(\d+) (.*))");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) lines[std::stoi(m[1])] = m[2];
  }
  return lines;
}

}  // namespace pm::test

/// In a test body: skip (and say why) where fake hosts cannot be made (no root, no sshd).
#define NEED_HOSTS()                                                                             \
  if (!pm::test::multihost_fixture::available()) {                                               \
    GTEST_SKIP() << "no fake hosts here: " << pm::test::multihost_fixture::unavailable_reason(); \
  }
