// Rendering a rank map for people (Open MPI 4's --display-map text) and programs (JSON).
#pragma once

#include <cstdint>
#include <string>

#include "pm/export.hpp"
#include "pm/job_plan.hpp"
#include "pm/rank_map.hpp"

namespace pm {

/// Open MPI 4.1's JOB MAP block, byte for byte in layout:
///  Data for JOB [J,1] offset 0 Total slots allocated N
///  ...
///  Data for node: a<TAB>Num slots: 2<TAB>Max slots: 0<TAB>Num procs: 2
///  <TAB>Process OMPI jobid: [J,1] App: 0 Process rank: R Bound: N/A
/// Only hosts the job uses are listed, in allocation order. With `plan` (a planned job's:
/// job_callbacks::on_planned, pm::plan_job) Bound: says where each rank is bound in Open MPI's
/// words ("socket 0[core 1[hwt 0-1]]:[../BB/..]", N/A when unbound), followed by " GPUs: 2,3"
/// and " NIC: mlx5_0" when it has them (docs/mapping.md).
PM_API std::string format_job_map(const rank_map& map, std::uint32_t jobid,
                                  const job_plan* plan = nullptr);

/// Open MPI 4.1's --display-allocation block, in its layout:
///  ======================   ALLOCATED NODES   ======================
///  <TAB>a: flags=0x11 slots=2 max_slots=0 slots_inuse=0 state=UP
///  =================================================================
/// Every host of the allocation; flags/state as mpirun prints them for its own host (0x11, UP)
/// and for a host whose daemon has not started yet (0x10, UNKNOWN).
PM_API std::string format_allocation(const allocation& alloc);

/// The same as JSON: {"jobid":J,"size":N,"total_slots":S,"nodes":[{"name","node","slots",
/// "max_slots","slots_known","ranks":[{"rank","app","local_rank"}...]}...]}; with `plan` each
/// rank also has "bound", "cpus" and "nic" (string or null) and "gpus" (an array).
PM_API std::string job_map_json(const rank_map& map, std::uint32_t jobid,
                                const job_plan* plan = nullptr);

}  // namespace pm
