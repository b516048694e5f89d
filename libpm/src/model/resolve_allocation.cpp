// Which hosts a job may use: Open MPI's precedence between managed allocations, hostfiles and -H.
#include <algorithm>
#include <string>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace pm {
namespace {

bool is_ip(std::string_view name) {
  return !name.empty() && name.find_first_not_of("0123456789.") == std::string_view::npos;
}
std::string_view short_name(std::string_view name) {
  return is_ip(name) ? name : name.substr(0, name.find('.'));
}

// One host per machine: local aliases become the hostname; FQDN and short name are one host.
allocation canonical(const allocation& in, const local_host& me) {
  allocation out;
  out.source = in.source;
  for (const auto& h : in.hosts) {
    host c = h;
    if (me.is_me(h.name)) {
      c.name = me.hostname;
      c.local = true;
      if (!c.slots_given) c.slots = me.cores;  // a bare hostfile line: this machine's cores
    }
    auto same = std::find_if(out.hosts.begin(), out.hosts.end(), [&](const host& o) {
      return o.name == c.name || (!is_ip(o.name) && short_name(o.name) == short_name(c.name));
    });
    if (same == out.hosts.end()) {
      out.hosts.push_back(std::move(c));
    } else {
      // Two spellings of one host: their slots add up, as Open MPI's repeated entries do.
      same->slots += c.slots;
      same->max_slots = same->max_slots && c.max_slots ? same->max_slots + c.max_slots : 0;
      same->slots_given = same->slots_given || c.slots_given;
    }
  }
  return out;
}

// The hosts of `pick` that are in `from`, with pick's slot counts; any other host is an error.
allocation select(const allocation& pick, const allocation& from, const std::string& from_name) {
  allocation out = pick;
  for (auto& h : out.hosts) {
    auto it = std::find_if(from.hosts.begin(), from.hosts.end(), [&](const host& f) {
      return f.name == h.name || (!is_ip(f.name) && short_name(f.name) == short_name(h.name));
    });
    if (it == from.hosts.end()) {
      throw error(errc::allocation, "host '" + h.name + "' is not in the " + from_name);
    }
    h.name = it->name;
    h.local = it->local;
    if (!h.slots_given) {
      h.slots = it->slots;  // a bare line inherits the slots its source gave
      h.slots_given = it->slots_given;
    }
    if (h.max_slots == 0) h.max_slots = it->max_slots;
  }
  return out;
}

}  // namespace

allocation resolve_allocation(const allocation_inputs& inputs, const local_host& me) {
  std::optional<allocation> managed, hostfile, host_list;
  if (inputs.managed) managed = canonical(*inputs.managed, me);
  if (inputs.hostfile) hostfile = canonical(*inputs.hostfile, me);
  if (inputs.host_list) host_list = canonical(*inputs.host_list, me);

  std::optional<allocation> chosen;
  if (hostfile && host_list)
    chosen = select(*host_list, *hostfile, "hostfile");
  else if (hostfile)
    chosen = hostfile;
  else if (host_list)
    chosen = host_list;

  if (managed) {
    const std::string name =
        managed->source == allocation_source::slurm ? "Slurm allocation" : "PBS allocation";
    return chosen ? select(*chosen, *managed, name) : *managed;
  }
  if (chosen) return *chosen;
  allocation local;
  local.source = allocation_source::implicit_local;
  local.hosts.push_back(host{me.hostname, me.cores, 0, true, true});
  return local;
}

}  // namespace pm
