// How an agent composes a rank's environment on its own host (docs/agent-link.md): through the
// one composer (env/compose.hpp), with the agent's own environment as the base, so that a local
// job sees exactly what pm::rank_environment says. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm::agent {

/// The part every rank of the job shares (layer 1): `own` ("NAME=value", the agent's environ)
/// without outer job identity (pm::is_outer_job_identity) and entries that are not NAME=value,
/// then `add` (the -mca exports); sorted by name, one entry per name (the last given wins).
std::vector<std::string> base_environment(const std::vector<std::string>& own,
                                          const std::vector<std::string>& add);

/// Layers 1 to 4: base + profile + overrides + app, later entries winning.
std::vector<std::string> compose_rank_environment(const std::vector<std::string>& base,
                                                  const std::vector<std::string>& profile,
                                                  const std::vector<std::string>& overrides,
                                                  const std::vector<std::string>& app);

/// Layers 5 and 6 on a composed environment: the host's PMIx server's variables (`server`, they
/// win) and its Open MPI settings (`defaults`, only where `env` sets none).
std::vector<std::string> add_host_variables(const std::vector<std::string>& env,
                                            const std::vector<std::string>& server,
                                            const std::vector<std::string>& defaults);

/// The value of NAME in a "NAME=value" list (the last one), or nothing.
std::string_view find_variable(const std::vector<std::string>& env, std::string_view name);
/// Likewise, telling a variable set empty from one not set.
std::optional<std::string_view> lookup_variable(const std::vector<std::string>& env,
                                                std::string_view name);

}  // namespace pm::agent
