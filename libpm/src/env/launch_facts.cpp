#include "pm/launch_facts.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace pm {
namespace {

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return true;
}

std::string numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// This machine's first non-loopback IPv4 address, if any.
std::optional<std::string> local_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (auto* it = list; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr != nullptr && it->ifa_addr->sa_family == AF_INET &&
        !is_loopback(it->ifa_addr)) {
      found = numeric(it->ifa_addr);
    }
  }
  freeifaddrs(list);
  return found;
}

// A non-loopback address of a named host, from the resolver (hosts file, DNS).
std::optional<std::string> resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (auto* it = res; it != nullptr && !found; it = it->ai_next) {
    if (!is_loopback(it->ai_addr)) found = numeric(it->ai_addr);
  }
  freeaddrinfo(res);
  return found;
}

std::string address_of(const host& h) {
  if (h.local) return local_address().value_or("127.0.0.1");
  return resolve(h.name).value_or(h.name);
}

std::uint16_t free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::uint16_t port = 0;
  socklen_t len = sizeof sa;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

launch_facts decide_launch_facts(const rank_map& map, const local_host& me,
                                 std::optional<std::uint16_t> master_port) {
  (void)me;
  launch_facts facts;
  const auto& hosts = map.allocation().hosts;
  if (map.num_nodes() == 1 && hosts[map.host_of_node(0)].local) {
    facts.master_addr = "127.0.0.1";
    facts.node_addrs = {"127.0.0.1"};
  } else {
    for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
      facts.node_addrs.push_back(address_of(hosts[map.host_of_node(node)]));
    }
    facts.master_addr = map.size() > 0 ? facts.node_addrs[map.at(0).node] : "127.0.0.1";
  }
  facts.master_port = master_port.value_or(free_port(
      hosts[map.host_of_node(map.size() > 0 ? map.at(0).node : 0)].local ? facts.master_addr
                                                                         : "127.0.0.1"));
  return facts;
}

}  // namespace pm
