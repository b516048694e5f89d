// The launcher's PMIx data store: what ranks publish (PMIx_Publish, MPI_Publish_name, Open MPI's
// connect/accept) for lookups by any rank of the launch, the first job's and the spawned ones'
// (docs/pmix.md, "Spawn"). Sans-I/O, like the fence table: requests in, replies out; the driver
// carries them over the agent links and runs the lookups' timers.
//
// A lookup with `wait` is held until every key it names is published (Open MPI's MPI_Comm_spawn
// relies on it: each side's root looks up the other's key before it is there), until its timeout,
// or until its host is lost. Keys are unique: publishing a key that is there already fails (PMIx's
// PMIX_ERR_DUPLICATE_KEY), unpublishing is allowed to its publisher only. Every range and
// persistence PMIx offers is taken as "this launch": the data goes with the launcher.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "link/messages.hpp"

namespace pm::control {

class data_store {
 public:
  /// A reply for the lookup, publish or unpublish `reply.id` of `host`.
  struct answer {
    std::uint32_t host = 0;
    link::pmix_data_reply reply;
  };

  /// Keeps the values; the publisher's reply (ok, or error when a key exists already), then
  /// the replies of the held lookups this completes.
  std::vector<answer> publish(std::uint32_t host, const link::pmix_publish& request);
  /// The reply now, or nothing when the lookup waits (it is answered by a later publish,
  /// expire() or host_lost()). Without `wait`, keys not there: not_found when none is,
  /// ok with those found otherwise (as PMIx answers a partial lookup).
  std::optional<answer> lookup(std::uint32_t host, const link::pmix_lookup& request);
  /// Removes the keys `request.rank` published, all of them when it names none (ok; not_found
  /// when none of them was its).
  answer unpublish(std::uint32_t host, const link::pmix_unpublish& request);
  /// The held lookup `id` of `host` timed out: its reply (timeout), if it was still held.
  std::optional<answer> expire(std::uint32_t host, std::uint64_t id);
  /// `host` is gone: its held lookups are dropped (nobody there waits any more).
  void host_lost(std::uint32_t host);

  std::size_t size() const noexcept { return values_.size(); }
  std::size_t waiting() const noexcept { return held_.size(); }

 private:
  struct value {
    std::uint32_t rank = 0;
    std::string bytes;
  };
  std::optional<link::pmix_data_reply> try_answer(const link::pmix_lookup& request,
                                                  bool partial) const;

  std::map<std::string, value> values_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, link::pmix_lookup> held_;  // (host, id)
};

}  // namespace pm::control
