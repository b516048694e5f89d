#include "control/fence_table.hpp"

#include <algorithm>

#include "pm/error.hpp"

namespace pm::control {

fence_table::fence_table(const rank_map& map, process_host spawned)
    : map_(map), spawned_(std::move(spawned)) {}

std::uint64_t fence_table::order_of(std::uint32_t host) const {
  if (const auto node = map_.node_of_host(host)) return *node;
  return std::uint64_t{map_.num_nodes()} + host;
}

fence_table::fence fence_table::make(const link::fence_members& members) const {
  fence f;
  if (members.all) {
    for (std::uint32_t n = 0; n < map_.num_nodes(); ++n) f.hosts.push_back(map_.host_of_node(n));
  } else {
    for (const auto r : members.ranks) {
      std::optional<std::uint32_t> host;
      if (r < map_.size()) {
        host = map_.at(r).host;
      } else if (spawned_) {
        host = spawned_(r);
      }
      if (!host) {
        throw error(errc::launch, "PMIx fence names process " + std::to_string(r) +
                                      ", which the launch does not have");
      }
      f.hosts.push_back(*host);
    }
    std::sort(f.hosts.begin(), f.hosts.end(),
              [&](std::uint32_t a, std::uint32_t b) { return order_of(a) < order_of(b); });
    f.hosts.erase(std::unique(f.hosts.begin(), f.hosts.end()), f.hosts.end());
  }
  f.parts.resize(f.hosts.size());
  f.missing = f.hosts.size();
  return f;
}

std::optional<fence_table::outcome> fence_table::contribute(std::uint32_t host,
                                                            const link::fence_contribution& c) {
  const auto key = std::make_pair(c.members, c.seq);
  auto it = fences_.find(key);
  if (it == fences_.end()) it = fences_.emplace(key, make(c.members)).first;
  fence& f = it->second;
  const auto slot = std::find(f.hosts.begin(), f.hosts.end(), host);
  const std::string which = "fence " + std::to_string(c.seq) + " of " +
                            (c.members.all ? std::string("all ranks")
                                           : std::to_string(c.members.ranks.size()) + " ranks");
  if (slot == f.hosts.end()) {
    throw error(errc::launch, "host " + map_.allocation().hosts.at(host).name +
                                  " contributed to PMIx " + which + " without ranks in it");
  }
  auto& part = f.parts[static_cast<std::size_t>(slot - f.hosts.begin())];
  if (part) {
    throw error(errc::launch, "host " + map_.allocation().hosts.at(host).name +
                                  " contributed twice to PMIx " + which);
  }
  part = c.data;
  f.collect = f.collect || c.collect;
  // A fence that needs a host already lost can never complete (its contribution will not come):
  // it fails at once for whoever contributed, as the fences pending at the loss did.
  for (const auto h : f.hosts) {
    if (std::find(lost_.begin(), lost_.end(), h) == lost_.end()) continue;
    outcome o;
    o.result.members = c.members;
    o.result.seq = c.seq;
    o.result.ok = false;
    for (std::size_t i = 0; i < f.hosts.size(); ++i) {
      if (f.parts[i]) o.hosts.push_back(f.hosts[i]);
    }
    fences_.erase(it);
    return o;
  }
  if (--f.missing > 0) return std::nullopt;
  outcome o;
  o.result.members = c.members;
  o.result.seq = c.seq;
  o.result.ok = true;
  for (std::size_t i = 0; i < f.hosts.size(); ++i) {
    o.hosts.push_back(f.hosts[i]);
    if (f.collect) o.result.data += *f.parts[i];
  }
  fences_.erase(it);
  return o;
}

std::vector<fence_table::outcome> fence_table::host_lost(std::uint32_t host) {
  if (std::find(lost_.begin(), lost_.end(), host) == lost_.end()) lost_.push_back(host);
  std::vector<outcome> failed;
  for (auto it = fences_.begin(); it != fences_.end();) {
    const fence& f = it->second;
    const bool involved = std::find(f.hosts.begin(), f.hosts.end(), host) != f.hosts.end();
    if (!involved) {
      ++it;
      continue;
    }
    outcome o;
    o.result.members = it->first.first;
    o.result.seq = it->first.second;
    o.result.ok = false;
    for (std::size_t i = 0; i < f.hosts.size(); ++i) {
      const auto h = f.hosts[i];
      if (h != host && f.parts[i]) o.hosts.push_back(h);
    }
    failed.push_back(std::move(o));
    it = fences_.erase(it);
  }
  return failed;
}

}  // namespace pm::control
