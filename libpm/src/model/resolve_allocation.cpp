// Which hosts a job may use: Open MPI's precedence between managed allocations, hostfiles and -H.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/host_name.hpp"
#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
namespace {

// Two spellings of one machine add up; past 2^32 - 1 that is refused, as a host repeated in one
// list is (model/host_list.cpp), not capped without a word.
std::uint32_t add_slots(std::uint32_t a, std::uint32_t b, const std::string& named,
                        const std::string& again) {
  if (b > UINT32_MAX - a) {
    const std::string also = again == named ? "" : " (" + named + ")";
    throw error(errc::parse,
                text::printable("host '" + again + "'" + also + " adds up to more than " +
                                std::to_string(UINT32_MAX) + " slots (overflow)"));
  }
  return a + b;
}

// One host per machine: local aliases become the hostname; FQDN and short name are one host
// (the first spelling is kept, since it is the one the user wrote first and can reach).
allocation canonical(const allocation& in, const local_host& me) {
  allocation out;
  out.source = in.source;
  std::unordered_map<std::string, std::size_t> index;  // host_key -> position in out
  for (const auto& h : in.hosts) {
    host c = h;
    if (me.is_me(h.name)) {
      c.name = me.hostname;
      c.local = true;
    }
    auto [it, fresh] = index.try_emplace(model::host_key(c.name), out.hosts.size());
    if (fresh) {
      out.hosts.push_back(std::move(c));
      continue;
    }
    host* same = &out.hosts[it->second];
    // One machine is reached one way: "bob@n1" and "n1.example.com" cannot both stand.
    if (const auto conflict = model::reach_conflict(*same, c); !conflict.empty()) {
      throw error(errc::parse, text::printable("host '" + h.name + "' (" + same->name +
                                               ") is listed again " + conflict));
    }
    // Two spellings of one host add up, like repeated entries in Open MPI ("localhost" and
    // "vm" in one hostfile give vm two slots there); the count is then explicit.
    same->slots = add_slots(same->slots, c.slots, same->name, h.name);
    same->max_slots = same->max_slots && c.max_slots
                          ? add_slots(same->max_slots, c.max_slots, same->name, h.name)
                          : 0;
    same->slots_given = true;
    same->local = same->local || c.local;
  }
  return out;
}

// "(n1, n2, n3 and 97 more)": enough of the allocation to see what went wrong, one line always.
std::string summary(const allocation& from) {
  constexpr std::size_t shown = 3;
  std::string s = " (";
  const auto n = from.hosts.size() <= shown + 1 ? from.hosts.size() : shown;
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + from.hosts[i].name;
  if (n < from.hosts.size()) s += " and " + std::to_string(from.hosts.size() - n) + " more";
  return s + ")";
}

// The hosts of `pick`, each of which must be in `from` (same_host rules). Pick's order and slot
// counts apply (mpirun 4.1: hostfile "a slots=4 max_slots=6" with -H a gives a 1 slot, no max);
// a bare hostfile line takes the count `from` gives it. Names are `from`'s spelling: the one the
// batch system or the hostfile knows.
allocation select(const allocation& pick, const allocation& from, const std::string& from_name) {
  std::unordered_map<std::string, const host*> index;
  for (const auto& f : from.hosts) index.try_emplace(model::host_key(f.name), &f);
  allocation out = pick;
  for (auto& h : out.hosts) {
    const auto found = index.find(model::host_key(h.name));
    if (found == index.end()) {
      throw error(errc::allocation,
                  "host '" + h.name + "' is not in the " + from_name + summary(from));
    }
    const host* it = found->second;
    // How ssh reaches the host: the selecting source may say it, else the selected-from one.
    if (!h.user.empty() && !it->user.empty() && h.user != it->user) {
      throw error(errc::allocation,
                  text::printable("host '" + h.name + "' is given with user '" + h.user +
                                  "', the " + from_name + " has user '" + it->user + "'"));
    }
    if (h.port != 0 && it->port != 0 && h.port != it->port) {
      throw error(errc::allocation, "host '" + h.name + "' is given with port " +
                                        std::to_string(h.port) + ", the " + from_name +
                                        " has port " + std::to_string(it->port));
    }
    if (h.user.empty()) h.user = it->user;
    if (h.port == 0) h.port = it->port;
    h.name = it->name;
    h.local = h.local || it->local;
    if (!h.slots_given) {
      h.slots = it->slots;
      h.slots_given = it->slots_given;
    }
  }
  return out;
}

// Inside a batch allocation mpirun 4.1 keeps the allocation's host order whatever order -H or the
// hostfile names them in, and never gives a host more slots than the batch system granted
// (-H n2:8 on a node with 4 tasks shows 4 slots). mpirun ignores a hostfile's counts there; we
// take them, capped the same way, since a user who writes "slots=2" means it.
void fit_to_managed(allocation& chosen, const allocation& managed) {
  std::unordered_map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < managed.hosts.size(); ++i)
    position.try_emplace(model::host_key(managed.hosts[i].name), i);
  std::vector<std::pair<std::size_t, host>> keyed;
  keyed.reserve(chosen.hosts.size());
  for (auto& h : chosen.hosts) {
    const auto at = position.at(model::host_key(h.name));  // select() checked membership
    h.slots = std::min(h.slots, managed.hosts[at].slots);
    keyed.emplace_back(at, std::move(h));
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  chosen.hosts.clear();
  for (auto& [at, h] : keyed) chosen.hosts.push_back(std::move(h));
}

}  // namespace

allocation resolve_allocation(const allocation_inputs& inputs, const local_host& me) {
  std::optional<allocation> managed, hostfile, host_list;
  if (inputs.managed) managed = canonical(*inputs.managed, me);
  if (inputs.hostfile) hostfile = canonical(*inputs.hostfile, me);
  if (inputs.host_list) host_list = canonical(*inputs.host_list, me);

  if (managed) {
    const std::string name = managed->source == allocation_source::pbs     ? "PBS allocation"
                             : managed->source == allocation_source::slurm ? "Slurm allocation"
                                                                           : "allocation";
    if (hostfile) hostfile = select(*hostfile, *managed, name);
    if (host_list && !hostfile) host_list = select(*host_list, *managed, name);
  }
  // The hostfile allocation does not carry its file name; the caller's message context does.
  if (host_list && hostfile) host_list = select(*host_list, *hostfile, "hostfile");

  std::optional<allocation> chosen = host_list ? host_list : hostfile ? hostfile : managed;
  if (managed && (host_list || hostfile)) fit_to_managed(*chosen, *managed);
  if (!chosen) {
    allocation local;
    local.source = allocation_source::implicit_local;
    local.hosts.push_back(host{me.hostname, me.cores, 0, true, true});
    return local;
  }
  // A bare hostfile line for this machine: its cores (remote ones learn theirs from the agent).
  for (auto& h : chosen->hosts) {
    if (h.local && !h.slots_given) h.slots = std::max<std::uint32_t>(1, me.cores);
  }
  return *chosen;
}

}  // namespace pm
