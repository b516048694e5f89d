// Allocations: from -H strings, hostfiles, the Slurm/PBS environment, or host by host.
#include <algorithm>
#include <cstring>
#include <memory>

#include "guard.hpp"
#include "handles.hpp"

namespace pm::c {

const pm::local_host& me() {
  static const pm::local_host info = pm::local_host_info();
  return info;
}

namespace {

// What pmrun does with the input alone: local aliases merged into this machine's hostname.
pm::allocation resolved(pm::allocation parsed, bool from_hostfile) {
  pm::allocation_inputs inputs;
  if (from_hostfile)
    inputs.hostfile = std::move(parsed);
  else
    inputs.host_list = std::move(parsed);
  return pm::resolve_allocation(inputs, me());
}

int hand_out(pm_allocation** out, pm::allocation value) {
  *out = new pm_allocation{std::move(value)};
  return PM_OK;
}

}  // namespace
}  // namespace pm::c

using namespace pm::c;

extern "C" {

int pm_allocation_new(pm_allocation** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    pm::allocation a;
    a.source = pm::allocation_source::api;
    return hand_out(out, std::move(a));
  });
}

int pm_allocation_local(pm_allocation** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    return hand_out(out, pm::resolve_allocation({}, me()));
  });
}

int pm_allocation_from_hosts(pm_allocation** out, const char* hosts) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "hosts", hosts);
    return hand_out(out, resolved(pm::parse_host_list(hosts, "-H"), false));
  });
}

int pm_allocation_from_hostfile(pm_allocation** out, const char* path) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "path", path);
    return hand_out(out, resolved(pm::parse_hostfile(pm::read_text_file(path), path), true));
  });
}

int pm_allocation_from_hostfile_text(pm_allocation** out, const char* text, const char* name) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "text", text);
    return hand_out(out,
                    resolved(pm::parse_hostfile(text, name != nullptr ? name : "hostfile"), true));
  });
}

int pm_allocation_from_environment(pm_allocation** out, const char* const* envp) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    const auto env = envp != nullptr ? to_env_map(envp) : pm::current_environment();
    auto managed = pm::managed_allocation(env, pm::read_text_file);
    if (!managed) {
      throw pm::error(pm::errc::allocation,
                      "no Slurm or PBS allocation in the environment (SLURM_JOB_NODELIST, "
                      "PBS_NODEFILE)");
    }
    return hand_out(out, std::move(*managed));
  });
}

void pm_allocation_destroy(pm_allocation* allocation) {
  delete allocation;
}

int pm_allocation_add_host(pm_allocation* allocation, const char* name, uint32_t slots,
                           uint32_t max_slots) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "allocation", allocation);
    require(fn, "name", name);
    if (*name == '\0') invalid(fn, "the host name is empty");
    // A blank, a newline or another control character would break every one-line message (and
    // is no host's name; the name is not echoed for that reason); IPv6 literals and user@host
    // stay as this call always took them.
    if (std::any_of(name, name + std::strlen(name),
                    [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
      invalid(fn, "invalid host name: it holds a blank or a control character");
    }
    if (slots == 0) invalid(fn, std::string("host '") + name + "': slots must be at least 1");
    if (max_slots != 0 && max_slots < slots) {
      invalid(fn, std::string("host '") + name + "': max_slots " + std::to_string(max_slots) +
                      " is below slots " + std::to_string(slots));
    }
    auto& a = allocation->value;
    if (a.find(name)) {
      throw pm::error(pm::errc::allocation,
                      std::string("host '") + name + "' is already in the allocation");
    }
    pm::host h;
    h.name = name;
    h.slots = slots;
    h.max_slots = max_slots;
    h.local = me().is_me(name);
    // One host per machine, as pm_allocation_from_hosts merges "localhost,127.0.0.1": two
    // spellings of this machine would be two hosts, each with an agent of its own (a launch
    // refused them, naming this machine's address as another host).
    const auto other =
        std::find_if(a.hosts.begin(), a.hosts.end(), [](const pm::host& x) { return x.local; });
    if (h.local && other != a.hosts.end()) {
      throw pm::error(pm::errc::allocation,
                      std::string("host '") + name +
                          "' is this machine, in the allocation already as '" + other->name + "'");
    }
    a.hosts.push_back(std::move(h));
    return PM_OK;
  });
}

int pm_allocation_host_count(const pm_allocation* allocation, size_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "allocation", allocation);
    require(fn, "out", out);
    *out = allocation->value.hosts.size();
    return PM_OK;
  });
}

int pm_allocation_host(const pm_allocation* allocation, size_t index, pm_host* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "allocation", allocation);
    require(fn, "out", out);
    check_version(fn, "pm_host", out->version, PM_HOST_VERSION);
    const auto& hosts = allocation->value.hosts;
    if (index >= hosts.size()) {
      invalid(fn, "host " + std::to_string(index) + " is outside the allocation (" +
                      std::to_string(hosts.size()) + " hosts)");
    }
    const auto& h = hosts[index];
    out->name = h.name.c_str();
    out->slots = h.slots;
    out->max_slots = h.max_slots;
    out->local = h.local ? 1 : 0;
    if (out->version >= 2) {  // a version-1 caller's struct ends before these fields
      out->user = h.user.empty() ? nullptr : h.user.c_str();
      out->port = h.port;
    }
    return PM_OK;
  });
}

int pm_allocation_total_slots(const pm_allocation* allocation, uint64_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "allocation", allocation);
    require(fn, "out", out);
    *out = allocation->value.total_slots();
    return PM_OK;
  });
}

int pm_allocation_source_of(const pm_allocation* allocation, pm_allocation_source* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "allocation", allocation);
    require(fn, "out", out);
    switch (allocation->value.source) {
      case pm::allocation_source::implicit_local:
        *out = PM_SOURCE_LOCAL;
        break;
      case pm::allocation_source::host_list:
        *out = PM_SOURCE_HOST_LIST;
        break;
      case pm::allocation_source::hostfile:
        *out = PM_SOURCE_HOSTFILE;
        break;
      case pm::allocation_source::slurm:
        *out = PM_SOURCE_SLURM;
        break;
      case pm::allocation_source::pbs:
        *out = PM_SOURCE_PBS;
        break;
      case pm::allocation_source::api:
        *out = PM_SOURCE_API;
        break;
    }
    return PM_OK;
  });
}

}  // extern "C"
