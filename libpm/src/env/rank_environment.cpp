// One rank's environment from the job's env, composed by the one composer (env/compose.hpp).
#include "env/compose.hpp"
#include "pm/env.hpp"

namespace pm {

std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                          std::uint32_t rank) {
  return rank_environment(env, map, rank, host_env{});
}

std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                          std::uint32_t rank, const host_env& host) {
  const auto profile = rank_profile(map, rank, env);
  env_layers l;
  l.base = env.base;
  l.profile = profile;
  l.exports = env.overrides;
  // No app variables at all: skip the placement lookup.
  l.app = env.app_overrides.empty() ? env.app_variables(0) : env.app_variables(map.at(rank).app);
  l.host = host.server;
  l.defaults = host.defaults;
  return compose_environment(l);
}

}  // namespace pm
