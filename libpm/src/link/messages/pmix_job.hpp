// The job's facts as every host's PMIx server registers them (docs/pmix.md), carried by `job` and
// `job_add`. Declares its wire form once (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "link/wire_schema.hpp"

namespace pm::link {

/// A pmix_job's `node` for a host that runs none of the job's ranks but must know the namespace
/// (the parents' hosts know their children's, and the other way round).
inline constexpr std::uint32_t no_node = 0xffffffffu;

/// What the agent's PMIx server tells the ranks about the whole job (docs/pmix.md): every rank's
/// node, app and local rank, so that each host registers the same namespace.
struct pmix_job {
  std::string nspace;                     ///< the job's PMIx namespace
  std::uint32_t universe = 0;             ///< MPI_UNIVERSE_SIZE: the allocation's slots
  std::uint32_t node = 0;                 ///< this host's index into `nodes`
  std::vector<std::string> nodes;         ///< the job's hosts in node order (as the map names them)
  std::vector<std::uint32_t> rank_node;   ///< per global rank: its index into `nodes`
  std::vector<std::uint32_t> rank_app;    ///< per global rank: its app context
  std::vector<std::uint32_t> rank_local;  ///< per global rank: its local rank on its node
  /// A spawned job (MPI_Comm_spawn): the namespace and rank that spawned it (PMIX_PARENT_ID);
  /// empty for the first job.
  std::string parent_nspace;
  std::uint32_t parent_rank = 0;
  friend bool operator==(const pmix_job&, const pmix_job&) = default;
  static constexpr auto wire() {
    return wire_map(field("nspace", &pmix_job::nspace), field("universe", &pmix_job::universe),
                    field("node", &pmix_job::node), field("nodes", &pmix_job::nodes),
                    field("rank_node", &pmix_job::rank_node),
                    field("rank_app", &pmix_job::rank_app),
                    field("rank_local", &pmix_job::rank_local),
                    together_if_set(field("parent_nspace", &pmix_job::parent_nspace),
                                    field("parent_rank", &pmix_job::parent_rank)));
  }
};

/// Refuses facts the agent could not index with (`apps`: how many apps the message carries),
/// naming the message `type`. Its PMIx component checks the rest.
void check_job_facts(const pmix_job& p, std::size_t apps, std::string_view type);

}  // namespace pm::link
