// A job as the user describes it: app contexts plus the mapping policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pm/export.hpp"

namespace pm {

/// One executable with its arguments and process count (MPMD jobs have several).
struct app_context {
  std::vector<std::string> argv;    ///< argv[0] is the program as given (resolved at launch)
  std::optional<std::uint32_t> np;  ///< nullopt: one rank per slot of the allowed hosts
  std::vector<std::string> hosts;  ///< -H given in this app's segment: only these hosts; empty: all
  std::string wdir;                ///< working directory; empty: the launcher's
};

enum class map_by {
  slot,      ///< fill each host's slots in order (Open MPI's default)
  node,      ///< round robin over hosts
  ppr_node,  ///< ppr:N:node, N ranks on every host
};

/// How ranks are numbered once placed (--rank-by, Open MPI 4.1): slot numbers host after host,
/// node deals one rank per host per round. Without it the mapping decides (node: node, else slot).
enum class rank_by {
  slot,
  node,
};

/// How ranks are placed. Only binding "none" exists (docs/mapping.md says why).
struct mapping_policy {
  map_by by = map_by::slot;
  std::uint32_t ppr = 0;              ///< N of ppr:N:node
  std::optional<bool> oversubscribe;  ///< nullopt: allowed only for the implicit local allocation
  std::optional<rank_by> ranking;     ///< --rank-by; nullopt: follow the mapping
};

struct job_spec {
  std::vector<app_context> apps;
  mapping_policy mapping;
};

}  // namespace pm
