// The rank map: where every rank of a job runs. Computed by a pure function from job + allocation.
//
// Storage is compact (a few bytes per rank) and every query is O(1) or O(log apps): computing one
// rank's placement never scans the job.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/export.hpp"
#include "pm/job.hpp"

namespace pm {

/// One rank's place in the job.
struct placement {
  std::uint32_t rank = 0;        ///< global rank, 0..size-1
  std::uint32_t app = 0;         ///< index of its app context
  std::uint32_t host = 0;        ///< index into the allocation's hosts
  std::uint32_t local_rank = 0;  ///< index among this job's ranks on its host, by global rank
  std::uint32_t local_size = 0;  ///< this job's ranks on its host
  std::uint32_t node = 0;        ///< index of its host among the hosts the job uses (0..nodes-1)

  friend bool operator==(const placement&, const placement&) = default;
};

class PM_API rank_map {
 public:
  rank_map() = default;

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(host_of_rank_.size()); }
  std::uint32_t num_apps() const noexcept {
    return static_cast<std::uint32_t>(app_first_rank_.size());
  }
  /// Hosts the job uses.
  std::uint32_t num_nodes() const noexcept { return static_cast<std::uint32_t>(node_host_.size()); }
  const pm::allocation& allocation() const noexcept { return allocation_; }
  /// Slots in the allocation (cached: OMPI_UNIVERSE_SIZE is asked for on every rank).
  std::uint64_t total_slots() const noexcept { return total_slots_; }

  placement at(std::uint32_t rank) const;
  /// First rank and number of ranks of app context `app`.
  std::uint32_t app_first_rank(std::uint32_t app) const { return app_first_rank_.at(app); }
  std::uint32_t app_size(std::uint32_t app) const;
  /// Allocation host index of node `node`, and the reverse (nullopt: the job does not use it).
  std::uint32_t host_of_node(std::uint32_t node) const { return node_host_.at(node); }
  std::optional<std::uint32_t> node_of_host(std::uint32_t host) const;
  /// The ranks on allocation host `host`, in global-rank order (empty when unused).
  std::span<const std::uint32_t> ranks_on_host(std::uint32_t host) const;

  /// Bytes of heap this map holds (for the benchmarks' bytes-per-rank figure).
  std::size_t memory_bytes() const noexcept;

 private:
  friend PM_API rank_map map_job(const job_spec&, const pm::allocation&);
  friend PM_API rank_map map_job_on(const job_spec&, const pm::allocation&,
                                    std::span<const std::uint32_t>);
  friend PM_API rank_map move_node(const rank_map&, std::uint32_t, std::uint32_t);
  friend PM_API rank_map with_hosts(const rank_map&, std::vector<host>);
  // host_first_, ranks_by_host_ and host_node_ from host_of_rank_ and node_host_.
  void index_hosts();

  pm::allocation allocation_;
  std::uint64_t total_slots_ = 0;
  std::vector<std::uint32_t> host_of_rank_;    // per rank
  std::vector<std::uint32_t> local_rank_;      // per rank
  std::vector<std::uint32_t> app_first_rank_;  // per app
  std::vector<std::uint32_t> host_first_;      // per host + 1: CSR offsets into ranks_by_host_
  std::vector<std::uint32_t> ranks_by_host_;   // per rank, grouped by host
  std::vector<std::uint32_t> host_node_;       // per host: node index, or no_node
  std::vector<std::uint32_t> node_host_;       // per node: host index
};

/// Maps the job onto the allocation with Open MPI 4.1's rules (docs/mapping.md):
/// throws pm::error(errc::mapping) when it does not fit, naming the numbers, e.g.
///   not enough slots: 6 ranks requested, 4 slots available on 2 hosts (use --oversubscribe ...)
PM_API rank_map map_job(const job_spec& job, const allocation& alloc);

/// map_job onto `hosts` only (allocation indices, ascending): the other hosts of `alloc` get no
/// rank and keep their indices. total_slots() counts those hosts' slots. Throws as map_job.
/// For a job that goes on with fewer hosts after a loss (docs/resilience.md, "--min-hosts").
PM_API rank_map map_job_on(const job_spec& job, const allocation& alloc,
                           std::span<const std::uint32_t> hosts);

/// The same ranks with node `node` on allocation host `to` instead (a spare: it must hold none
/// of the job's ranks). Every rank keeps its number, local rank and node number; a lost host's
/// ranks move to a spare this way (docs/resilience.md, "Spare hosts"). Throws pm::error(usage)
/// when `to` already holds ranks or an index is outside the map.
PM_API rank_map move_node(const rank_map& map, std::uint32_t node, std::uint32_t to);

/// The same ranks on an allocation with `more` hosts after its own (hosts that joined a launch:
/// restart_policy::host_discovery). They hold no rank.
PM_API rank_map with_hosts(const rank_map& map, std::vector<host> more);

}  // namespace pm
