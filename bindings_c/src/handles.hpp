// The C handles: each is a struct that holds the C++ value it stands for.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/env.hpp"
#include "pm/job.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"

struct pm_allocation {
  pm::allocation value;
};

/// The job-wide env settings as given (checked by pm_map_job, as pmrun checks them after mapping).
struct pm_env_settings {
  pm::env_profile profiles = pm::default_env_profiles;
  pm::env_exports exports;
  std::optional<pm::env_map> inherited;  ///< nullopt: the process's environment at map time
  std::optional<std::uint16_t> master_port;
};

struct pm_job {
  pm::job_spec spec;
  std::chrono::milliseconds stall_timeout{0};  ///< pm_job_set_stall_timeout; 0: not watched
  /// Per app: its own variables (they become the map's job_env::app_overrides).
  std::vector<std::vector<pm::env_var>> app_env;
  pm_env_settings env;
};

struct pm_map {
  pm::rank_map map;
  std::vector<pm::app_context> apps;
  pm::mapping_policy mapping;  ///< the job's, for the jobs its ranks spawn (MPI_Comm_spawn)
  /// Its launch facts (MASTER_ADDR/PORT) are decided once, by decided_env(), hence mutable.
  mutable pm::job_env env;
  std::optional<std::uint16_t> master_port;
  std::chrono::milliseconds stall_timeout{0};  ///< the job's (pm_job_set_stall_timeout)
  mutable std::once_flag facts_once;
};

struct pm_report {
  pm::job_report value;
};

namespace pm::c {

/// A map of `job` (its env checked now) placed as `placed` says; `spec` is the job's spec as it
/// was mapped (host names as the allocation spells them).
std::unique_ptr<pm_map> map_of(const pm_job& job, const pm::job_spec& spec, pm::rank_map placed);

/// The map's job env with its launch facts (MASTER_ADDR/PORT), decided at the first call.
const pm::job_env& decided_env(const pm_map& map);

/// The complete environment of one rank as a launch gives it: pm::rank_environment with its app's
/// own variables and what its host adds (pm::predicted_host_env).
std::vector<std::string> rank_env(const pm_map& map, std::uint32_t rank);

/// "NAME=value" entries as an env_map (entries without '=' are skipped, as getenv skips them).
pm::env_map to_env_map(const char* const* envp);

/// A stall timeout in seconds as the C API takes it (pm_job_set_stall_timeout): 0 turns it off;
/// negative, not a number, or more than a year is PM_E_USAGE with pmrun's line.
std::chrono::milliseconds stall_timeout_of(double seconds);

/// This machine, probed once per process.
const pm::local_host& me();

/// Fills a pm_rank_info from a rank_report (strings point into `r`).
void fill_rank_info(const pm::rank_report& r, pm_rank_info& out);

}  // namespace pm::c
