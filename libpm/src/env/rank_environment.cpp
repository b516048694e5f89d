// One rank's complete environment: base, then profile variables, then -x overrides, then the
// variables of the rank's app context.
//
// Built for every rank at spawn, so it must stay cheap (~60 inherited variables: a few µs). The
// later entries (profiles + overrides, ~30) go into a small flat table with a 64-bit filter on
// (length, last character); a base entry is looked up only when the filter says it may be there.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "pm/env.hpp"

namespace pm {

namespace {

std::uint64_t filter_bit(std::string_view name) noexcept {
  const auto last = name.empty() ? 0u : static_cast<unsigned char>(name.back());
  return std::uint64_t{1} << ((name.size() * 7 + last) & 63);
}

std::string join(const env_var& v) {
  std::string s;
  s.reserve(v.name.size() + 1 + v.value.size());
  s.append(v.name).push_back('=');
  s.append(v.value);
  return s;
}

}  // namespace

std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                          std::uint32_t rank) {
  const auto profile = profile_env(map, rank, env.profiles, env.facts);
  const auto& app = env.app_overrides.empty() ? env.app_variables(0)  // none: skip the lookup
                                              : env.app_variables(map.at(rank).app);
  // The later entries in order: profile variables, then overrides, then the app's variables.
  std::vector<const env_var*> later;
  later.reserve(profile.size() + env.overrides.size() + app.size());
  for (const auto& v : profile) later.push_back(&v);
  for (const auto& v : env.overrides) later.push_back(&v);
  for (const auto& v : app) later.push_back(&v);

  std::uint64_t filter = 0;
  for (const auto* v : later) filter |= filter_bit(v->name);
  auto named_in = [&](std::string_view name, std::size_t from) {
    for (std::size_t i = from; i < later.size(); ++i) {
      if (later[i]->name == name) return true;
    }
    return false;
  };

  // make_job_env's base is sorted with unique names. A base built by hand may repeat a name:
  // then only its last spelling is kept (found with a hash map, off the fast path).
  std::vector<bool> shadowed;
  const bool unique =
      std::adjacent_find(env.base.begin(), env.base.end(), [](const env_var& a, const env_var& b) {
        return a.name >= b.name;
      }) == env.base.end();
  if (!unique) {
    std::unordered_map<std::string_view, std::size_t> last;
    for (std::size_t i = 0; i < env.base.size(); ++i) last[env.base[i].name] = i;
    shadowed.resize(env.base.size());
    for (std::size_t i = 0; i < env.base.size(); ++i) shadowed[i] = last[env.base[i].name] != i;
  }

  std::vector<std::string> out;
  out.reserve(env.base.size() + later.size());
  for (std::size_t i = 0; i < env.base.size(); ++i) {
    const auto& v = env.base[i];
    if (!unique && shadowed[i]) continue;
    if ((filter & filter_bit(v.name)) != 0 && named_in(v.name, 0)) continue;  // replaced later
    out.push_back(join(v));
  }
  // A later entry of the same name wins (an -x override over a profile variable, an app's own
  // variable over both). Overrides and app variables are few, so the filter is cheap.
  std::uint64_t override_filter = 0;
  for (const auto& v : env.overrides) override_filter |= filter_bit(v.name);
  for (const auto& v : app) override_filter |= filter_bit(v.name);
  for (std::size_t i = 0; i < later.size(); ++i) {
    const auto& name = later[i]->name;
    if ((override_filter & filter_bit(name)) != 0 && named_in(name, i + 1)) continue;
    out.push_back(join(*later[i]));
  }
  return out;
}

}  // namespace pm
