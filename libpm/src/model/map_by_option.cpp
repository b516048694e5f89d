// --map-by's two halves (pm/job.hpp): across hosts for map_job, within each host for plan_host.
#include "pm/job.hpp"

namespace pm {

void set_map_by(mapping_policy& mapping, topo::map_option m) {
  if (m.by == topo::object::node && m.ppr > 0) {
    mapping.by = map_by::ppr_node;
    mapping.ppr = m.ppr;
  } else if (m.by == topo::object::node) {
    mapping.by = map_by::node;
  } else {
    mapping.by = map_by::slot;
  }
  if (m.oversubscribe) mapping.oversubscribe = m.oversubscribe;
  m.oversubscribe.reset();  // map_job's business
  mapping.host.map = m;
}

}  // namespace pm
