// A DVM across fake hosts with their own sshd (docs/dvm.md): jobs on kept daemons, a host killed
// between jobs and during one, stop and SIGKILL leaving nothing on any host.
#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/command.hpp"
#include "support/multihost.hpp"
#include "support/processes.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::hosts_clean;
using pm::test::hosts_with_slots;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A DVM on the fixture's hosts, ended by its server's pid whatever the test did.
class dvm_on_hosts {
 public:
  explicit dvm_on_hosts(const multihost_fixture& f) {
    char tmpl[] = "/tmp/pm-dvm-hosts.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    root_ = tmpl;
    setenv("PM_STATUS_DIR", (root_ + "/st").c_str(), 1);
    const auto r = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-mca",
                                "plm_rsh_agent", "ssh -F " + f.ssh_config(), "--dvm", "start", "-H",
                                hosts_with_slots(f, 2), "--report-uri", uri_file()},
                               60s);
    started = r;
    std::smatch m;
    const auto uri = read_file(uri_file());
    if (std::regex_search(uri, m, std::regex(R"(dvm\.(\d+)\.sock)"))) server = std::stoi(m[1]);
  }
  ~dvm_on_hosts() {
    if (server > 0 && pm::test::alive(server)) {
      ::kill(server, SIGTERM);
      if (!pm::test::all_gone({server}, 10s)) ::kill(server, SIGKILL);
    }
    unsetenv("PM_STATUS_DIR");
    std::filesystem::remove_all(root_);
  }
  std::string uri_file() const { return root_ + "/uri"; }
  std::vector<std::string> job(std::vector<std::string> args) const {
    std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root", "--dvm-uri",
                                     "file:" + uri_file()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  nlohmann::json ps() const {
    const auto r = run_command(
        {pm::test::pmrun_path(), "--ps", "--dvm-uri", "file:" + uri_file(), "--json"}, 10s);
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  std::string root_;
  pm::test::command_result started;
  pid_t server = -1;
};

std::string host_state(const nlohmann::json& ps, const std::string& name) {
  for (const auto& h : ps.value("hosts", nlohmann::json::array())) {
    if (h.value("name", "") == name) return h.value("up", false) ? "up" : h.value("lost", "?");
  }
  return "absent";
}

TEST(PmrunDvmHosts, JobsRunOnKeptDaemonsAndALostHostIsDroppedAndNamed) {
  NEED_HOSTS();
  multihost_fixture f(3);
  dvm_on_hosts dvm(f);
  ASSERT_EQ(dvm.started.exit_code, 0) << dvm.started.err;
  for (int round = 0; round < 2; ++round) {
    const auto r = run_command(
        dvm.job({"-np", "6", "sh", "-c", "echo rank=$OMPI_COMM_WORLD_RANK host=$(hostname)"}), 60s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int rank = 0; rank < 6; ++rank) {
      const auto host = "node" + std::to_string(rank / 2 + 1);
      EXPECT_NE(r.out.find("rank=" + std::to_string(rank) + " host=" + host), std::string::npos)
          << r.out;
    }
  }
  // A host killed during a job: the job fails by its policy (213), the DVM drops and names it.
  pm::test::background during(dvm.job({"-np", "6", "sh", "-c", "echo up; exec sleep 60"}));
  during.wait_lines(6);
  f.crash("node2");
  const int status = during.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 213) << status;
  nlohmann::json ps = dvm.ps();
  for (int i = 0; i < 100 && host_state(ps, "node2") == "up"; ++i) {
    std::this_thread::sleep_for(50ms);
    ps = dvm.ps();
  }
  EXPECT_NE(host_state(ps, "node2").find("its daemon"), std::string::npos) << ps.dump();
  EXPECT_EQ(host_state(ps, "node1"), "up");
  // The next jobs run on the hosts left; one that needs the lost host's slots never fits.
  const auto after = run_command(dvm.job({"-np", "4", "hostname"}), 60s);
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out.find("node2"), std::string::npos) << after.out;
  const auto too_big = run_command(dvm.job({"-np", "6", "true"}), 60s);
  EXPECT_EQ(too_big.exit_code, 2) << too_big.err;
  // Stopping it leaves nothing on any host.
  const auto stop = run_command({pm::test::pmrun_path(), "--allow-run-as-root", "--dvm", "stop",
                                 "--dvm-uri", "file:" + dvm.uri_file()},
                                60s);
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

TEST(PmrunDvmHosts, ASigkilledServerLeavesNothingOnAnyHost) {
  NEED_HOSTS();
  multihost_fixture f(2);
  dvm_on_hosts dvm(f);
  ASSERT_EQ(dvm.started.exit_code, 0) << dvm.started.err;
  pm::test::background victim(dvm.job({"-np", "4", "sh", "-c", "echo up; exec sleep 60"}));
  victim.wait_lines(4);
  ::kill(dvm.server, SIGKILL);
  EXPECT_NE(victim.wait_status(), 0);
  EXPECT_TRUE(hosts_clean(f)) << left_on_hosts(f);
}

}  // namespace
