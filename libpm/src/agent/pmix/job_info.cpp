// make_job_info: libpm's rank map as one node's PMIx job description (pmix_host.hpp). Pure.
#include <algorithm>
#include <limits>
#include <string>

#include "agent/pmix/pmix_host.hpp"
#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace pm::agent::pmix {

job_info make_job_info(const pm::rank_map& map, std::string nspace, std::uint32_t node_index) {
  job_info job;
  job.nspace = std::move(nspace);
  job.node_index = node_index;
  const std::uint64_t slots = map.total_slots();
  job.universe_size = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(slots, std::numeric_limits<std::uint32_t>::max()));
  job.node_names.reserve(map.num_nodes());
  for (std::uint32_t n = 0; n < map.num_nodes(); ++n) {
    job.node_names.push_back(map.allocation().hosts.at(map.host_of_node(n)).name);
  }
  job.ranks.reserve(map.size());
  for (std::uint32_t rank = 0; rank < map.size(); ++rank) {
    const placement p = map.at(rank);
    if (p.local_rank > std::numeric_limits<std::uint16_t>::max()) {
      throw pm::error(pm::errc::usage, "PMIx: more than 65536 ranks on node " +
                                           job.node_names.at(p.node) + " (local ranks are 16-bit)");
    }
    rank_info r;
    r.app = p.app;
    r.node = p.node;
    r.local_rank = static_cast<std::uint16_t>(p.local_rank);
    r.node_rank = r.local_rank;  // one job per node: Open MPI's node rank is the local rank
    job.ranks.push_back(r);
  }
  return job;
}

}  // namespace pm::agent::pmix
