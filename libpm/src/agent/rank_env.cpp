#include "agent/rank_env.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "pm/env.hpp"

namespace pm::agent {

namespace {

std::string_view name_of(std::string_view entry) {
  const auto eq = entry.find('=');
  return eq == std::string_view::npos ? std::string_view() : entry.substr(0, eq);
}

}  // namespace

std::vector<std::string> base_environment(const std::vector<std::string>& own,
                                          const std::vector<std::string>& add) {
  std::map<std::string_view, const std::string*> by_name;
  for (const auto& e : own) {
    const auto name = name_of(e);
    if (name.empty() || is_outer_job_identity(name)) continue;
    by_name[name] = &e;
  }
  for (const auto& e : add) {
    const auto name = name_of(e);
    if (!name.empty()) by_name[name] = &e;
  }
  std::vector<std::string> out;
  out.reserve(by_name.size());
  for (const auto& [name, entry] : by_name) out.push_back(*entry);
  return out;
}

std::vector<std::string> compose_rank_environment(const std::vector<std::string>& base,
                                                  const std::vector<std::string>& profile,
                                                  const std::vector<std::string>& overrides,
                                                  const std::vector<std::string>& app) {
  if (profile.empty() && overrides.empty() && app.empty()) return base;
  // The later lists are short (a few dozen): the last entry of each name wins.
  std::unordered_map<std::string_view, const std::string*> later;
  std::vector<std::string_view> order;
  for (const auto* list : {&profile, &overrides, &app}) {
    for (const auto& e : *list) {
      const auto name = name_of(e);
      if (name.empty()) continue;
      auto [it, fresh] = later.try_emplace(name, &e);
      if (fresh) {
        order.push_back(name);
      } else {
        it->second = &e;
      }
    }
  }
  std::vector<std::string> out;
  out.reserve(base.size() + order.size());
  for (const auto& e : base) {
    if (!later.contains(name_of(e))) out.push_back(e);
  }
  for (const auto name : order) out.push_back(*later[name]);
  return out;
}

std::string_view find_variable(const std::vector<std::string>& env, std::string_view name) {
  return lookup_variable(env, name).value_or(std::string_view());
}

std::optional<std::string_view> lookup_variable(const std::vector<std::string>& env,
                                                std::string_view name) {
  for (auto it = env.rbegin(); it != env.rend(); ++it) {
    if (name_of(*it) == name) return std::string_view(*it).substr(name.size() + 1);
  }
  return std::nullopt;
}

}  // namespace pm::agent
