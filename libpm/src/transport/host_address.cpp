#include "transport/host_address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <optional>

namespace pm::net {

namespace {

struct entry {
  std::string addr;
  std::string ifname;
};

entry split(const std::string& s) {
  const auto pct = s.find('%');
  if (pct == std::string::npos) return {s, {}};
  return {s.substr(0, pct), s.substr(pct + 1)};
}

std::optional<std::uint32_t> ipv4(const std::string& text) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

}  // namespace

std::optional<std::string> source_toward(const std::string& to) {
  const auto dst = ipv4(to);
  if (!dst) return std::nullopt;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);
  sa.sin_addr.s_addr = htonl(*dst);
  std::optional<std::string> found;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      char buf[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf) != nullptr) found = buf;
    }
  }
  ::close(fd);
  return found;
}

bool address_matches(const std::string& address, const std::string& ifname,
                     const std::string& filter) {
  const auto slash = filter.find('/');
  if (slash == std::string::npos) {
    return filter == ifname || filter == address;
  }
  const auto net = ipv4(filter.substr(0, slash));
  const auto addr = ipv4(address);
  unsigned bits = 0;
  const char* first = filter.data() + slash + 1;
  const char* last = filter.data() + filter.size();
  const auto [end, ec] = std::from_chars(first, last, bits);
  if (!net || !addr || ec != std::errc() || end != last || bits > 32) return false;
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return (*net & mask) == (*addr & mask);
}

std::string pick_address(const link::hello& agent, const std::vector<std::string>& iface,
                         const std::vector<const link::hello*>& others) {
  std::vector<entry> mine;
  for (const auto& a : agent.addrs) mine.push_back(split(a));
  if (!iface.empty()) {
    for (const auto& e : mine) {
      for (const auto& f : iface) {
        if (address_matches(e.addr, e.ifname, f)) return e.addr;
      }
    }
  }
  for (const auto* other : others) {
    if (other == nullptr || other->addrs.empty()) continue;
    if (const auto src = source_toward(split(other->addrs.front()).addr)) {
      for (const auto& e : mine) {
        if (e.addr == *src) return e.addr;
      }
    }
    break;
  }
  if (!mine.empty()) return mine.front().addr;
  return agent.hostname;
}

}  // namespace pm::net
