// The simulator's event queue: virtual-time events in a radix heap, and pools of reusable batches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pm::sim {

enum class ek : std::uint8_t {
  job_start,
  link_arrival,     // bytes reach one end of a host's link (a: host, b: 0 at the agent, 1 at
                    // its starter: the launcher, or its tree parent's agent)
  link_tick,        // a host's link ends are due (heartbeats, silence, hello deadline)
  agent_starts,     // a host's agent runs (a: host, b: which start)
  spawned,          // a host's agent forked a batch of ranks (a: host, b: pool slot)
  reacted,          // a host's signalled ranks die (a: host, b: pool slot)
  script_step,      // a: rank, b: 0 close streams, 1 call abort, 2 its next PMIx call
  proc_end,         // a: rank, b: encoded exit status
  launcher_timer,   // a: timer slot, b: its generation
  agent_timer,      // a: host, b: timer id
  host_crash,       // a: host
  partition_begin,  // a: host
  launcher_signal,  // a: signo
  forged_call,      // a: the host a forged caller claims to be
  carrier_end,      // a: host, b: which start: ssh, still running after the close, is killed
};

// key: the time in the high 48 bits, a random tie-break in the low 16, so that events due at
// the same moment come in a seed-chosen order ("simultaneous failures in any order"). 16 bytes:
// an 800,000-rank run queues every rank's natural end.
struct sim_event {
  std::uint64_t key;
  std::uint32_t a;
  std::uint32_t kind_b;  // the kind in the top 8 bits, b in the low 24
  std::int64_t t() const noexcept { return static_cast<std::int64_t>(key >> 16); }
  ek kind() const noexcept { return static_cast<ek>(kind_b >> 24); }
  std::uint32_t b() const noexcept { return kind_b & max_b; }
  static constexpr std::uint32_t max_b = (1u << 24) - 1;
};
inline constexpr std::int64_t max_key_time = (std::int64_t{1} << 47);  // ~39 hours

// A radix heap: a monotone priority queue (no key below the last popped one may be pushed),
// which virtual time is. Each event moves between at most 64 buckets, and the events far in the
// future (the ranks' natural exits) stay untouched in the high buckets, so a pop touches little
// memory; a binary heap of a million events spent most of an 800,000-rank run in cache misses.
class event_queue {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::uint64_t last() const noexcept { return last_; }
  void push(const sim_event& e) {
    buckets_[bucket(e.key)].push_back(e);
    ++size_;
  }
  // The event with the smallest key (valid until the next push or pop).
  const sim_event& top() {
    if (buckets_[0].empty()) refill();
    return buckets_[0].back();
  }
  void pop() {
    if (buckets_[0].empty()) refill();
    buckets_[0].pop_back();
    --size_;
  }

 private:
  std::size_t bucket(std::uint64_t key) const noexcept {
    return key == last_ ? 0 : 64 - static_cast<std::size_t>(__builtin_clzll(key ^ last_));
  }
  void refill() {
    std::size_t i = 1;
    while (buckets_[i].empty()) ++i;
    auto& from = buckets_[i];
    std::uint64_t min = from.front().key;
    for (const auto& e : from) min = std::min(min, e.key);
    last_ = min;
    // Events with equal keys keep their order (stable), so ties are decided by the key alone.
    for (const auto& e : from) buckets_[bucket(e.key)].push_back(e);
    // A large bucket's storage is given back once emptied: every bucket keeping its largest size
    // held several times the events in flight at 100,000 hosts.
    if (from.capacity() > 4096) {
      std::vector<sim_event>().swap(from);
    } else {
      from.clear();
    }
    std::reverse(buckets_[0].begin(), buckets_[0].end());
  }
  std::vector<sim_event> buckets_[65];
  std::uint64_t last_ = 0;
  std::size_t size_ = 0;
};

// Reusable vectors addressed by a slot number that fits an event: a batch travels as one event.
template <class T>
class batch_pool {
 public:
  std::uint32_t take() {
    if (!free_.empty()) {
      const auto slot = free_.back();
      free_.pop_back();
      return slot;
    }
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }
  std::vector<T>& operator[](std::uint32_t slot) { return slots_[slot]; }
  void give_back(std::uint32_t slot) {
    // Beyond a working set, a batch gives its storage back: the launch and the abort fill one
    // batch per host at once (100,000 of them), whose capacity would stay for the whole run.
    if (free_.size() < kept_with_storage) {
      slots_[slot].clear();
    } else {
      std::vector<T>().swap(slots_[slot]);
    }
    free_.push_back(slot);
  }

 private:
  static constexpr std::size_t kept_with_storage = 4096;
  std::vector<std::vector<T>> slots_;
  std::vector<std::uint32_t> free_;
};

}  // namespace pm::sim
