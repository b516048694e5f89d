// What this machine calls itself: probed once, then passed into the pure functions.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "pm/allocation.hpp"

namespace pm {

namespace {
bool is_ip(std::string_view name) {
  return !name.empty() &&
         name.find_first_not_of("0123456789.:abcdefABCDEF") == std::string_view::npos &&
         (name.find('.') != std::string_view::npos || name.find(':') != std::string_view::npos) &&
         name.find_first_of("0123456789") != std::string_view::npos;
}
std::string_view short_name(std::string_view name) {
  return name.substr(0, name.find('.'));
}
}  // namespace

bool local_host::is_me(std::string_view name) const {
  if (name == hostname || name == "localhost" || name.starts_with("127.") || name == "::1")
    return true;
  if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) return true;
  // node1.example.com names node1 (Open MPI drops the domain unless told to keep it).
  return !is_ip(name) && !is_ip(hostname) && short_name(name) == short_name(hostname);
}

local_host local_host_info() {
  local_host me;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) me.hostname = name;
  if (me.hostname.empty()) me.hostname = "localhost";
  me.aliases.push_back("localhost");
  // No resolver look-up here: it is on every launch's path, and without a reachable name server
  // it can stall for seconds. A fully qualified spelling of this host still matches through its
  // short name (is_me).
  // Every interface address.
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (auto* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (it->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf,
                  sizeof buf);
      } else if (it->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr, buf,
                  sizeof buf);
      } else {
        continue;
      }
      if (std::find(me.aliases.begin(), me.aliases.end(), buf) == me.aliases.end())
        me.aliases.emplace_back(buf);
    }
    freeifaddrs(list);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    me.cores = static_cast<std::uint32_t>(CPU_COUNT(&set));
  if (me.cores == 0) me.cores = std::max(1u, std::thread::hardware_concurrency());
  return me;
}

}  // namespace pm
