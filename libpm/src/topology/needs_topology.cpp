// When a job asks its agents for their hosts' shapes (pm/job.hpp): only for what needs it, so
// that a plain job never loads hwloc (docs/gpus.md, "Cost").
#include "pm/job.hpp"

namespace pm {

bool needs_topology(const mapping_policy& m) noexcept {
  const auto& h = m.host;
  const bool within = h.map.by != topo::object::slot && h.map.by != topo::object::node;
  return m.report_bindings || h.bind.to.has_value() || h.gpus.per_rank > 0 || h.cpus_per_rank > 0 ||
         h.map.pe > 0 || h.rank_by.has_value() || within ||
         (h.map.ppr > 0 && h.map.by != topo::object::node);
}

}  // namespace pm
