// The one composer of a rank's environment (compose.hpp has the precedence order).
//
// Run for every rank at spawn, so it must stay cheap (~60 base variables: a few µs). The later
// entries (profile, exports, app, host: ~30) sit in a small flat table behind a 64-bit filter on
// (length, last character): a base entry is looked up only when the filter says it may be there.
#include "env/compose.hpp"

#include <algorithm>
#include <unordered_map>

namespace pm {

namespace {

std::uint64_t filter_bit(std::string_view name) noexcept {
  const auto last = name.empty() ? 0u : static_cast<unsigned char>(name.back());
  return std::uint64_t{1} << ((name.size() * 7 + last) & 63);
}

struct entry {
  std::string_view name;
  const env_list* list;
  std::size_t index;
};

// The later layers' entries, in precedence order (nameless ones dropped).
std::vector<entry> later_entries(const env_layers& l) {
  std::vector<entry> later;
  later.reserve(l.profile.size() + l.exports.size() + l.app.size() + l.host.size());
  for (const auto* list : {&l.profile, &l.exports, &l.app, &l.host}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto name = list->name(i);
      if (!name.empty()) later.push_back({name, list, i});
    }
  }
  return later;
}

// The last value `name` has in `list`, if any.
std::optional<std::string_view> last_in(const env_list& list, std::string_view name) {
  for (std::size_t i = list.size(); i-- > 0;) {
    if (list.name(i) == name) return list.value(i);
  }
  return std::nullopt;
}

}  // namespace

std::string_view env_list::name(std::size_t i) const noexcept {
  if (pairs_ != nullptr) return pairs_[i].name;
  const std::string_view s = strings_[i];
  const auto eq = s.find('=');
  return eq == std::string_view::npos ? std::string_view() : s.substr(0, eq);
}

std::string_view env_list::value(std::size_t i) const noexcept {
  if (pairs_ != nullptr) return pairs_[i].value;
  const std::string_view s = strings_[i];
  const auto eq = s.find('=');
  return eq == std::string_view::npos ? std::string_view() : s.substr(eq + 1);
}

std::string env_list::joined(std::size_t i) const {
  if (strings_ != nullptr) return strings_[i];
  const auto& v = pairs_[i];
  std::string s;
  s.reserve(v.name.size() + 1 + v.value.size());
  s.append(v.name).push_back('=');
  s.append(v.value);
  return s;
}

std::vector<std::string> compose_environment(const env_layers& l) {
  const auto later = later_entries(l);
  std::uint64_t filter = 0;    // every later name
  std::uint64_t repeated = 0;  // later names that may appear twice
  for (const auto& e : later) {
    const auto bit = filter_bit(e.name);
    if ((filter & bit) != 0) repeated |= bit;
    filter |= bit;
  }
  // Past a few dozen later entries (thousands of -x exports) the filter passes every name and the
  // scans below would make it quadratic: each later name's last place, in a hash map, keeps it
  // linear (off the fast path).
  const bool many = later.size() > 64;
  std::unordered_map<std::string_view, std::size_t> last_later;
  if (many) {
    last_later.reserve(later.size());
    for (std::size_t i = 0; i < later.size(); ++i) last_later[later[i].name] = i;
  }
  auto named_in = [&](std::string_view name, std::size_t from) {
    if (many) {
      const auto it = last_later.find(name);
      return it != last_later.end() && it->second >= from;
    }
    for (std::size_t i = from; i < later.size(); ++i) {
      if (later[i].name == name) return true;
    }
    return false;
  };

  // job_base's base is sorted with unique names. Another (the agent's composed environment, a
  // job_env built by hand) may repeat a name: then its last spelling is kept (found with a hash
  // map, off the fast path).
  const auto& base = l.base;
  bool sorted_unique = true;
  for (std::size_t i = 1; i < base.size() && sorted_unique; ++i) {
    sorted_unique = base.name(i - 1) < base.name(i);
  }
  std::vector<bool> shadowed;
  if (!sorted_unique) {
    std::unordered_map<std::string_view, std::size_t> last;
    for (std::size_t i = 0; i < base.size(); ++i) last[base.name(i)] = i;
    shadowed.resize(base.size());
    for (std::size_t i = 0; i < base.size(); ++i) shadowed[i] = last[base.name(i)] != i;
  }

  std::vector<std::string> out;
  out.reserve(base.size() + later.size() + l.defaults.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    const auto name = base.name(i);
    if (name.empty() || (!sorted_unique && shadowed[i])) continue;
    if ((filter & filter_bit(name)) != 0 && named_in(name, 0)) continue;  // replaced later
    out.push_back(base.joined(i));
  }
  // A later entry stands where its name's last (winning) entry stands.
  for (std::size_t i = 0; i < later.size(); ++i) {
    const auto& e = later[i];
    if ((repeated & filter_bit(e.name)) != 0 && named_in(e.name, i + 1)) continue;
    out.push_back(e.list->joined(e.index));
  }
  // Defaults: only names no layer set (nor an earlier default). They are few (three at most).
  for (std::size_t i = 0; i < l.defaults.size(); ++i) {
    const auto name = l.defaults.name(i);
    if (name.empty() || last_in(base, name) ||
        ((filter & filter_bit(name)) != 0 && named_in(name, 0))) {
      continue;
    }
    bool earlier = false;
    for (std::size_t j = 0; j < i && !earlier; ++j) earlier = l.defaults.name(j) == name;
    if (!earlier) out.push_back(l.defaults.joined(i));
  }
  return out;
}

std::optional<std::string_view> composed_value(const env_layers& l, std::string_view name) {
  if (name.empty()) return std::nullopt;
  for (const auto* list : {&l.host, &l.app, &l.exports, &l.profile, &l.base}) {
    if (auto v = last_in(*list, name)) return v;
  }
  for (std::size_t i = 0; i < l.defaults.size(); ++i) {
    if (l.defaults.name(i) == name) return l.defaults.value(i);
  }
  return std::nullopt;
}

std::vector<env_var> job_base(env_list own, env_list additions) {
  struct view {
    std::string_view name, value;
  };
  std::vector<view> all;
  all.reserve(own.size() + additions.size());
  for (std::size_t i = 0; i < own.size(); ++i) {
    const auto name = own.name(i);
    if (!name.empty() && !is_outer_job_identity(name)) all.push_back({name, own.value(i)});
  }
  for (std::size_t i = 0; i < additions.size(); ++i) {
    const auto name = additions.name(i);
    if (!name.empty()) all.push_back({name, additions.value(i)});
  }
  // Stable: of one name, the last given stays last, and is the one kept.
  std::stable_sort(all.begin(), all.end(),
                   [](const view& a, const view& b) { return a.name < b.name; });
  std::vector<env_var> out;
  out.reserve(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i + 1 < all.size() && all[i + 1].name == all[i].name) continue;
    out.push_back({std::string(all[i].name), std::string(all[i].value)});
  }
  return out;
}

std::vector<env_var> rank_profile(const rank_map& map, std::uint32_t rank, const job_env& env,
                                  std::optional<std::uint64_t> universe_slots) {
  auto vars = profile_env(map, rank, env.profiles, env.facts);
  if (universe_slots) {
    for (auto& v : vars) {
      if (v.name == "OMPI_UNIVERSE_SIZE") v.value = std::to_string(*universe_slots);
    }
  }
  return vars;
}

std::string program_path(const job_env& env, std::uint32_t app) {
  env_layers l;
  l.base = env.base;
  l.exports = env.overrides;
  l.app = env.app_variables(app);
  // An empty PATH is no PATH (as the agent looks the program up).
  const auto path = composed_value(l, "PATH").value_or(std::string_view());
  return std::string(path.empty() ? default_program_path : path);
}

}  // namespace pm
