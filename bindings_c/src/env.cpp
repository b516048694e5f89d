// One rank's environment: the env contract's variables, decided once per map.
#include <algorithm>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/host_binding.hpp"
#include "pm/launch_facts.hpp"

namespace pm::c {

static_assert(pm::decided_at_launch == PM_ENV_DECIDED_AT_LAUNCH);

pm::env_map to_env_map(const char* const* envp) {
  pm::env_map env;
  for (const auto& entry : to_strings(envp)) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.insert_or_assign(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

const pm::job_env& decided_env(const pm_map& map) {
  // MASTER_ADDR/PORT are decided once (a free port is bound and released), so that every rank's
  // env, asked for or launched, names the same ones. call_once retries after an exception.
  std::call_once(map.facts_once, [&] {
    map.env.facts = pm::decide_launch_facts(map.map, me(), map.master_port, map.env.profiles);
  });
  return map.env;
}

std::vector<std::string> rank_env(const pm_map& map, std::uint32_t rank) {
  // A C API launch gives its ranks PMIx (pm_run_start): what their agent's server and settings
  // add is part of what they get.
  return pm::rank_environment(decided_env(map), map.map, rank,
                              pm::predicted_host_env(map.map, rank));
}

namespace {

// Adds the rank's device variables where a launch puts them: in the profile layer
// (launch/host_plans.cpp's add_binding), so they replace the base and the host's defaults, and
// the -x exports and the app's own variables win over them (env/compose.hpp's order).
void add_device_env(std::vector<std::string>& env, const pm_map& map, std::uint32_t rank,
                    const std::vector<std::pair<std::string, std::string>>& devices) {
  const auto& jenv = decided_env(map);
  const auto& app = jenv.app_variables(map.map.at(rank).app);
  const auto user_set = [&](const std::string& name) {
    const auto named = [&](const pm::env_var& v) { return v.name == name; };
    return std::any_of(jenv.overrides.begin(), jenv.overrides.end(), named) ||
           std::any_of(app.begin(), app.end(), named);
  };
  for (const auto& [name, value] : devices) {
    if (user_set(name)) continue;
    const auto prefix = name + "=";
    const auto entry = prefix + value;
    const auto it = std::find_if(env.begin(), env.end(),
                                 [&](const std::string& e) { return e.starts_with(prefix); });
    if (it != env.end())
      *it = entry;
    else
      env.push_back(entry);
  }
}

}  // namespace

}  // namespace pm::c

using namespace pm::c;

extern "C" {

int pm_rank_env(char*** out, const pm_map* map, uint32_t rank) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    check_rank(fn, rank, map->map.size());
    *out = copy_strings(rank_env(*map, rank));
    return PM_OK;
  });
}

int pm_rank_env_on_host(char*** out, char** cpus, const pm_map* map, uint32_t rank,
                        const char* summary) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    require(fn, "summary", summary);
    check_rank(fn, rank, map->map.size());
    const auto topology = pm::topo::topology_from_text(summary);
    // The rank's host only: its plan depends on that host's shape and rank count alone.
    const auto& place = map->map.at(rank);
    const auto& host = map->map.allocation().hosts.at(place.host);
    const auto count = static_cast<std::uint32_t>(map->map.ranks_on_host(place.host).size());
    const auto& policy = map->mapping.host;
    const auto plan = pm::topo::plan_host(topology, host.name, count, policy);
    auto env = rank_env(*map, rank);
    add_device_env(env, *map, rank,
                   pm::topo::rank_environment(topology, plan, place.local_rank, policy.gpus));
    // Both results are built before either is handed out: nothing leaks on a failure.
    char* cpu_text =
        cpus != nullptr ? copy_string(pm::topo::cpu_list(plan.cpus(place.local_rank))) : nullptr;
    try {
      *out = copy_strings(env);
    } catch (...) {
      pm_free(cpu_text);
      throw;
    }
    if (cpus != nullptr) *cpus = cpu_text;
    return PM_OK;
  });
}

}  // extern "C"
