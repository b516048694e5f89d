// A job as the user describes it: app contexts plus the mapping policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pm/export.hpp"
#include "pm/host_binding.hpp"

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

/// How ranks are placed: on hosts (`by`, `ppr`, `ranking`: pm::map_job), and within each host
/// (`host`: pm::topo::plan_host from the host's topology, docs/gpus.md). Binding stays none unless
/// asked (docs/mapping.md says why).
struct mapping_policy {
  map_by by = map_by::slot;
  std::uint32_t ppr = 0;              ///< N of ppr:N:node
  std::optional<bool> oversubscribe;  ///< nullopt: allowed only for the implicit local allocation
  std::optional<rank_by> ranking;     ///< --rank-by; nullopt: follow the mapping
  /// Within each host: --map-by core|l3cache|numa|package|hwthread|ppr:N:OBJ[:pe=M], --rank-by
  /// core|..., --bind-to, --cpus-per-rank, --gpus-per-rank. Across hosts those --map-by forms
  /// place ranks as `slot` does (Open MPI fills a host's slots, then iterates its objects).
  topo::binding_policy host = {};
  /// --report-bindings: Open MPI's line per rank, on stderr, once its host is planned.
  bool report_bindings = false;
};

/// Whether the job's hosts must report their topology before any rank starts: it binds, maps or
/// ranks within hosts, gives GPUs, or reports bindings. A plain job never loads hwloc.
PM_API bool needs_topology(const mapping_policy& mapping) noexcept;

/// Applies one --map-by value (pm::topo::parse_map_by's) as pmrun does: node and ppr:N:node place
/// ranks across hosts, every other form maps as slot across hosts and is kept for plan_host;
/// :oversubscribe goes to map_job.
PM_API void set_map_by(mapping_policy& mapping, topo::map_option m);
/// Applies one --rank-by value (pm::topo::parse_rank_by's) as pmrun does: slot and node number
/// ranks across hosts, the other objects within each host; it replaces an earlier --rank-by.
PM_API void set_rank_by(mapping_policy& mapping, topo::object o);

struct job_spec {
  std::vector<app_context> apps;
  mapping_policy mapping;
};

}  // namespace pm
