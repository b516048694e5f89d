// map_job: Open MPI 4.1's mappers (rmaps round-robin by slot / by node, and ppr), as observed with
// `mpirun --display-map --do-not-launch`: same counts per host, same rank order.
#include <algorithm>
#include <limits>
#include <string>

#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace pm {
namespace {

constexpr std::uint32_t no_node = std::numeric_limits<std::uint32_t>::max();
// Twice the cores of the largest machine there is (about 9 million), and 8 million in the
// simulator: a mistyped -np is refused here at once, not after gigabytes of map (a rank costs
// about 55 bytes of map and far more downstream: -np 100000000 took 5.5 GB before a refusal).
constexpr std::uint64_t max_ranks = std::uint64_t{1} << 24;

[[noreturn]] void fail(const std::string& message) {
  throw error(errc::mapping, message);
}

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Per-host usage shared by all app contexts of the job.
struct host_usage {
  std::vector<std::uint32_t> used;  // ranks placed so far
  const allocation& alloc;

  std::uint32_t free_slots(std::uint32_t h) const {
    return alloc.hosts[h].slots > used[h] ? alloc.hosts[h].slots - used[h] : 0;
  }
  // Ranks this host can still take at all (max_slots is a hard limit; without it, unbounded).
  std::uint64_t hard_room(std::uint32_t h) const {
    const auto max = alloc.hosts[h].max_slots;
    if (max == 0) return std::numeric_limits<std::uint64_t>::max();
    return max > used[h] ? max - used[h] : 0;
  }
};

std::vector<std::uint32_t> allowed_hosts(const app_context& app, std::uint32_t app_index,
                                         const allocation& alloc) {
  std::vector<std::uint32_t> hosts;
  if (app.hosts.empty()) {
    hosts.resize(alloc.hosts.size());
    for (std::uint32_t h = 0; h < hosts.size(); ++h) hosts[h] = h;
    return hosts;
  }
  for (const auto& name : app.hosts) {
    auto h = alloc.find(name);
    if (!h) {
      fail("app context " + std::to_string(app_index) + ": host '" + name +
           "' is not in the allocation");
    }
    if (std::find(hosts.begin(), hosts.end(), *h) == hosts.end()) hosts.push_back(*h);
  }
  // Allocation order, as Open MPI walks its node list.
  std::sort(hosts.begin(), hosts.end());
  return hosts;
}

// Adds `remaining` ranks round robin, one per host per round, to hosts with hard room left.
void spread_round_robin(std::vector<std::uint64_t>& count, const std::vector<std::uint32_t>& hosts,
                        const host_usage& usage, std::uint64_t remaining) {
  while (remaining > 0) {
    bool placed = false;
    for (std::size_t i = 0; i < hosts.size() && remaining > 0; ++i) {
      if (count[i] < usage.hard_room(hosts[i])) {
        ++count[i];
        --remaining;
        placed = true;
      }
    }
    if (!placed) fail("internal: no host left with room");  // excluded by the capacity check
  }
}

// Slot mapping: fill free slots in order; oversubscription spreads the rest evenly.
std::vector<std::uint64_t> counts_by_slot(const std::vector<std::uint32_t>& hosts,
                                          const host_usage& usage, std::uint64_t np) {
  std::vector<std::uint64_t> count(hosts.size(), 0);
  std::uint64_t remaining = np;
  for (std::size_t i = 0; i < hosts.size() && remaining > 0; ++i) {
    count[i] = std::min<std::uint64_t>(usage.free_slots(hosts[i]), remaining);
    remaining -= count[i];
  }
  if (remaining == 0) return count;
  // Open MPI's second pass: balance = rest / hosts, the first (rest % hosts) hosts one more.
  const std::uint64_t balance = remaining / hosts.size();
  std::uint64_t extra = remaining % hosts.size();
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    std::uint64_t add = balance + (extra > 0 ? 1 : 0);
    if (extra > 0) --extra;
    add = std::min(add, usage.hard_room(hosts[i]) - count[i]);
    count[i] += add;
    remaining -= add;
  }
  spread_round_robin(count, hosts, usage, remaining);  // what max_slots turned away
  return count;
}

// Node mapping: an even share per host, adjusted to free slots; the lag round robin.
std::vector<std::uint64_t> counts_by_node(const std::vector<std::uint32_t>& hosts,
                                          const host_usage& usage, std::uint64_t np) {
  std::vector<std::uint64_t> count(hosts.size(), 0);
  std::uint64_t free_total = 0;
  for (auto h : hosts) free_total += usage.free_slots(h);
  const std::uint64_t n = hosts.size();
  if (np > free_total) {  // oversubscribed: an even share for everyone
    const std::uint64_t share = np / n;
    std::uint64_t extra = np % n;
    std::uint64_t remaining = np;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t c = share + (extra > 0 ? 1 : 0);
      if (extra > 0) --extra;
      c = std::min(c, usage.hard_room(hosts[i]));
      count[i] = c;
      remaining -= c;
    }
    spread_round_robin(count, hosts, usage, remaining);
    return count;
  }
  // Open MPI: the first (np % hosts) hosts are meant to take one more than the share; a host
  // short of free slots takes what it can, and the lag is dealt round robin afterwards.
  const std::uint64_t share = std::max<std::uint64_t>(1, np / n);
  const std::uint64_t extra = np > share * n ? np - share * n : 0;
  std::uint64_t remaining = np;
  for (std::size_t i = 0; i < n && remaining > 0; ++i) {
    const std::uint64_t want = share + (i < extra ? 1 : 0);
    const std::uint64_t c = std::min<std::uint64_t>({usage.free_slots(hosts[i]), want, remaining});
    count[i] = c;
    remaining -= c;
  }
  // Hosts that had fewer free slots than the share leave a lag: round robin over free slots.
  while (remaining > 0) {
    for (std::size_t i = 0; i < n && remaining > 0; ++i) {
      if (count[i] < usage.free_slots(hosts[i])) {
        ++count[i];
        --remaining;
      }
    }
  }
  return count;
}

std::vector<std::uint64_t> counts_ppr(const std::vector<std::uint32_t>& hosts, std::uint32_t ppr,
                                      std::uint64_t np) {
  std::vector<std::uint64_t> count(hosts.size(), 0);
  std::uint64_t remaining = np;
  for (std::size_t i = 0; i < hosts.size() && remaining > 0; ++i) {
    count[i] = std::min<std::uint64_t>(ppr, remaining);
    remaining -= count[i];
  }
  return count;
}

}  // namespace

rank_map map_job(const job_spec& job, const allocation& alloc) {
  if (job.apps.empty()) fail("the job has no app context");
  if (alloc.hosts.empty()) fail("the allocation has no hosts");
  if (job.mapping.by == map_by::ppr_node && job.mapping.ppr == 0) {
    fail("--map-by ppr:0:node: at least one rank per node is needed");
  }
  const bool oversubscribe =
      job.mapping.oversubscribe.value_or(alloc.source == allocation_source::implicit_local);

  rank_map map;
  map.allocation_ = alloc;
  map.total_slots_ = alloc.total_slots();
  const auto nhosts = static_cast<std::uint32_t>(alloc.hosts.size());
  host_usage usage{std::vector<std::uint32_t>(nhosts, 0), alloc};

  // Per app: how many ranks on which host; the rank order follows from the policy.
  std::vector<std::uint64_t> count;
  for (std::uint32_t a = 0; a < job.apps.size(); ++a) {
    const auto& app = job.apps[a];
    const auto hosts = allowed_hosts(app, a, alloc);
    std::uint64_t free_total = 0, slots_total = 0, hard_total = 0;
    bool hard_unbounded = false;
    for (auto h : hosts) {
      free_total += usage.free_slots(h);
      slots_total += alloc.hosts[h].slots;
      const auto room = usage.hard_room(h);
      if (room == std::numeric_limits<std::uint64_t>::max())
        hard_unbounded = true;
      else
        hard_total += room;
    }
    const std::string who = job.apps.size() > 1 ? "app context " + std::to_string(a) + ": " : "";

    std::uint64_t np;
    if (job.mapping.by == map_by::ppr_node) {
      const std::uint64_t capacity = std::uint64_t{job.mapping.ppr} * hosts.size();
      np = app.np.value_or(capacity);
      if (np > capacity) {
        fail(who + std::to_string(np) +
             " ranks requested but ppr:" + std::to_string(job.mapping.ppr) + ":node on " +
             plural(hosts.size(), "host") + " places at most " + std::to_string(capacity));
      }
    } else {
      np = app.np.value_or(slots_total);
    }
    if (np == 0) fail(who + "no ranks to start (-np must be at least 1)");
    if (map.size() + np > max_ranks) {
      fail(who + "too many ranks: " + std::to_string(np) + " (a job has at most " +
           std::to_string(max_ranks) + ")");
    }

    if (job.mapping.by == map_by::ppr_node) {
      count = counts_ppr(hosts, job.mapping.ppr, np);
      for (std::size_t i = 0; i < hosts.size(); ++i) {
        if (count[i] > usage.free_slots(hosts[i]) && !oversubscribe) {
          fail(who + "not enough slots: ppr:" + std::to_string(job.mapping.ppr) + ":node needs " +
               std::to_string(count[i]) + " on host '" + alloc.hosts[hosts[i]].name +
               "', which has " + plural(usage.free_slots(hosts[i]), "free slot") +
               " (add --oversubscribe to place more ranks than slots)");
        }
        if (count[i] > usage.hard_room(hosts[i])) {
          fail(who + "ppr:" + std::to_string(job.mapping.ppr) + ":node needs " +
               std::to_string(count[i]) + " ranks on host '" + alloc.hosts[hosts[i]].name +
               "', above its max_slots=" + std::to_string(alloc.hosts[hosts[i]].max_slots));
        }
      }
    } else {
      if (np > free_total && !oversubscribe) {
        // A remote host of a bare hostfile line counts 1 slot (its cores are not known before
        // its agent runs; mpirun asks its daemon first): say so, it is the likely surprise.
        std::string bare;
        for (const auto h : hosts) {
          const auto& host = alloc.hosts[h];
          if (!host.slots_given && !host.local) {
            bare = "; host '" + host.name +
                   "' is a bare hostfile line: 1 slot on a remote host, give it slots=N";
            break;
          }
        }
        fail(who + "not enough slots: " + plural(np, "rank") + " requested, " +
             plural(free_total, "slot") + " available on " + plural(hosts.size(), "host") +
             " (add --oversubscribe to place more ranks than slots" + bare + ")");
      }
      if (!hard_unbounded && np > hard_total) {
        fail(who + "not enough slots: " + plural(np, "rank") + " requested, max_slots allows " +
             std::to_string(hard_total) + " on " + plural(hosts.size(), "host"));
      }
      count = job.mapping.by == map_by::slot ? counts_by_slot(hosts, usage, np)
                                             : counts_by_node(hosts, usage, np);
    }

    // Ranks: by slot and ppr fill host after host; by node deals one per host per round; --rank-by
    // chooses the numbering apart from the counts (mpirun: --map-by slot --rank-by node on a:2,b:2
    // gives a 0,2 · b 1,3).
    map.app_first_rank_.push_back(map.size());
    const auto place = [&](std::uint32_t h) {
      map.host_of_rank_.push_back(h);
      map.local_rank_.push_back(usage.used[h]++);
    };
    const auto ranking = job.mapping.ranking.value_or(
        job.mapping.by == map_by::node ? rank_by::node : rank_by::slot);
    if (ranking == rank_by::node) {
      std::uint64_t left = np;
      std::vector<std::uint64_t> dealt(hosts.size(), 0);
      while (left > 0) {
        for (std::size_t i = 0; i < hosts.size(); ++i) {
          if (dealt[i] < count[i]) {
            ++dealt[i];
            --left;
            place(hosts[i]);
          }
        }
      }
    } else {
      for (std::size_t i = 0; i < hosts.size(); ++i) {
        for (std::uint64_t k = 0; k < count[i]; ++k) place(hosts[i]);
      }
    }
  }

  // Nodes: the hosts the job uses, in allocation order.
  std::vector<bool> used(nhosts, false);
  for (const auto h : map.host_of_rank_) used[h] = true;
  for (std::uint32_t h = 0; h < nhosts; ++h) {
    if (used[h]) map.node_host_.push_back(h);
  }
  map.index_hosts();
  return map;
}

// The CSR index of ranks per host, and each host's node.
void rank_map::index_hosts() {
  const auto nhosts = static_cast<std::uint32_t>(allocation_.hosts.size());
  std::vector<std::uint32_t> count(nhosts, 0);
  for (const auto h : host_of_rank_) ++count[h];
  host_node_.assign(nhosts, no_node);
  for (std::uint32_t n = 0; n < node_host_.size(); ++n) host_node_[node_host_[n]] = n;
  host_first_.assign(nhosts + 1, 0);
  for (std::uint32_t h = 0; h < nhosts; ++h) host_first_[h + 1] = host_first_[h] + count[h];
  ranks_by_host_.resize(size());
  std::vector<std::uint32_t> fill(host_first_.begin(), host_first_.end() - 1);
  for (std::uint32_t r = 0; r < size(); ++r) ranks_by_host_[fill[host_of_rank_[r]]++] = r;
}

rank_map map_job_on(const job_spec& job, const allocation& alloc,
                    std::span<const std::uint32_t> hosts) {
  allocation part;
  part.source = alloc.source;
  for (const auto h : hosts) {
    if (h >= alloc.hosts.size()) fail("host " + std::to_string(h) + " is outside the allocation");
    part.hosts.push_back(alloc.hosts[h]);
  }
  auto within = map_job(job, part);
  rank_map map;
  map.allocation_ = alloc;
  map.total_slots_ = part.total_slots();
  map.local_rank_ = std::move(within.local_rank_);
  map.app_first_rank_ = std::move(within.app_first_rank_);
  map.host_of_rank_ = std::move(within.host_of_rank_);
  for (auto& h : map.host_of_rank_) h = hosts[h];
  for (const auto h : within.node_host_) map.node_host_.push_back(hosts[h]);
  map.index_hosts();
  return map;
}

rank_map move_node(const rank_map& map, std::uint32_t node, std::uint32_t to) {
  if (node >= map.num_nodes() || to >= map.allocation().hosts.size()) {
    throw error(errc::usage, "node " + std::to_string(node) + " or host " + std::to_string(to) +
                                 " is outside the map");
  }
  if (map.node_of_host(to)) {
    throw error(errc::usage, "host '" + map.allocation().hosts[to].name + "' already has ranks");
  }
  rank_map moved = map;
  const auto from = map.node_host_[node];
  for (auto& h : moved.host_of_rank_) {
    if (h == from) h = to;
  }
  moved.node_host_[node] = to;
  moved.index_hosts();
  return moved;
}

rank_map with_hosts(const rank_map& map, std::vector<host> more) {
  rank_map grown = map;
  for (auto& h : more) {
    if (grown.allocation_.find(h.name)) {
      throw error(errc::usage, "host '" + h.name + "' is in the allocation already");
    }
    grown.allocation_.hosts.push_back(std::move(h));
  }
  grown.index_hosts();  // the universe (total_slots_) is the job's, as before
  return grown;
}

placement rank_map::at(std::uint32_t rank) const {
  if (rank >= size()) {
    throw error(errc::usage, "rank " + std::to_string(rank) + " is outside the job (size " +
                                 std::to_string(size()) + ")");
  }
  const auto h = host_of_rank_[rank];
  const auto app_it = std::upper_bound(app_first_rank_.begin(), app_first_rank_.end(), rank);
  placement p;
  p.rank = rank;
  p.app = static_cast<std::uint32_t>(app_it - app_first_rank_.begin() - 1);
  p.host = h;
  p.local_rank = local_rank_[rank];
  p.local_size = host_first_[h + 1] - host_first_[h];
  p.node = host_node_[h];
  return p;
}

std::uint32_t rank_map::app_size(std::uint32_t app) const {
  const auto first = app_first_rank_.at(app);
  const auto end = app + 1 < app_first_rank_.size() ? app_first_rank_[app + 1] : size();
  return end - first;
}

std::optional<std::uint32_t> rank_map::node_of_host(std::uint32_t host) const {
  if (host >= host_node_.size() || host_node_[host] == no_node) return std::nullopt;
  return host_node_[host];
}

std::span<const std::uint32_t> rank_map::ranks_on_host(std::uint32_t host) const {
  if (host + 1 >= host_first_.size()) return {};
  return {ranks_by_host_.data() + host_first_[host], host_first_[host + 1] - host_first_[host]};
}

std::size_t rank_map::memory_bytes() const noexcept {
  const auto bytes = [](const std::vector<std::uint32_t>& v) { return v.capacity() * 4; };
  std::size_t hosts = allocation_.hosts.capacity() * sizeof(host);
  for (const auto& h : allocation_.hosts) hosts += h.name.capacity() > 15 ? h.name.capacity() : 0;
  return bytes(host_of_rank_) + bytes(local_rank_) + bytes(app_first_rank_) + bytes(host_first_) +
         bytes(ranks_by_host_) + bytes(host_node_) + bytes(node_host_) + hosts;
}

}  // namespace pm
