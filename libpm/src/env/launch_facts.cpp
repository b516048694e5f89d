// Launch-time facts: MASTER_ADDR, MASTER_PORT and node addresses (docs/env-contract.md).
//
// The only impure part of the env contract. It asks the resolver and the kernel, and sends
// nothing: addresses come from getaddrinfo/getifaddrs, the port from a bind that is released.
#include "pm/launch_facts.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pm/error.hpp"

namespace pm {
namespace {

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    return (ntohl(in.sin_addr.s_addr) >> 24) == 127;  // 127.0.0.0/8, Debian's 127.0.1.1 too
  }
  if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    return IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr) != 0 || IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) != 0;
  }
  return true;  // neither IPv4 nor IPv6: never an answer
}

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (getnameinfo(sa, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

// This machine's first non-loopback IPv4 address on an interface that is up.
std::optional<std::string> local_interface_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (auto* it = list; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
    if (is_loopback(it->ifa_addr)) continue;
    auto text = numeric(it->ifa_addr, sizeof(sockaddr_in));
    if (!text.empty()) found = std::move(text);
  }
  freeifaddrs(list);
  return found;
}

// A non-loopback address of a named host from the resolver (hosts file, DNS); IPv4 first,
// since every framework reading MASTER_ADDR takes it, and "addr:port" needs no brackets.
std::optional<std::string> resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return std::nullopt;
  std::optional<std::string> v4;
  std::optional<std::string> v6;
  for (auto* it = res; it != nullptr && !v4; it = it->ai_next) {
    if (is_loopback(it->ai_addr)) continue;
    auto text = numeric(it->ai_addr, it->ai_addrlen);
    if (text.empty()) continue;
    if (it->ai_family == AF_INET) {
      v4 = std::move(text);
    } else if (!v6) {
      v6 = std::move(text);
    }
  }
  freeaddrinfo(res);
  return v4 ? v4 : v6;
}

bool is_numeric_non_loopback(const std::string& name) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return false;
  const bool ok = !is_loopback(res->ai_addr);
  freeaddrinfo(res);
  return ok;
}

// What other hosts use to reach `h`. This machine: the address it was named by (-H 10.0.0.5),
// else its first interface address, without asking the resolver (a hostname missing from
// /etc/hosts would stall on an unreachable name server at every launch). Another host: its name
// resolved, loopback skipped. Else the name itself: the other hosts may still resolve it.
std::string address_of(const host& h, bool local) {
  if (local) {
    if (is_numeric_non_loopback(h.name)) return h.name;
    if (auto a = local_interface_address()) return *a;
  } else if (auto a = resolve(h.name)) {
    return *a;
  }
  return h.name;
}

// A TCP port free on `addr` (a numeric address of this machine): bind port 0, read, release.
std::optional<std::uint16_t> free_port_on(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), "0", &hints, &res) != 0) return std::nullopt;
  std::optional<std::uint16_t> port;
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (bind(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) {
        sockaddr_in in{};
        std::memcpy(&in, &ss, sizeof in);
        port = ntohs(in.sin_port);
      } else if (ss.ss_family == AF_INET6) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, &ss, sizeof in6);
        port = ntohs(in6.sin6_port);
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return port;
}

}  // namespace

launch_facts decide_launch_facts(const rank_map& map, const local_host& me,
                                 std::optional<std::uint16_t> master_port, env_profile profiles) {
  const auto& hosts = map.allocation().hosts;
  auto is_local = [&](const host& h) { return h.local || me.is_me(h.name); };
  launch_facts facts;
  facts.master_addr = "127.0.0.1";
  bool master_local = true;
  if (map.num_nodes() == 1 && is_local(hosts.at(map.host_of_node(0)))) {
    facts.node_addrs = {"127.0.0.1"};  // nothing leaves the machine
  } else if (map.num_nodes() > 0 && map.size() > 0) {
    // Each name is looked up only when a rank will read its address: rank 0's always
    // (MASTER_ADDR), the others only for TF_CONFIG.
    const auto master_node = map.at(0).node;
    const bool every_node = has(profiles, env_profile::tf);
    facts.node_addrs.assign(map.num_nodes(), std::string());
    for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
      if (node != master_node && !every_node) continue;
      const auto& h = hosts.at(map.host_of_node(node));
      facts.node_addrs[node] = address_of(h, is_local(h));
    }
    const auto& rank0 = hosts.at(map.host_of_node(master_node));
    facts.master_addr = facts.node_addrs[master_node];
    master_local = is_local(rank0);
  }
  if (master_port) {
    facts.master_port = *master_port;
    return facts;
  }
  // Rank 0 here: a port free on the very address the ranks will use. Rank 0 elsewhere: a port
  // free on this machine's loopback, a good guess until its agent decides one on that host.
  auto port = master_local ? free_port_on(facts.master_addr) : std::nullopt;
  if (!port) port = free_port_on("127.0.0.1");
  if (!port || *port == 0) {
    throw error(errc::system, "MASTER_PORT: no free TCP port on " + facts.master_addr + ": " +
                                  std::strerror(errno) + " (give one with --master-port)");
  }
  facts.master_port = *port;
  return facts;
}

}  // namespace pm
