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

void set_rank_by(mapping_policy& mapping, topo::object o) {
  mapping.ranking.reset();
  mapping.host.rank_by.reset();
  if (o == topo::object::slot) {
    mapping.ranking = rank_by::slot;
  } else if (o == topo::object::node) {
    mapping.ranking = rank_by::node;
  } else {
    mapping.host.rank_by = o;
  }
}

}  // namespace pm
