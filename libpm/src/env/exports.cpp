// The job's environment: inherited minus outer identity, plus -mca and -x exports.
#include <algorithm>

#include "pm/env.hpp"
#include "pm/error.hpp"

namespace pm {

bool is_valid_env_name(std::string_view name) noexcept {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

namespace {

void set(std::vector<env_var>& list, std::string name, std::string value) {
  for (auto& v : list) {
    if (v.name == name) {
      v.value = std::move(value);
      return;
    }
  }
  list.push_back({std::move(name), std::move(value)});
}

}  // namespace

job_env make_job_env(const env_map& inherited, const env_exports& exports, env_profile profiles,
                     launch_facts facts) {
  job_env env;
  env.profiles = profiles;
  env.facts = std::move(facts);
  env.base.reserve(inherited.size() + exports.mca.size());
  for (const auto& [name, value] : inherited) {
    if (!is_outer_job_identity(name)) env.base.push_back({name, value});
  }
  for (const auto& [key, value] : exports.mca) {
    const bool ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!ok) throw error(errc::env, "-mca '" + key + "': invalid parameter name");
    set(env.base, "OMPI_MCA_" + key, value);
  }
  for (const auto& x : exports.x) {
    const auto eq = x.find('=');
    const std::string name = x.substr(0, eq);
    if (!is_valid_env_name(name)) {
      throw error(errc::env, "-x '" + x + "': invalid variable name '" + name + "'");
    }
    if (eq != std::string::npos) {
      set(env.overrides, name, x.substr(eq + 1));
    } else if (auto it = inherited.find(name); it != inherited.end()) {
      set(env.overrides, name, it->second);
    }  // an unset VAR is not exported, as mpirun does
  }
  return env;
}

}  // namespace pm
