// How an agent composes a rank's environment on its own host (docs/agent-link.md): its own
// environment minus an outer job's identity, plus the job's base additions (the -mca exports), then
// the rank's profile variables, then the -x overrides, then its app's variables; a later entry
// replaces an earlier one of the same name. The same order as pm::rank_environment, so a local job
// sees exactly what it saw when the launcher built the environment itself. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm::agent {

/// The part every rank of the job shares: `own` ("NAME=value", the agent's environ) without outer
/// job identity (pm::is_outer_job_identity) and entries that are not NAME=value, then `add`;
/// sorted by name, one entry per name (the last given wins).
std::vector<std::string> base_environment(const std::vector<std::string>& own,
                                          const std::vector<std::string>& add);

/// base + profile + overrides + app, later entries winning, base order kept for what survives.
std::vector<std::string> compose_rank_environment(const std::vector<std::string>& base,
                                                  const std::vector<std::string>& profile,
                                                  const std::vector<std::string>& overrides,
                                                  const std::vector<std::string>& app);

/// The value of NAME in a "NAME=value" list (the last one), or nothing.
std::string_view find_variable(const std::vector<std::string>& env, std::string_view name);
/// Likewise, telling a variable set empty from one not set.
std::optional<std::string_view> lookup_variable(const std::vector<std::string>& env,
                                                std::string_view name);

}  // namespace pm::agent
