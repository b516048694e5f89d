// A job that a rank's PMIx_Spawn (MPI_Comm_spawn), or a PMIx tool's, made, as the launcher keeps
// it, and how it is placed: on the allocation's free slots, with the launch's own mapping policy
// (docs/pmix.md, "Spawn"). Once the controller took it, its ranks are the controller's processes
// first .. first + size - 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "link/messages.hpp"
#include "pm/allocation.hpp"
#include "pm/job.hpp"
#include "pm/rank_map.hpp"

namespace pm::launch {

struct spawned_job {
  std::uint32_t job = 0;        ///< 1 for the first spawned job, 2 for the next, ...
  std::uint32_t first = 0;      ///< its rank 0's process number
  std::uint32_t first_app = 0;  ///< its app 0's index among the agents' apps
  std::string nspace;
  /// The ranks' places over the hosts that had room (a sub-allocation: `hosts` maps its host
  /// indices to the allocation's), each with its free slots when the spawn came.
  rank_map map;
  std::vector<std::uint32_t> hosts;
  std::vector<link::app_spec> apps;
  std::optional<link::pmix_job> facts;  ///< as registered on every host (node set per host)
  std::string tool;  ///< the namespace of the PMIx tool that asked ("": a rank asked)
  std::uint32_t asker_host = 0;
  std::uint64_t asker_id = 0;  ///< its host's id of the request
  std::vector<bool> started;   ///< per rank: its start was reported
  std::uint32_t not_started = 0;
  bool answered = false;

  std::uint32_t size() const noexcept { return map.size(); }
  bool holds(std::uint32_t process) const noexcept {
    return process >= first && process - first < map.size();
  }
  /// The allocation host of its rank `rank`.
  std::uint32_t host_of(std::uint32_t rank) const { return hosts.at(map.at(rank).host); }
  /// Its node index on allocation host `host` (nullopt: none of its ranks run there).
  std::optional<std::uint32_t> node_on(std::uint32_t host) const;
  /// The job_add that tells allocation host `host`'s agent about it.
  link::job_add add_for(std::uint32_t host) const;
};

/// Places a PMIx_Spawn's apps on the free slots: host h has room for alloc.hosts[h].slots -
/// live[h] ranks (max_slots likewise counts the live ones); hosts with `usable[h]` false (lost)
/// and hosts whose max_slots are used up take none, whatever the policy. An app's `hosts`
/// (PMIX_HOST) limits it to those. Throws pm::error(errc::mapping) naming the problem ("not
/// enough slots: 4 ranks requested, 1 slot available on 1 host ..."). Fills map, hosts and apps.
spawned_job map_spawn(const link::pmix_spawn& request, const allocation& alloc,
                      const std::vector<std::uint32_t>& live, const std::vector<bool>& usable,
                      const mapping_policy& policy);

}  // namespace pm::launch
