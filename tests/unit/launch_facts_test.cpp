// decide_launch_facts: MASTER_ADDR, MASTER_PORT and node addresses. Remote hosts are named by
// numeric addresses (documentation ranges), so that no test asks a name server.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "pm/launch_facts.hpp"

namespace {

pm::rank_map map_of(std::vector<pm::host> hosts, std::uint32_t np,
                    pm::map_by by = pm::map_by::slot) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = std::move(hosts);
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping.by = by;
  return pm::map_job(j, a);
}

pm::local_host me() {
  pm::local_host m;
  m.hostname = "pm-test-self";
  return m;
}

// True when a TCP socket binds `addr`:`port` now: the address is this machine's and the port
// was released.
bool can_bind(const std::string& addr, std::uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  close(fd);
  return ok;
}

bool has_non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (auto* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr != nullptr && it->ifa_addr->sa_family == AF_INET &&
        (it->ifa_flags & IFF_UP) != 0 && (it->ifa_flags & IFF_LOOPBACK) == 0)
      found = true;
  }
  freeifaddrs(list);
  return found;
}

TEST(LaunchFacts, OneLocalHostStaysOnLoopback) {
  pm::host h{"pm-test-self", 2};
  const auto map = map_of({h}, 2);  // local by name (me().is_me), host::local left false
  const auto facts = pm::decide_launch_facts(map, me(), std::nullopt);
  EXPECT_EQ(facts.master_addr, "127.0.0.1");
  EXPECT_EQ(facts.node_addrs, std::vector<std::string>{"127.0.0.1"});
  EXPECT_GT(facts.master_port, 0);
  EXPECT_TRUE(can_bind("127.0.0.1", facts.master_port));  // free, and released again
}

TEST(LaunchFacts, FlaggedLocalHostAndLocalhostAlias) {
  pm::host flagged{"whatever", 1};
  flagged.local = true;
  EXPECT_EQ(pm::decide_launch_facts(map_of({flagged}, 1), me(), 1).master_addr, "127.0.0.1");
  EXPECT_EQ(pm::decide_launch_facts(map_of({pm::host{"localhost", 4}}, 3), me(), 1).node_addrs,
            std::vector<std::string>{"127.0.0.1"});
}

TEST(LaunchFacts, GivenPortIsUsedAsIs) {
  const auto map = map_of({pm::host{"localhost", 2}}, 2);
  EXPECT_EQ(pm::decide_launch_facts(map, me(), 29500).master_port, 29500);
  EXPECT_EQ(pm::decide_launch_facts(map, me(), 65535).master_port, 65535);
}

TEST(LaunchFacts, FreePortsAreReleased) {
  // Two decisions in a row: each port was handed out by the kernel and released again.
  const auto map = map_of({pm::host{"localhost", 2}}, 2);
  const auto a = pm::decide_launch_facts(map, me(), std::nullopt).master_port;
  const auto b = pm::decide_launch_facts(map, me(), std::nullopt).master_port;
  EXPECT_TRUE(can_bind("127.0.0.1", a));
  EXPECT_TRUE(can_bind("127.0.0.1", b));
}

TEST(LaunchFacts, OneRemoteHostUsesItsAddress) {
  const auto facts = pm::decide_launch_facts(map_of({pm::host{"192.0.2.77", 2}}, 2), me(), 4000);
  EXPECT_EQ(facts.master_addr, "192.0.2.77");
  EXPECT_EQ(facts.node_addrs, std::vector<std::string>{"192.0.2.77"});
  EXPECT_EQ(facts.master_port, 4000);
}

TEST(LaunchFacts, RankZeroHereAmongSeveralHostsIsNeverLoopback) {
  if (!has_non_loopback_ipv4()) GTEST_SKIP() << "no non-loopback IPv4 interface";
  const auto map = map_of({pm::host{"localhost", 1}, pm::host{"198.51.100.7", 1}}, 2);
  const auto facts = pm::decide_launch_facts(map, me(), std::nullopt);
  ASSERT_EQ(facts.node_addrs.size(), 2u);
  EXPECT_EQ(facts.node_addrs[1], "198.51.100.7");
  EXPECT_EQ(facts.master_addr, facts.node_addrs[0]);
  EXPECT_FALSE(facts.master_addr.starts_with("127.")) << facts.master_addr;
  // It is an IPv4 address of this machine, and the port is free on it.
  EXPECT_TRUE(can_bind(facts.master_addr, 0)) << facts.master_addr;
  EXPECT_TRUE(can_bind(facts.master_addr, facts.master_port));
}

TEST(LaunchFacts, LocalHostNamedByItsAddressKeepsThatAddress) {
  if (!has_non_loopback_ipv4()) GTEST_SKIP() << "no non-loopback IPv4 interface";
  const auto probe = pm::decide_launch_facts(
      map_of({pm::host{"localhost", 1}, pm::host{"192.0.2.9", 1}}, 2), me(), 1);
  pm::host self{probe.master_addr, 1};
  self.local = true;
  const auto facts = pm::decide_launch_facts(map_of({pm::host{"192.0.2.9", 1}, self}, 2), me(), 1);
  EXPECT_EQ(facts.node_addrs, (std::vector<std::string>{"192.0.2.9", probe.master_addr}));
}

TEST(LaunchFacts, RankZeroElsewhere) {
  // Rank 0 on the remote host: its address; the port still comes from this machine.
  const auto map = map_of({pm::host{"203.0.113.5", 1}, pm::host{"203.0.113.6", 1}}, 2);
  const auto facts = pm::decide_launch_facts(map, me(), std::nullopt);
  EXPECT_EQ(facts.master_addr, "203.0.113.5");
  EXPECT_EQ(facts.node_addrs, (std::vector<std::string>{"203.0.113.5", "203.0.113.6"}));
  EXPECT_GT(facts.master_port, 0);
}

TEST(LaunchFacts, NodesAreTheHostsTheJobUses) {
  // -H a:2,b:2,c:2 -np 3 by slot: the first two hosts only; by node: all three.
  const std::vector<pm::host> hosts = {pm::host{"192.0.2.1", 2}, pm::host{"192.0.2.2", 2},
                                       pm::host{"192.0.2.3", 2}};
  EXPECT_EQ(pm::decide_launch_facts(map_of(hosts, 3), me(), 1).node_addrs,
            (std::vector<std::string>{"192.0.2.1", "192.0.2.2"}));
  EXPECT_EQ(pm::decide_launch_facts(map_of(hosts, 3, pm::map_by::node), me(), 1).node_addrs,
            (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "192.0.2.3"}));
}

TEST(LaunchFacts, FactsFeedEveryRankTheSameMaster) {
  const auto map = map_of({pm::host{"192.0.2.1", 2}, pm::host{"192.0.2.2", 2}}, 4);
  const auto facts = pm::decide_launch_facts(map, me(), 29400);
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    const auto v = pm::profile_env(map, r, pm::env_profile::azureml, facts);
    EXPECT_EQ(v[0], (pm::env_var{"AZ_BATCH_MASTER_NODE", "192.0.2.1:29400"}));
  }
}

}  // namespace
