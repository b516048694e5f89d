// This machine's IP addresses, read with one netlink address dump. getifaddrs() also dumps every
// link with its statistics (IPv6's counters included), which cost about 7 % of a one-rank
// launch's CPU in pmrun and pmd together; the addresses alone cost a fraction of that.
#pragma once

#include <string>
#include <vector>

namespace pm::sys {

struct interface_address {
  int family = 0;         ///< AF_INET or AF_INET6
  std::string address;    ///< as inet_ntop writes it, e.g. "10.0.0.5", "fe80::1"
  std::string interface;  ///< its interface's name as getifaddrs gives it (IPv4: the label,
                          ///< e.g. "eth0" or "eth0:1")
  bool up = false;        ///< the interface is up (IFF_UP)
  bool loopback = false;  ///< the interface is a loopback one (IFF_LOOPBACK)
};

/// Every IPv4 and IPv6 address of this machine, in the kernel's order, as getifaddrs() lists
/// them (addresses of interfaces that are down included). Falls back to getifaddrs() where
/// netlink cannot be used; empty when neither answers.
std::vector<interface_address> interface_addresses();

/// The same list as getifaddrs() gives it (the fallback; tests compare the two).
std::vector<interface_address> interface_addresses_from_getifaddrs();

}  // namespace pm::sys
