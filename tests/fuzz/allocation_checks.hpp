// Checks shared by the allocation targets: what any allocation a parser returns must satisfy,
// and the path it takes next (resolve_allocation, then a map of a job that uses it).
#pragma once

#include "fuzz_support.hpp"
#include "pm/rank_map.hpp"

namespace pm::fuzz {

/// Every host a parser returns has a name and at least a slot.
inline void check_hosts(const allocation& a) {
  check(!a.hosts.empty(), "a parser returned an allocation without hosts");
  for (const auto& h : a.hosts) {
    check(!h.name.empty(), "a parser returned a host without a name");
    check(h.slots > 0, "a parser returned a host without slots");
    check(h.max_slots == 0 || h.max_slots >= h.slots, "a host's max_slots is below its slots");
  }
}

/// Resolves the allocation as pmrun would for this source and maps one rank per slot (when the
/// job is small enough to map, max_mapped_ranks).
inline void resolve_and_map(const allocation_inputs& inputs) {
  // resolve_allocation is linear, but a few microseconds a host: the parsers' own cap (a Slurm
  // list of 10,000,000 names, docs/allocation.md) would take a minute in this build.
  for (const auto* a : {&inputs.managed, &inputs.hostfile, &inputs.host_list}) {
    if (*a && (*a)->hosts.size() > max_resolved_hosts) return;
  }
  const local_host me = fixed_local_host();
  allocation resolved;
  if (!attempt([&] { resolved = resolve_allocation(inputs, me); })) return;
  check_hosts(resolved);
  const std::uint64_t slots = resolved.total_slots();
  if (slots == 0 || slots > max_mapped_ranks) return;
  job_spec job;
  job.apps.push_back(app_context{{"app"}, static_cast<std::uint32_t>(slots), {}, {}});
  rank_map map;
  if (!attempt([&] { map = map_job(job, resolved); })) return;
  check(map.size() == slots, "a job of one rank per slot did not map every slot");
}

}  // namespace pm::fuzz
