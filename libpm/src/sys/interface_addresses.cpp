#include "sys/interface_addresses.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

namespace pm::sys {

namespace {

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

std::string address_text(int family, const void* bytes) {
  char text[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(family, bytes, text, sizeof text) == nullptr) return {};
  return text;
}

// A device's name and flags by its index, asked of the kernel with two ioctls on any socket.
struct device {
  unsigned index = 0;
  std::string name;
  short flags = 0;
};

device device_of(int fd, unsigned index) {
  device d;
  d.index = index;
  ifreq req{};
  req.ifr_ifindex = static_cast<int>(index);
  if (::ioctl(fd, SIOCGIFNAME, &req) != 0) return d;
  d.name.assign(req.ifr_name, ::strnlen(req.ifr_name, sizeof req.ifr_name));
  if (::ioctl(fd, SIOCGIFFLAGS, &req) == 0) d.flags = req.ifr_flags;
  return d;
}

// One RTM_GETADDR dump. nullopt: netlink could not be used (the caller falls back).
std::optional<std::vector<interface_address>> dump_addresses() {
  fd_guard sock{::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)};
  if (sock.fd < 0) return std::nullopt;
  struct {
    nlmsghdr header;
    ifaddrmsg body;
  } request{};
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = RTM_GETADDR;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request.header.nlmsg_seq = 1;
  request.body.ifa_family = AF_UNSPEC;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(sock.fd, &request, sizeof request, 0, reinterpret_cast<const sockaddr*>(&kernel),
               sizeof kernel) != static_cast<ssize_t>(sizeof request)) {
    return std::nullopt;
  }
  std::vector<interface_address> out;
  std::vector<device> devices;  // a few: looked up once each
  // The kernel fills a read up to the reader's largest buffer (at least a page): 32 KiB holds
  // one; a longer datagram (MSG_TRUNC says its length) is read by getifaddrs instead.
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    const ssize_t n = ::recv(sock.fd, buf, sizeof buf, MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || static_cast<std::size_t>(n) > sizeof buf) return std::nullopt;
    // The netlink macros cast in C's way; these walk the same layout (4-byte aligned records).
    const auto align = [](std::size_t len) { return (len + 3) & ~std::size_t{3}; };
    std::size_t at = 0;
    const auto total = static_cast<std::size_t>(n);
    while (at + sizeof(nlmsghdr) <= total) {
      const auto* h = reinterpret_cast<const nlmsghdr*>(buf + at);
      if (h->nlmsg_len < sizeof(nlmsghdr) || h->nlmsg_len > total - at) break;
      at += align(h->nlmsg_len);
      if (h->nlmsg_seq != request.header.nlmsg_seq) continue;
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) return std::nullopt;
      if (h->nlmsg_type != RTM_NEWADDR) continue;
      const char* body = reinterpret_cast<const char*>(h) + align(sizeof(nlmsghdr));
      const std::size_t body_len = h->nlmsg_len - align(sizeof(nlmsghdr));
      if (body_len < sizeof(ifaddrmsg)) continue;
      const auto* msg = reinterpret_cast<const ifaddrmsg*>(body);
      if (msg->ifa_family != AF_INET && msg->ifa_family != AF_INET6) continue;
      const void* local = nullptr;
      const void* address = nullptr;
      const char* label = nullptr;
      std::size_t attr_at = align(sizeof(ifaddrmsg));
      while (attr_at + sizeof(rtattr) <= body_len) {
        const auto* a = reinterpret_cast<const rtattr*>(body + attr_at);
        if (a->rta_len < sizeof(rtattr) || a->rta_len > body_len - attr_at) break;
        const char* data = reinterpret_cast<const char*>(a) + align(sizeof(rtattr));
        const std::size_t data_len = a->rta_len - align(sizeof(rtattr));
        const std::size_t needed = msg->ifa_family == AF_INET ? 4 : 16;
        if (a->rta_type == IFA_LOCAL && data_len >= needed) local = data;
        if (a->rta_type == IFA_ADDRESS && data_len >= needed) address = data;
        if (a->rta_type == IFA_LABEL && data_len > 0 && data[data_len - 1] == '\0') label = data;
        attr_at += align(a->rta_len);
      }
      // On a point-to-point link IFA_ADDRESS is the peer's; IFA_LOCAL is ours (as getifaddrs).
      const void* ours = local != nullptr ? local : address;
      if (ours == nullptr) continue;
      interface_address entry;
      entry.family = msg->ifa_family;
      entry.address = address_text(msg->ifa_family, ours);
      if (entry.address.empty()) continue;
      const device* dev = nullptr;
      for (const auto& d : devices) {
        if (d.index == msg->ifa_index) dev = &d;
      }
      if (dev == nullptr) dev = &devices.emplace_back(device_of(sock.fd, msg->ifa_index));
      entry.interface = label != nullptr ? std::string(label) : dev->name;
      entry.up = (dev->flags & IFF_UP) != 0;
      entry.loopback = (dev->flags & IFF_LOOPBACK) != 0;
      out.push_back(std::move(entry));
    }
  }
}

}  // namespace

std::vector<interface_address> interface_addresses_from_getifaddrs() {
  std::vector<interface_address> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    const int family = it->ifa_addr->sa_family;
    interface_address entry;
    entry.family = family;
    if (family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, it->ifa_addr, sizeof in);  // no cast through an unrelated pointer type
      entry.address = address_text(family, &in.sin_addr);
    } else if (family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, it->ifa_addr, sizeof in6);
      entry.address = address_text(family, &in6.sin6_addr);
    }
    if (entry.address.empty()) continue;
    entry.interface = it->ifa_name != nullptr ? it->ifa_name : "";
    entry.up = (it->ifa_flags & IFF_UP) != 0;
    entry.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(entry));
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<interface_address> interface_addresses() {
  if (auto dumped = dump_addresses()) return std::move(*dumped);
  return interface_addresses_from_getifaddrs();
}

}  // namespace pm::sys
