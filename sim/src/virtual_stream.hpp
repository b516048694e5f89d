// One direction of a simulated host's agent link: the bytes one link endpoint wrote, on their way
// to the other, each piece with the virtual time it arrives. FIFO, like the TCP connection under
// ssh: a piece never overtakes an earlier one. When a piece arrives (its latency, jitter and
// partitions) is the world's to decide; this only keeps the pieces in order.
//
// Besides bytes a piece can be the end of the stream (the writer closed it: a process exited, the
// launcher closed the connection) or an abort request of a rank (PMIx_Abort has no message in the
// link protocol yet; the simulator carries it in order with the bytes of its host).
//
// A piece is "quiet" when it holds nothing but heartbeats: it needs no event of its own, the
// receiving endpoint gets it (stamped with its own arrival time) before anything else happens to
// it. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pm::sim {

class virtual_stream {
 public:
  enum class kind : std::uint8_t { bytes, end, abort };
  struct piece {
    std::int64_t at = 0;     ///< arrival time
    std::uint32_t size = 0;  ///< bytes of this piece (kind::bytes)
    kind what = kind::bytes;
    std::uint32_t rank = 0;  ///< kind::abort
    int status = 0;          ///< kind::abort
  };

  /// Appends a piece of bytes arriving at `at` (not before the previous piece).
  void push_bytes(std::int64_t at, std::span<const std::uint8_t> bytes) {
    pieces_.push_back(piece{at, static_cast<std::uint32_t>(bytes.size()), kind::bytes, 0, 0});
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  }
  void push_end(std::int64_t at) { pieces_.push_back(piece{at, 0, kind::end, 0, 0}); }
  void push_abort(std::int64_t at, std::uint32_t rank, int status) {
    pieces_.push_back(piece{at, 0, kind::abort, rank, status});
  }

  /// Hands every piece that arrived by `now` to `f(const piece&, std::span<const uint8_t>)`, in
  /// order. `f` may push onto other streams, not onto this one.
  template <class F>
  void deliver(std::int64_t now, F&& f) {
    while (head_ < pieces_.size() && pieces_[head_].at <= now) {
      const piece p = pieces_[head_];
      const std::span<const std::uint8_t> b(bytes_.data() + offset_, p.size);
      ++head_;
      offset_ += p.size;
      f(p, b);
    }
    if (head_ == pieces_.size()) drop();
  }
  /// Forgets what is still on its way (its receiver is gone).
  void drop() {
    // Freed, not kept: 200,000 mostly idle streams must not each hold a buffer.
    std::vector<piece>().swap(pieces_);
    std::vector<std::uint8_t>().swap(bytes_);
    head_ = 0;
    offset_ = 0;
  }
  bool empty() const noexcept { return head_ == pieces_.size(); }
  /// The arrival time of the latest piece (FIFO: the next one comes after it).
  std::int64_t last_arrival = 0;

 private:
  std::vector<piece> pieces_;
  std::vector<std::uint8_t> bytes_;
  std::uint32_t head_ = 0;
  std::uint32_t offset_ = 0;
};

}  // namespace pm::sim
