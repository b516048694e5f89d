// Fences among ranks of several hosts (PMIx_Fence, MPI_Init's modex and barriers), gathered by
// the launcher (docs/pmix.md, "Across hosts"). Sans-I/O, like the controller: contributions in,
// results out.
//
// Each host's PMIx server asks its agent once per fence that has participants elsewhere; the
// agent names the fence by its members (all ranks, or a sorted list) and its own count of fences
// with those members (seq), which is the same on every host because every host sees the same
// fences in the same order. A contribution for seq+1 may arrive before seq completes (another
// host is ahead): fences are keyed by members and seq, never by arrival. When every host with a
// member has contributed, the result is every contribution in node order (the same bytes for
// every host); a 0-byte contribution still counts (a barrier).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "link/messages.hpp"
#include "pm/rank_map.hpp"

namespace pm::control {

class fence_table {
 public:
  /// The host of a process beyond the first job's ranks (a spawned job's), or nullopt when there
  /// is no such process.
  using process_host = std::function<std::optional<std::uint32_t>(std::uint32_t process)>;

  /// `map` (the first job's) must outlive the table. Members are the launcher's processes: the
  /// first job's ranks, then spawned jobs' (`spawned` places those). Hosts answer in node order,
  /// hosts only spawned jobs use after them, by index.
  explicit fence_table(const rank_map& map, process_host spawned = {});

  /// A fence is over: answer these hosts (allocation indices) with `result`.
  struct outcome {
    std::vector<std::uint32_t> hosts;
    link::fence_result result;
  };

  /// Host `host`'s contribution. Returns the outcome when it was the last one missing. Throws
  /// pm::error(errc::launch) naming the problem for a contribution that cannot be right (a host
  /// without members, a second one from the same host, a rank outside the job): the job must end.
  std::optional<outcome> contribute(std::uint32_t host, const link::fence_contribution& c);

  /// `host` is gone: every pending fence it was part of fails (ok = false) for the hosts that
  /// contributed; their ranks must not wait for ever. A later fence that needs it fails at each
  /// contribution (a job that goes on after a loss: --no-abort-on-failure).
  std::vector<outcome> host_lost(std::uint32_t host);

  std::size_t pending() const noexcept { return fences_.size(); }

 private:
  struct fence {
    std::vector<std::uint32_t> hosts;               // participating hosts, in answer order
    std::vector<std::optional<std::string>> parts;  // per entry of nodes: its contribution
    std::size_t missing = 0;
    bool collect = false;
  };
  fence make(const link::fence_members& members) const;
  std::uint64_t order_of(std::uint32_t host) const;

  const rank_map& map_;
  process_host spawned_;
  std::map<std::pair<link::fence_members, std::uint64_t>, fence> fences_;
  std::vector<std::uint32_t> lost_;  // hosts gone (few: a job that survives many losses is rare)
};

}  // namespace pm::control
