// The env contract: what every rank is told (docs/env-contract.md).
//
// All functions here are pure. Launch-time facts (MASTER_ADDR/PORT, node addresses) are decided
// by the launcher and passed in, so the same rank always gets the same variables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/environment.hpp"
#include "pm/export.hpp"
#include "pm/rank_map.hpp"

namespace pm {

struct env_var {
  std::string name;
  std::string value;
  friend bool operator==(const env_var&, const env_var&) = default;
};

/// Env profiles, each a family of variables; combine with |.
enum class env_profile : std::uint32_t {
  none = 0,
  ompi = 1u << 0,  ///< OMPI_COMM_WORLD_*, OMPI_UNIVERSE_SIZE
  torch =
      1u << 1,  ///< RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK, MASTER_*
  tf = 1u << 2,       ///< TF_CONFIG (its size grows with the job: off by default)
  azureml = 1u << 3,  ///< AZ_BATCH_MASTER_NODE, AZ_BATCHAI_MPI_MASTER_NODE
  slurm = 1u << 4,    ///< SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID
  hydra = 1u << 5,    ///< PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
  all = (1u << 6) - 1,
};
constexpr env_profile operator|(env_profile a, env_profile b) noexcept {
  return static_cast<env_profile>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr env_profile operator&(env_profile a, env_profile b) noexcept {
  return static_cast<env_profile>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
constexpr env_profile operator~(env_profile a) noexcept {
  return static_cast<env_profile>(~static_cast<std::uint32_t>(a)) & env_profile::all;
}
constexpr bool has(env_profile set, env_profile p) noexcept {
  return (set & p) != env_profile::none;
}
/// Every profile but tf.
constexpr env_profile default_env_profiles = env_profile::all & ~env_profile::tf;

/// "ompi,torch", "all", "none", "default,tf", "all,-tf": throws pm::error(errc::usage) naming the
/// unknown word.
PM_API env_profile parse_env_profiles(std::string_view text);

/// Facts the launch decides before any rank starts.
struct launch_facts {
  std::string master_addr = "127.0.0.1";  ///< an address of rank 0's host that every host reaches
  std::uint16_t master_port = 0;          ///< a port free there
  std::vector<std::string> node_addrs;    ///< per node: an address other hosts reach (TF_CONFIG)
  /// A launch that may restart (restart_policy): the torch profile adds torchrun's
  /// TORCHELASTIC_RESTART_COUNT (`restart_count`), TORCHELASTIC_MAX_RESTARTS and
  /// TORCHELASTIC_RUN_ID. max_restarts 0: none of them.
  std::uint32_t restart_count = 0;
  std::uint32_t max_restarts = 0;
  std::string run_id = {};
};

/// The variables that the enabled profiles give one rank, in a fixed order.
/// Cost: O(variables) for every profile but tf, whose TF_CONFIG lists every rank.
PM_API std::vector<env_var> profile_env(const rank_map& map, std::uint32_t rank,
                                        env_profile profiles, const launch_facts& facts);

/// True for a valid variable name: [A-Za-z_][A-Za-z0-9_]*.
PM_API bool is_valid_env_name(std::string_view name) noexcept;

/// Names of variables that identify an outer job (OMPI_COMM_WORLD_*, PMIX_*, PMI_*, SLURM_PROCID,
/// SLURM_STEP_*, RANK, MASTER_*, ...): a nested launch must not pass them on.
PM_API bool is_outer_job_identity(std::string_view name) noexcept;

/// User exports: -x VAR / -x VAR=value, and -mca key value (→ OMPI_MCA_key=value).
struct env_exports {
  std::vector<std::string> x;                            ///< each -x argument as given
  std::vector<std::pair<std::string, std::string>> mca;  ///< each -mca key value
};

/// The environment every rank starts from, plus the per-rank additions.
struct job_env {
  std::vector<env_var> base;       ///< inherited minus outer identity, plus -mca exports
  std::vector<env_var> overrides;  ///< -x exports: they win over the profiles (the user asked)
  /// Each app context's own variables (index = app; an app past the end has none), as hydra's
  /// per-segment -env: they win over everything above, for that app's ranks only.
  std::vector<std::vector<env_var>> app_overrides;
  env_profile profiles = default_env_profiles;
  launch_facts facts;

  /// The variables only app `app` adds (empty when it has none).
  const std::vector<env_var>& app_variables(std::uint32_t app) const noexcept {
    static const std::vector<env_var> none;
    return app < app_overrides.size() ? app_overrides[app] : none;
  }
};

/// Builds the job's env from the launcher's own environment: drops outer-job identity, keeps
/// OMPI_MCA_*, adds -mca as OMPI_MCA_key, resolves -x VAR from `inherited` (an unset VAR is not
/// exported, as mpirun does). Throws pm::error(errc::env) for an invalid name, e.g.
///   -x 1BAD=x: invalid variable name '1BAD'
PM_API job_env make_job_env(const env_map& inherited, const env_exports& exports,
                            env_profile profiles, launch_facts facts);

/// The environment of one rank ("NAME=value" strings, ready for execve) as the job's env gives
/// it: base, then profile variables, then overrides, then its app's own variables; a later entry
/// replaces an earlier one of the same name. A launch adds its host's variables (below).
PM_API std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                                 std::uint32_t rank);

/// What the rank's host adds at launch (docs/env-contract.md, "Precedence", layers 5 and 6).
struct host_env {
  /// Its agent's PMIx server's variables (a launch with PMIx): they win over every other layer.
  std::vector<env_var> server;
  /// Open MPI settings for the host (its cores, its devices): set only where no layer set them.
  std::vector<env_var> defaults;
};

/// The complete environment of one rank: rank_environment plus what its host adds.
PM_API std::vector<std::string> rank_environment(const job_env& env, const rank_map& map,
                                                 std::uint32_t rank, const host_env& host);

/// The value shown for a variable that only the rank's host's agent decides, at launch: its PMIx
/// server's address, its private directories, the launch's PMIx namespace.
inline constexpr std::string_view decided_at_launch = "<decided at launch>";

/// True for a variable whose value only the rank's host's agent knows (is_decided_at_launch
/// names them in docs/env-contract.md, "What only the host's agent knows").
PM_API bool is_decided_at_launch(std::string_view name) noexcept;

/// What a launch with PMIx (pm::job_request::pmix) on this machine adds for `rank`, as far as it
/// is known before the launch: the server's variables (those is_decided_at_launch names have the
/// value decided_at_launch) and this machine's Open MPI settings (its cores, its RDMA devices).
/// For a rank on another host the settings are that host's; these are this machine's.
PM_API host_env predicted_host_env(const rank_map& map, std::uint32_t rank);

}  // namespace pm
