// One rank's environment: the env contract's variables, decided once per map.
#include <algorithm>

#include "guard.hpp"
#include "handles.hpp"
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

}  // namespace pm::c

using namespace pm::c;

extern "C" {

int pm_rank_env(char*** out, const pm_map* map, uint32_t rank) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    if (rank >= map->map.size()) {
      invalid(fn, "rank " + std::to_string(rank) + " is outside the job (" +
                      std::to_string(map->map.size()) + " ranks)");
    }
    *out = copy_strings(rank_env(*map, rank));
    return PM_OK;
  });
}

}  // extern "C"
