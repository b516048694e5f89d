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
#include "support/dvm_on_hosts.hpp"
#include "support/multihost.hpp"
#include "support/processes.hpp"

namespace {

using namespace std::chrono_literals;
using pm::test::dvm_on_hosts;
using pm::test::hosts_clean;
using pm::test::hosts_with_slots;
using pm::test::left_on_hosts;
using pm::test::multihost_fixture;
using pm::test::run_command;

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
  // A host killed during a job: the job fails (213 when its link notices first; a rank's end
  // when its agent saw that first, as in a cold launch), and the DVM drops and names the host.
  pm::test::background during(dvm.job({"-np", "6", "sh", "-c", "echo up; exec sleep 60"}));
  during.wait_lines(6);
  f.crash("node2");
  const int status = during.wait_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
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
  // A host killed between jobs: dropped and named too; jobs go on the last host.
  f.crash("node3");
  for (int i = 0; i < 100 && host_state(ps, "node3") == "up"; ++i) {
    std::this_thread::sleep_for(50ms);
    ps = dvm.ps();
  }
  EXPECT_NE(host_state(ps, "node3").find("its daemon"), std::string::npos) << ps.dump();
  const auto last = run_command(dvm.job({"-np", "2", "hostname"}), 60s);
  EXPECT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(last.out, "node1\nnode1\n");
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
