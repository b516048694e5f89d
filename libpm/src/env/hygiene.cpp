// What a nested launch must not pass on: the outer job's identity.
#include <string_view>

#include "pm/env.hpp"

namespace pm {

bool is_outer_job_identity(std::string_view name) noexcept {
  constexpr std::string_view prefixes[] = {"OMPI_COMM_WORLD_", "OMPI_APP_CTX_", "PMI_",
                                           "SLURM_STEP_",      "TORCHELASTIC_", "PMIX_",
                                           "SLURM_SRUN_COMM_", "SLURM_CPU_BIND"};
  constexpr std::string_view exact[] = {
      "OMPI_UNIVERSE_SIZE", "OMPI_FIRST_RANKS", "OMPI_NUM_APP_CTX", "OMPI_FILE_LOCATION",
      "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
      "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
      "MASTER_PORT", "TF_CONFIG", "AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE",
      "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
      // a Slurm step's own (its srun, its task, its binding)
      "SLURM_STEPID", "SLURM_TASK_PID", "SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR",
      "SLURM_GTIDS"};
  // PMIX_MCA_* are settings, not identity: they pass, like OMPI_MCA_*.
  if (name.starts_with("PMIX_MCA_")) return false;
  for (auto p : prefixes) {
    if (name.starts_with(p)) return true;
  }
  for (auto e : exact) {
    if (name == e) return true;
  }
  return false;
}

}  // namespace pm
