#include "agent/rank_env.hpp"

#include "env/compose.hpp"

namespace pm::agent {

std::vector<std::string> base_environment(const std::vector<std::string>& own,
                                          const std::vector<std::string>& add) {
  const auto base = job_base(own, add);
  std::vector<std::string> out;
  out.reserve(base.size());
  for (const auto& v : base) out.push_back(v.name + "=" + v.value);
  return out;
}

std::vector<std::string> compose_rank_environment(const std::vector<std::string>& base,
                                                  const std::vector<std::string>& profile,
                                                  const std::vector<std::string>& overrides,
                                                  const std::vector<std::string>& app) {
  env_layers l;
  l.base = base;
  l.profile = profile;
  l.exports = overrides;
  l.app = app;
  return compose_environment(l);
}

std::vector<std::string> add_host_variables(const std::vector<std::string>& env,
                                            const std::vector<std::string>& server,
                                            const std::vector<std::string>& defaults) {
  env_layers l;
  l.base = env;
  l.host = server;
  l.defaults = defaults;
  return compose_environment(l);
}

std::string_view find_variable(const std::vector<std::string>& env, std::string_view name) {
  return lookup_variable(env, name).value_or(std::string_view());
}

std::optional<std::string_view> lookup_variable(const std::vector<std::string>& env,
                                                std::string_view name) {
  env_layers l;
  l.base = env;
  return composed_value(l, name);
}

}  // namespace pm::agent
