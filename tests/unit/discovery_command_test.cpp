// --host-discovery-script's two halves: what its output means (pm::parse_discovered_hosts) and
// how pmrun runs it (driver/discovery_command.hpp): real /bin/sh processes, their ends, their
// time bound, and nothing left behind when the launch ends first.
#include "driver/discovery_command.hpp"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "support/scratch_dir.hpp"

namespace {

using namespace std::chrono_literals;
using discovery = pm::launch::launcher::discovery;

TEST(DiscoveredHosts, OneHostAndItsSlotsALineCommentsAndBlanksSkipped) {
  const auto hosts = pm::parse_discovered_hosts("# up now\nnode1:4\n\n  node2  \r\nbob@node3:2\n");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "node1");
  EXPECT_EQ(hosts[0].slots, 4u);
  EXPECT_EQ(hosts[1].name, "node2");
  EXPECT_EQ(hosts[1].slots, 1u);
  EXPECT_EQ(hosts[2].user, "bob");
  EXPECT_TRUE(pm::parse_discovered_hosts("").empty());
  EXPECT_TRUE(pm::parse_discovered_hosts("# nothing\n\n").empty());
}

TEST(DiscoveredHosts, AnythingElseNamesItsLine) {
  const auto refused = [](const char* text) {
    try {
      pm::parse_discovered_hosts(text);
    } catch (const pm::error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused("node1:2\nnode2 slots=4\n"), "line 2: 'node2 slots=4' is not host[:slots]");
  EXPECT_EQ(refused("a,b\n"), "line 1: 'a,b' is not host[:slots]");
  EXPECT_NE(refused("node1:zero\n").find("invalid slot count 'zero'"), std::string::npos);
  EXPECT_NE(refused("node1:0\n").find("invalid slot count '0'"), std::string::npos);
}

// Runs `command` to its end (or `bound`) and returns what it found.
discovery run(const std::string& command, std::chrono::milliseconds bound = 5s) {
  boost::asio::io_context io;
  std::optional<discovery> got;
  pm::driver::discovery_command c(io, command, bound, [&](discovery d) { got = std::move(d); });
  io.run_for(bound + 5s);
  EXPECT_TRUE(got);
  return got.value_or(discovery{});
}

// Running: a zombie whose parent (the killed shell) is gone waits for whoever reaps orphans here.
bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_text, comm, state;
  if (!(in >> pid_text >> comm >> state)) return false;
  return state != "Z";
}

pid_t read_pid(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

TEST(DiscoveryCommand, WhatItPrintsAreTheHostsAndThisMachineIsLocal) {
  const auto d = run("printf 'node7:2\\nlocalhost:3\\n'");
  EXPECT_EQ(d.failure, "");
  ASSERT_EQ(d.hosts.size(), 2u);
  EXPECT_EQ(d.hosts[0].name, "node7");
  EXPECT_FALSE(d.hosts[0].local);
  EXPECT_TRUE(d.hosts[1].local);
  EXPECT_EQ(d.hosts[1].name, pm::local_host_info().hostname);
  EXPECT_EQ(d.hosts[1].slots, 3u);
}

TEST(DiscoveryCommand, AFailingCommandOrGarbageIsOneLine) {
  EXPECT_EQ(run("echo node1:2; exit 3").failure, "'echo node1:2; exit 3' exited with code 3");
  EXPECT_EQ(run("echo 'node1 node2'").failure,
            "'echo 'node1 node2'' printed line 1: 'node1 node2' is not host[:slots]");
  EXPECT_EQ(run("kill -9 $$").failure, "'kill -9 $$' was killed by SIGKILL");
  EXPECT_TRUE(run("/nonexistent/discover").failure.find("exited with code 127") !=
              std::string::npos);
}

TEST(DiscoveryCommand, OneNotDoneInTimeIsKilledWithWhatItStarted) {
  pm::test::scratch_dir dir("pm-discovery");
  const auto pidfile = dir.file("pid");
  const auto start = std::chrono::steady_clock::now();
  // A child of its own that holds its stdout open: the whole group goes.
  const auto d = run("sleep 30 & echo $! > " + pidfile + "; wait", 300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(d.failure,
            "'sleep 30 & echo $! > " + pidfile + "; wait' was not done within 300 ms (killed)");
  const auto child = read_pid(pidfile);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 100 && alive(child); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(child));
}

TEST(DiscoveryCommand, ALaunchThatEndsFirstLeavesNothingBehind) {
  pm::test::scratch_dir dir("pm-discovery");
  const auto pidfile = dir.file("pid");
  boost::asio::io_context io;
  bool called = false;
  pid_t shell = 0;
  {
    pm::driver::discovery_command c(io, "echo $$ > " + pidfile + "; sleep 30", 10s,
                                    [&](discovery) { called = true; });
    io.run_for(200ms);
    shell = read_pid(pidfile);
    ASSERT_GT(shell, 0);
    EXPECT_TRUE(alive(shell));
  }
  io.run_for(100ms);
  EXPECT_FALSE(called);
  EXPECT_FALSE(alive(shell));  // killed and reaped: not even a zombie
}

}  // namespace
