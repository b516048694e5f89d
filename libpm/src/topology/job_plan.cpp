// plan_job and resources_of (pm/job_plan.hpp): the per-rank facts of planned hosts.
#include "pm/job_plan.hpp"

#include <map>
#include <utility>

namespace pm {

rank_resources resources_of(const topo::host_topology& topology, const topo::host_plan& plan,
                            std::uint32_t local_rank) {
  rank_resources r;
  const auto cpus = plan.cpus(local_rank);
  r.cpus = topo::cpu_list(cpus);
  for (const auto g : plan.gpus(local_rank)) r.gpus.push_back(topology.gpus.at(g).index);
  const auto nic = plan.nic(local_rank);
  // One NIC is no choice: it is not named (as rank_environment sets no NCCL_IB_HCA then).
  if (nic != topo::none && nic < topology.nics.size() && topology.nics.size() > 1)
    r.nic = topology.nics[nic].name;
  return r;
}

job_plan plan_job(const rank_map& map, const topo::binding_policy& policy,
                  const std::function<const topo::host_topology&(std::uint32_t host)>& shape_of) {
  job_plan out;
  out.resources.resize(map.size());
  out.bound.resize(map.size());
  // One plan per (summary, rank count): a cluster has few shapes.
  std::map<std::pair<const topo::host_topology*, std::uint32_t>, job_plan> seen;
  for (std::uint32_t n = 0; n < map.num_nodes(); ++n) {
    const auto h = map.host_of_node(n);
    const auto ranks = map.ranks_on_host(h);
    const auto count = static_cast<std::uint32_t>(ranks.size());
    const auto& shape = shape_of(h);
    auto& by_local = seen[{&shape, count}];
    if (by_local.resources.empty()) {
      const auto plan = topo::plan_host(shape, map.allocation().hosts.at(h).name, count, policy);
      for (std::uint32_t local = 0; local < count; ++local) {
        by_local.resources.push_back(resources_of(shape, plan, local));
        by_local.bound.push_back(topo::binding_text(shape, plan.cpus(local)));
      }
    }
    for (const auto rank : ranks) {
      const auto local = map.at(rank).local_rank;
      out.resources[rank] = by_local.resources.at(local);
      out.bound[rank] = by_local.bound.at(local);
    }
  }
  return out;
}

}  // namespace pm
