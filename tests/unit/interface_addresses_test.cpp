// This machine's addresses from one netlink address dump (sys/interface_addresses.hpp): the same
// list as getifaddrs, here and in a network namespace of our own with a labelled address and an
// interface that is down.
#include "sys/interface_addresses.hpp"

#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

namespace {

using pm::sys::interface_address;

using row = std::tuple<int, std::string, std::string, bool, bool>;

std::vector<row> rows(const std::vector<interface_address>& list) {
  std::vector<row> out;
  for (const auto& a : list) out.emplace_back(a.family, a.address, a.interface, a.up, a.loopback);
  std::sort(out.begin(), out.end());
  return out;
}

const interface_address* find(const std::vector<interface_address>& list, const std::string& a) {
  for (const auto& e : list) {
    if (e.address == a) return &e;
  }
  return nullptr;
}

TEST(InterfaceAddresses, AreWhatGetifaddrsLists) {
  const auto dumped = pm::sys::interface_addresses();
  EXPECT_EQ(rows(dumped), rows(pm::sys::interface_addresses_from_getifaddrs()));
  const auto* lo = find(dumped, "127.0.0.1");
  ASSERT_NE(lo, nullptr) << "this machine's loopback address is listed";
  EXPECT_EQ(lo->family, AF_INET);
  EXPECT_TRUE(lo->loopback);
  EXPECT_TRUE(lo->up);
  EXPECT_EQ(lo->interface, "lo");
}

// In a network namespace of its own (root only): an address with a label, as `ip addr ... label`
// gives (getifaddrs names it by the label), and one on an interface that is down.
TEST(InterfaceAddresses, NameLabelsAndTellInterfacesThatAreDown) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs iproute2's ip";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(77);
    if (std::system("ip link set lo up && ip addr add 10.250.1.2/32 dev lo label lo:pm && "
                    "ip link add pmdummy0 type veth peer name pmdummy1 && "
                    "ip addr add 192.0.2.5/24 dev pmdummy0 && "
                    "ip -6 addr add 2001:db8::5/64 dev pmdummy0 >/dev/null 2>&1") != 0) {
      ::_exit(77);  // no veth interfaces here
    }
    const auto dumped = pm::sys::interface_addresses();
    if (rows(dumped) != rows(pm::sys::interface_addresses_from_getifaddrs())) ::_exit(1);
    const auto* labelled = find(dumped, "10.250.1.2");
    if (labelled == nullptr || labelled->interface != "lo:pm" || !labelled->up ||
        !labelled->loopback) {
      ::_exit(2);
    }
    const auto* down = find(dumped, "192.0.2.5");
    if (down == nullptr || down->interface != "pmdummy0" || down->up || down->loopback) ::_exit(3);
    const auto* six = find(dumped, "2001:db8::5");
    if (six == nullptr || six->family != AF_INET6 || six->interface != "pmdummy0") ::_exit(4);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no network namespace with a veth pair here";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: the lists differ, 2: the label, 3: the interface that is down, 4: IPv6";
}

}  // namespace
