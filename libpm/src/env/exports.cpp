// The job's environment: inherited minus outer identity, plus -mca and -x exports.
#include <algorithm>
#include <unordered_map>

#include "env/compose.hpp"
#include "pm/env.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {

namespace {

bool is_word_char(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

// Replaces or appends: the first spelling keeps its place, the last value wins. `places` holds
// each name's place in `list` (thousands of -x exports stay linear).
void set(std::vector<env_var>& list, std::unordered_map<std::string, std::size_t>& places,
         std::string name, std::string value) {
  const auto [it, fresh] = places.try_emplace(name, list.size());
  if (!fresh) {
    list[it->second].value = std::move(value);
    return;
  }
  list.push_back({std::move(name), std::move(value)});
}

}  // namespace

bool is_valid_env_name(std::string_view name) noexcept {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), is_word_char);
}

job_env make_job_env(const env_map& inherited, const env_exports& exports, env_profile profiles,
                     launch_facts facts) {
  job_env env;
  env.profiles = profiles;
  env.facts = std::move(facts);
  std::vector<env_var> own;
  own.reserve(inherited.size());
  for (const auto& [name, value] : inherited) own.push_back({name, value});
  std::vector<env_var> mca;
  mca.reserve(exports.mca.size());
  for (const auto& [key, value] : exports.mca) {
    if (key.empty() || !std::all_of(key.begin(), key.end(), is_word_char)) {
      // Quoted with control characters spelled out: the message stays one line.
      throw error(errc::env, "-mca '" + text::printable(key) + "': invalid parameter name");
    }
    mca.push_back({"OMPI_MCA_" + key, value});  // replaces an inherited OMPI_MCA_key
  }
  env.base = job_base(own, mca);
  std::unordered_map<std::string, std::size_t> places;
  for (const auto& x : exports.x) {
    const auto eq = x.find('=');
    const std::string name = x.substr(0, eq);
    if (!is_valid_env_name(name)) {
      throw error(errc::env, "-x '" + text::printable(x) + "': invalid variable name '" +
                                 text::printable(name) + "'");
    }
    if (eq != std::string::npos) {
      set(env.overrides, places, name,
          x.substr(eq + 1));  // the value may hold anything, '=' included
    } else if (auto it = inherited.find(name); it != inherited.end()) {
      set(env.overrides, places, name, it->second);
    }  // -x VAR with VAR unset exports nothing, as mpirun does
  }
  return env;
}

}  // namespace pm
