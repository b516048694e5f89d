// One direction of a simulated host's agent link: the bytes one link endpoint wrote, on their way
// to the other, each piece with the virtual time it arrives. FIFO, like the TCP connection under
// ssh: a piece never overtakes an earlier one. When a piece arrives (its latency, jitter and
// partitions) is the world's to decide; this only keeps the pieces in order.
//
// Besides bytes a piece can be the end of the stream (the writer closed it: a process exited, the
// launcher closed the connection).
//
// A piece is "quiet" (not `loud`) when it holds nothing but heartbeats: it needs no event of its
// own, the receiving endpoint gets it (stamped with its own arrival time) before anything else
// happens to it. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace pm::sim {

class virtual_stream {
 public:
  enum class kind : std::uint8_t { bytes, end };
  struct piece {
    std::int64_t at = 0;     ///< arrival time
    std::uint32_t size = 0;  ///< bytes of this piece (kind::bytes)
    kind what = kind::bytes;
    bool loud = true;  ///< more than heartbeats (a relay passes it on as loud as it came)
  };

  /// Appends a piece of bytes arriving at `at` (not before the previous piece).
  void push_bytes(std::int64_t at, std::span<const std::uint8_t> bytes, bool loud) {
    put(piece{at, static_cast<std::uint32_t>(bytes.size()), kind::bytes, loud}, bytes);
  }
  void push_end(std::int64_t at) { put(piece{at, 0, kind::end, true}, {}); }

  /// Hands every piece that arrived by `now` to `f(const piece&, std::span<const uint8_t>)`, in
  /// order. `f` may push onto other streams, not onto this one.
  template <class F>
  void deliver(std::int64_t now, F&& f) {
    while (head_ < size()) {
      piece p;
      std::memcpy(&p, data() + head_, sizeof p);
      if (p.at > now) break;
      const std::span<const std::uint8_t> b(data() + head_ + sizeof p, p.size);
      head_ += sizeof p + p.size;
      f(p, b);
    }
    if (head_ == size()) {
      drop();
    } else if (head_ != 0 && !heap_.empty()) {
      keep_rest();
    }
  }
  /// Forgets what is still on its way (its receiver is gone).
  void drop() {
    // Freed, not kept: 200,000 mostly idle streams must not each hold a buffer.
    std::vector<std::uint8_t>().swap(heap_);
    small_ = 0;
    head_ = 0;
  }
  bool empty() const noexcept { return head_ == size(); }
  /// The heap buffer it holds (0 while what is on its way fits inline).
  std::size_t buffered_bytes() const noexcept { return heap_.capacity(); }
  /// The arrival time of the latest piece (FIFO: the next one comes after it).
  std::int64_t last_arrival = 0;

 private:
  // Pieces live in one buffer, each a header and its bytes. A heartbeat's piece (most of what is
  // in flight at any time, one per host and direction) fits inline, so it needs no allocation.
  static constexpr std::size_t inline_bytes = 48;
  const std::uint8_t* data() const noexcept { return heap_.empty() ? inline_ : heap_.data(); }
  std::size_t size() const noexcept { return heap_.empty() ? small_ : heap_.size(); }
  // After a delivery that left pieces on their way: a stream that rarely runs empty (a relaying
  // parent's, a host's during an abort) keeps only those, in a buffer their size, not the
  // buffer it grew to (at 100,000 hosts, 2.5x what was in flight).
  void keep_rest() {
    const std::size_t rest = heap_.size() - head_;
    if (rest <= inline_bytes) {
      std::memcpy(inline_, heap_.data() + head_, rest);
      small_ = static_cast<std::uint8_t>(rest);
      std::vector<std::uint8_t>().swap(heap_);
    } else if (heap_.capacity() >= 4 * rest) {
      std::vector<std::uint8_t>(heap_.begin() + head_, heap_.end()).swap(heap_);
    } else if (head_ < rest) {
      return;  // most of it is still on its way: moved later, not at every delivery
    } else {
      heap_.erase(heap_.begin(), heap_.begin() + head_);
    }
    head_ = 0;
  }
  void put(const piece& p, std::span<const std::uint8_t> bytes) {
    const auto* h = reinterpret_cast<const std::uint8_t*>(&p);
    if (heap_.empty() && small_ + sizeof p + bytes.size() <= inline_bytes) {
      std::memcpy(inline_ + small_, h, sizeof p);
      if (!bytes.empty()) std::memcpy(inline_ + small_ + sizeof p, bytes.data(), bytes.size());
      small_ += static_cast<std::uint8_t>(sizeof p + bytes.size());
      return;
    }
    // One allocation for the piece (an inline start, its header and bytes), not one per insert.
    const std::size_t need = size() + sizeof p + bytes.size();
    if (heap_.capacity() < need) heap_.reserve(std::max(need, heap_.capacity() * 3 / 2));
    if (heap_.empty()) heap_.assign(inline_, inline_ + small_);
    heap_.insert(heap_.end(), h, h + sizeof p);
    heap_.insert(heap_.end(), bytes.begin(), bytes.end());
  }
  std::vector<std::uint8_t> heap_;
  std::uint32_t head_ = 0;
  std::uint8_t small_ = 0;
  std::uint8_t inline_[inline_bytes];
};

}  // namespace pm::sim
