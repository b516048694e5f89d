// The srun step that starts every agent of a job inside a Slurm allocation, built by pure
// functions (docs/slurm.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pm::srun {

/// How pmrun runs srun.
struct srun_settings {
  std::vector<std::string> command = {"srun"};  ///< the program and any words of its own
  std::vector<std::string> extra_args;          ///< PM_SRUN_ARGS, split into words
  /// Slurm 23.11+: `--external-launcher` (the step takes no resources and counts as the job's
  /// launcher); older ones: `--overlap` (the step shares the allocation's resources).
  bool external_launcher = false;
};

/// The argv of the one step for `nodes` (Slurm node names) running `agent_argv` once per node:
///   srun (--external-launcher | --overlap) --mpi=none --cpu-bind=none --export=ALL
///        --kill-on-bad-exit=0 --input=none --quiet --nodes=N --ntasks=N --ntasks-per-node=1
///        --nodelist=a,b,... [extra_args] agent_argv...
/// --export=ALL even when the allocation was made with --export=NONE (the agents need the token
/// and addresses); --kill-on-bad-exit=0 because libpm applies its own failure policy; --mpi=none
/// and --cpu-bind=none because the agent is no MPI task and its ranks must not inherit a binding
/// meant for one task per node; --quiet because srun's informational lines are not for the user
/// (its errors and slurmstepd's still come, and pmrun shows them). Throws pm::error(errc::usage)
/// for no nodes, an empty command or a node name starting with '-' or holding a comma.
std::vector<std::string> srun_argv(const srun_settings& settings,
                                   const std::vector<std::string>& nodes,
                                   const std::vector<std::string>& agent_argv);

/// True for a variable srun must not inherit from the launcher's environment: what an enclosing
/// step or task set (SLURM_STEP_*, SLURM_PROCID, SLURM_NTASKS, CPU and memory binding, the
/// distribution, SLURM_EXPORT_ENV, ...) and what a PMI/PMIx server gave pmrun (PMIX_* except the
/// PMIX_MCA_* settings, PMI_*), so that a pmrun started inside a job step creates a fresh step.
bool is_inherited_step_variable(std::string_view name) noexcept;

/// srun's environment: `env` ("NAME=value") without the inherited step variables and without
/// any connect-back variable, plus the connect-back ones (addresses, port, token).
std::vector<std::string> srun_environment(const std::vector<std::string>& env,
                                          const std::vector<std::string>& addresses,
                                          std::uint16_t port, std::string_view token);

/// True when `srun --version` output ("slurm 23.11.1", "slurm-wlm 22.05.8") names 23.11 or later.
bool has_external_launcher(std::string_view version_output) noexcept;

}  // namespace pm::srun
