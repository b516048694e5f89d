// One rank's complete environment: base, then profile variables, then -x overrides.
#include <algorithm>

#include "pm/env.hpp"

namespace pm {

std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                          std::uint32_t rank) {
  auto vars = profile_env(map, rank, env.profiles, env.facts);
  vars.insert(vars.end(), env.overrides.begin(), env.overrides.end());
  std::vector<std::string> out;
  out.reserve(env.base.size() + vars.size());
  // Base entries that a profile variable or an override replaces are left out; the per-rank
  // list is short, so a linear look-up per base entry is cheaper than building a map.
  auto replaced = [&](const std::string& name) {
    return std::any_of(vars.begin(), vars.end(), [&](const env_var& v) { return v.name == name; });
  };
  for (const auto& v : env.base) {
    if (!replaced(v.name)) out.push_back(v.name + "=" + v.value);
  }
  // Later entries win: an override replaces a profile variable of the same name.
  for (std::size_t i = 0; i < vars.size(); ++i) {
    bool later = false;
    for (std::size_t j = i + 1; j < vars.size() && !later; ++j)
      later = vars[j].name == vars[i].name;
    if (!later) out.push_back(vars[i].name + "=" + vars[i].value);
  }
  return out;
}

}  // namespace pm
