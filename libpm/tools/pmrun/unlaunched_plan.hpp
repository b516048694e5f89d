// --do-not-launch of a job that plans its hosts (--bind-to, --gpus-per-rank, ...): no agent
// answers, so the hosts' shape comes from --topology-file, else from this machine's pmd (`pmd
// --topology`), taken for every host as Open MPI's mpirun takes its own for nodes it has not
// launched on (docs/mapping.md, "Displaying a map").
#pragma once

#include "pm/command_line.hpp"
#include "pm/job.hpp"
#include "pm/job_plan.hpp"
#include "pm/rank_map.hpp"

namespace pmrun {

/// Each rank's resources and binding text by rank, as the launch would plan them on hosts of
/// that shape. Throws
/// pm::error(errc::mapping) when a host cannot meet the policy (the launch would refuse it),
/// errc::usage when no shape can be had.
pm::job_plan plan_unlaunched(const pm::run_options& options, const pm::rank_map& map,
                             const pm::mapping_policy& mapping);

}  // namespace pmrun
