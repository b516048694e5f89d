// From a parsed command line to the allocation and job it asks for (Open MPI's precedence).
#include <algorithm>

#include "model/parse_util.hpp"
#include "pm/command_line.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
namespace {

bool is_ip(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= '0' && c <= '9') || c == '.' || c == ':';
  });
}

std::string_view short_name(std::string_view name) {
  return is_ip(name) ? name : name.substr(0, name.find('.'));
}

// The allocation's name for a host the user spelled `name`.
std::optional<std::string> allocation_name(const allocation& alloc, const local_host& me,
                                           std::string_view name) {
  for (const auto& h : alloc.hosts) {
    if (h.name == name) return h.name;
  }
  for (const auto& h : alloc.hosts) {
    if (h.local && me.is_me(name)) return h.name;
    if (!is_ip(name) && short_name(h.name) == short_name(name)) return h.name;
  }
  return std::nullopt;
}

// The option a host list was given with, as the user spelled it (-H, --host, -host).
std::string option_of(const run_options& options, const std::string& text) {
  for (std::size_t i = 0; i < options.host_lists.size(); ++i) {
    if (options.host_lists[i] == text && i < options.host_list_options.size())
      return options.host_list_options[i];
  }
  return "-H";
}

}  // namespace

resolved_job resolve_job(const run_options& options, const env_map& env, const local_host& me,
                         const file_reader& read) {
  allocation_inputs inputs;
  auto launcher = options.remote.launcher;
  // --launcher local: this machine only, whatever batch allocation we run in.
  if (launcher != launcher_choice::local) inputs.managed = managed_allocation(env, read);
  const bool in_slurm = env.contains("SLURM_JOB_ID") && inputs.managed &&
                        inputs.managed->source == allocation_source::slurm;
  if (launcher == launcher_choice::srun && !in_slurm) {
    throw error(errc::usage,
                "--launcher srun: not inside a Slurm allocation (no SLURM_JOB_ID and node list)");
  }
  if (launcher == launcher_choice::automatic) {
    launcher = in_slurm ? launcher_choice::srun : launcher_choice::ssh;
  }
  if (options.hostfile)
    inputs.hostfile = parse_hostfile(read(*options.hostfile), *options.hostfile);
  if (!options.host_lists.empty()) {
    // The union of every segment's -H: a host named twice keeps its larger slot count.
    allocation merged;
    merged.source = allocation_source::host_list;
    for (const auto& text : options.host_lists) {
      const auto option = option_of(options, text);
      for (auto& h : parse_host_list(text, option).hosts) {
        auto it = std::find_if(merged.hosts.begin(), merged.hosts.end(),
                               [&](const host& m) { return m.name == h.name; });
        if (it == merged.hosts.end()) {
          merged.hosts.push_back(h);
          continue;
        }
        if (const auto conflict = model::reach_conflict(*it, h); !conflict.empty()) {
          throw error(errc::parse, text::printable(option + " '" + text + "': host '" + h.name +
                                                   "' is listed again " + conflict));
        }
        it->slots = std::max(it->slots, h.slots);
      }
    }
    inputs.host_list = std::move(merged);
  }

  resolved_job out{resolve_allocation(inputs, me), options.job,
                   resolve_remote_options(options.remote, env)};
  out.remote.launcher = launcher;
  if (launcher == launcher_choice::local) {
    for (const auto& h : out.alloc.hosts) {
      if (!h.local) {
        throw error(errc::usage, text::printable("--launcher local runs every rank on this "
                                                 "machine; host '" +
                                                 h.name + "' is not this machine"));
      }
    }
  }
  if (out.job.apps.size() == 1) {
    out.job.apps[0].hosts.clear();  // one app: its -H is the allocation itself
    return out;
  }
  for (auto& app : out.job.apps) {
    std::vector<std::string> names;
    for (const auto& text : app.hosts) {
      const auto option = option_of(options, text);
      for (const auto& h : parse_host_list(text, option).hosts) {
        auto name = allocation_name(out.alloc, me, h.name);
        if (!name) {
          throw error(errc::allocation,
                      option + " '" + text + "': host '" + h.name + "' is not in the allocation");
        }
        names.push_back(*name);
      }
    }
    app.hosts = std::move(names);
  }
  return out;
}

}  // namespace pm
