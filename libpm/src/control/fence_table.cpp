#include "control/fence_table.hpp"

#include <algorithm>

#include "pm/error.hpp"

namespace pm::control {

fence_table::fence_table(const rank_map& map) : map_(map) {}

fence_table::fence fence_table::make(const link::fence_members& members) const {
  fence f;
  if (members.all) {
    for (std::uint32_t n = 0; n < map_.num_nodes(); ++n) f.nodes.push_back(n);
  } else {
    for (const auto r : members.ranks) {
      if (r >= map_.size()) {
        throw error(errc::launch, "PMIx fence names rank " + std::to_string(r) + " of a job of " +
                                      std::to_string(map_.size()));
      }
      f.nodes.push_back(map_.at(r).node);
    }
    std::sort(f.nodes.begin(), f.nodes.end());
    f.nodes.erase(std::unique(f.nodes.begin(), f.nodes.end()), f.nodes.end());
  }
  f.parts.resize(f.nodes.size());
  f.missing = f.nodes.size();
  return f;
}

std::optional<fence_table::outcome> fence_table::contribute(std::uint32_t host,
                                                            const link::fence_contribution& c) {
  const auto key = std::make_pair(c.members, c.seq);
  auto it = fences_.find(key);
  if (it == fences_.end()) it = fences_.emplace(key, make(c.members)).first;
  fence& f = it->second;
  const auto slot = std::find_if(f.nodes.begin(), f.nodes.end(),
                                 [&](std::uint32_t n) { return map_.host_of_node(n) == host; });
  const std::string which = "fence " + std::to_string(c.seq) + " of " +
                            (c.members.all ? std::string("all ranks")
                                           : std::to_string(c.members.ranks.size()) + " ranks");
  if (slot == f.nodes.end()) {
    throw error(errc::launch, "host " + map_.allocation().hosts.at(host).name +
                                  " contributed to PMIx " + which + " without ranks in it");
  }
  auto& part = f.parts[static_cast<std::size_t>(slot - f.nodes.begin())];
  if (part) {
    throw error(errc::launch, "host " + map_.allocation().hosts.at(host).name +
                                  " contributed twice to PMIx " + which);
  }
  part = c.data;
  f.collect = f.collect || c.collect;
  if (--f.missing > 0) return std::nullopt;
  outcome o;
  o.result.members = c.members;
  o.result.seq = c.seq;
  o.result.ok = true;
  for (std::size_t i = 0; i < f.nodes.size(); ++i) {
    o.hosts.push_back(map_.host_of_node(f.nodes[i]));
    if (f.collect) o.result.data += *f.parts[i];
  }
  fences_.erase(it);
  return o;
}

std::vector<fence_table::outcome> fence_table::host_lost(std::uint32_t host) {
  std::vector<outcome> failed;
  for (auto it = fences_.begin(); it != fences_.end();) {
    const fence& f = it->second;
    const bool involved = std::any_of(f.nodes.begin(), f.nodes.end(), [&](std::uint32_t n) {
      return map_.host_of_node(n) == host;
    });
    if (!involved) {
      ++it;
      continue;
    }
    outcome o;
    o.result.members = it->first.first;
    o.result.seq = it->first.second;
    o.result.ok = false;
    for (std::size_t i = 0; i < f.nodes.size(); ++i) {
      const auto h = map_.host_of_node(f.nodes[i]);
      if (h != host && f.parts[i]) o.hosts.push_back(h);
    }
    failed.push_back(std::move(o));
    it = fences_.erase(it);
  }
  return failed;
}

}  // namespace pm::control
