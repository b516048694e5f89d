// A job that a rank's PMIx_Spawn (MPI_Comm_spawn), or a PMIx tool's, made, as the launcher keeps
// it, and how it is placed: on the allocation's free slots, with the launch's own mapping policy
// (docs/pmix.md, "Spawn"). Its ranks are the controller's processes first .. first + size - 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "link/messages.hpp"
#include "pm/allocation.hpp"
#include "pm/job.hpp"
#include "pm/rank_map.hpp"

namespace pm::driver {

struct spawned_job {
  std::uint32_t job = 0;        ///< 1 for the first spawned job, 2 for the next, ...
  std::uint32_t first = 0;      ///< its rank 0's process number
  std::uint32_t first_app = 0;  ///< its app 0's index among the agents' apps
  std::string nspace;
  /// The ranks' places over `hosts`, a copy of the allocation with each host's free slots
  /// (its slots minus the processes not ended there when the spawn came).
  rank_map map;
  std::vector<link::app_spec> apps;
  std::uint32_t asker_host = 0;
  std::uint64_t asker_id = 0;  ///< its host's id of the request
  std::uint32_t not_started = 0;
  bool answered = false;

  std::uint32_t size() const noexcept { return map.size(); }
  bool holds(std::uint32_t process) const noexcept {
    return process >= first && process - first < map.size();
  }
  /// The allocation host of its rank `rank` (the map's hosts are the allocation's, in order).
  std::uint32_t host_of(std::uint32_t rank) const { return map.at(rank).host; }
};

/// Places a PMIx_Spawn's apps on the free slots: host h takes alloc.hosts[h].slots - live[h]
/// ranks (max_slots likewise counts the live ones), under `policy` (oversubscription as the
/// launch allows it). An app's `hosts` (PMIX_HOST) limits it to those hosts. Throws
/// pm::error(errc::mapping) naming the problem ("not enough slots: 4 ranks requested, 1 slot
/// available on 1 host ..."). Fills map and apps; the caller sets the rest.
spawned_job map_spawn(const link::pmix_spawn& request, const allocation& alloc,
                      const std::vector<std::uint32_t>& live, const mapping_policy& policy);

}  // namespace pm::driver
