// What this machine calls itself: probed once, then passed into the pure functions.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "model/host_name.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "sys/interface_addresses.hpp"

namespace pm {

namespace {

void add_alias(local_host& me, std::string name) {
  if (name.empty() || name == me.hostname) return;
  if (std::find(me.aliases.begin(), me.aliases.end(), name) == me.aliases.end())
    me.aliases.push_back(std::move(name));
}

}  // namespace

bool local_host::is_me(std::string_view name) const {
  if (name.empty()) return false;
  if (name == hostname || name == "localhost" || name == "::1") return true;
  // The whole 127/8 block is loopback (Debian names the host 127.0.1.1).
  if (name.starts_with("127.") && model::is_ip_address(name)) return true;
  if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) return true;
  // node1.example.com names node1 (Open MPI drops the domain unless told to keep it).
  if (model::is_ip_address(name) || model::is_ip_address(hostname)) return false;
  return model::short_name(name) == model::short_name(hostname);
}

local_host local_host_info() {
  local_host me;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) me.hostname = name;
  if (me.hostname.empty()) me.hostname = "localhost";
  add_alias(me, "localhost");
  // The FQDN and other names from /etc/hosts, read directly: getaddrinfo(AI_CANONNAME) would
  // fall through to DNS for a host missing from /etc/hosts, and this runs on every launch
  // (without a reachable name server that stalls for seconds).
  try {
    for (auto& alias : model::hosts_file_names(read_text_file("/etc/hosts"), me.hostname))
      add_alias(me, std::move(alias));
  } catch (const error&) {
    // No /etc/hosts: the short-name rule in is_me still matches FQDN spellings.
  }
  // Every interface address, so that -H 10.0.0.5 names this machine when it has that address.
  for (auto& a : sys::interface_addresses()) add_alias(me, std::move(a.address));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    me.cores = static_cast<std::uint32_t>(CPU_COUNT(&set));
  if (me.cores == 0) me.cores = std::max(1u, std::thread::hardware_concurrency());
  return me;
}

}  // namespace pm
