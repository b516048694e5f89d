// Where a rank's environment is built: the one composer, and its one precedence order
// (docs/env-contract.md, "Precedence"). The launcher (profile variables of spawn requests, the
// PATH its program checks use), the agent (each rank it starts, and what its PMIx server adds),
// the C API's pm_rank_env and the simulator (through pm::rank_environment) all compose here.
//
// The layers, lowest first; a later layer replaces a name an earlier one set, and each name
// appears once, where its winning entry stands:
//   1. base      the launcher's environment (or, on a host, its agent's own) without an outer
//                job's identity, with the -mca exports as OMPI_MCA_key (job_base)
//   2. profile   the rank's profile variables (rank_profile)
//   3. exports   the -x exports: the user asked for them
//   4. app       the app context's own variables, for its ranks only
//   5. host      what only the rank's host knows: its PMIx server's variables (PMIx on). They
//                win over everything: a rank must reach its own server
//   6. defaults  the host's settings (Open MPI's yield and transports): set only where no layer
//                above set the name (the first of a repeated default counts)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pm/env.hpp"

namespace pm {

/// Where a program is looked up when no layer sets PATH (as execvp's default, /usr/local first).
inline constexpr std::string_view default_program_path = "/usr/local/bin:/usr/bin:/bin";

/// A list of variables as its holder keeps it, name/value pairs or "NAME=value" strings; a view
/// (the list must outlive it). A string without '=' has no name and is skipped everywhere.
class env_list {
 public:
  env_list() noexcept = default;
  env_list(const std::vector<env_var>& v) noexcept  // NOLINT(google-explicit-constructor)
      : pairs_(v.data()), size_(v.size()) {}
  env_list(const std::vector<std::string>& v) noexcept  // NOLINT(google-explicit-constructor)
      : strings_(v.data()), size_(v.size()) {}

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::string_view name(std::size_t i) const noexcept;
  std::string_view value(std::size_t i) const noexcept;
  /// "NAME=value" (a string entry is copied as it is).
  std::string joined(std::size_t i) const;

 private:
  const env_var* pairs_ = nullptr;
  const std::string* strings_ = nullptr;
  std::size_t size_ = 0;
};

/// One rank's layers (see the top of this file).
struct env_layers {
  env_list base;
  env_list profile;
  env_list exports;
  env_list app;
  env_list host;
  env_list defaults;
};

/// The rank's complete environment ("NAME=value", ready for execve). Cheap enough to run for every
/// rank at spawn: a base entry is compared with the later ones only when a 64-bit filter on
/// (length, last character) says it may be replaced.
std::vector<std::string> compose_environment(const env_layers& layers);

/// The value `name` has in compose_environment(layers), without composing it (nullopt: unset).
std::optional<std::string_view> composed_value(const env_layers& layers, std::string_view name);

/// Layer 1, once per job: `own` without outer-job identity (pm::is_outer_job_identity) and
/// nameless entries, then `additions` (the -mca exports), sorted by name, one entry per name (the
/// last given wins).
std::vector<env_var> job_base(env_list own, env_list additions);

/// Layer 2: the profile variables of `rank` of `map`. `universe_slots`: the slots of the
/// allocation when `map` is not the whole job's, as a spawned job's (its map holds only the free
/// slots, its OMPI_UNIVERSE_SIZE is the allocation's, as PMIx says).
std::vector<env_var> rank_profile(const rank_map& map, std::uint32_t rank, const job_env& env,
                                  std::optional<std::uint64_t> universe_slots = std::nullopt);

/// The PATH the ranks of app `app` find their program in, on a host whose agent's environment is
/// the launcher's (this machine): composed as above (profiles and the host layer set no PATH).
std::string program_path(const job_env& env, std::uint32_t app);

}  // namespace pm
