// A job's ranks within their hosts, as facts (docs/gpus.md, docs/mapping.md): what each rank of
// the first job is given (cores, GPUs, NIC) once its host's summary is known.
//
// The launch plans each host when its agent answers (the launcher's host_plans); these are the same
// pure steps for callers that hold the summaries themselves: pmrun --do-not-launch with
// --topology-file, the C API (pm_rank_env_on_host), a scheduler that decides before it
// launches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pm/export.hpp"
#include "pm/host_binding.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"

namespace pm {

/// What local rank `local_rank` of a planned host is given: its cpu list, its GPUs as their vendor
/// numbers them, and its NIC where the host has several.
PM_API rank_resources resources_of(const topo::host_topology& topology, const topo::host_plan& plan,
                                   std::uint32_t local_rank);

/// A planned job's ranks, by rank of the first job.
struct job_plan {
  std::vector<rank_resources> resources;  ///< as job_report::resources will hold them
  /// Each rank's cpus in Open MPI's words, topo::binding_text ("socket 0[core 1[hwt 0-1]]:[../BB]",
  /// empty: unbound): what --display-map's Bound: column says.
  std::vector<std::string> bound;
};

/// Plans every host the job uses, with `shape_of(host)` its summary (allocation index). Hosts
/// whose summary is the same object and that run as many ranks share one plan. Throws
/// pm::error(errc::mapping) naming the first host that cannot meet the policy, as the launch
/// refuses it.
PM_API job_plan
plan_job(const rank_map& map, const topo::binding_policy& policy,
         const std::function<const topo::host_topology&(std::uint32_t host)>& shape_of);

}  // namespace pm
