// Properties of the simulator's virtual stream (rapidcheck): whatever pieces are pushed and
// whenever they are delivered, each arrives once, in order, with its bytes intact, and a stream
// that keeps pieces on their way holds a buffer near their size, not the one it grew to.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <vector>

#include "virtual_stream.hpp"

namespace {

using pm::sim::virtual_stream;

struct pushed {
  std::int64_t at = 0;
  bool end = false;
  bool loud = true;
  std::vector<std::uint8_t> bytes;
};

RC_GTEST_PROP(VirtualStream, EveryPieceArrivesOnceInOrderWithItsBytes, ()) {
  virtual_stream s;
  std::vector<pushed> sent;
  std::size_t got = 0;
  std::int64_t last = 0;
  const auto steps = *rc::gen::inRange(1, 400);
  for (int i = 0; i < steps; ++i) {
    if (*rc::gen::inRange(0, 3) != 0) {
      // Heartbeat-sized pieces (inline), a rank's reports, a parent's relayed batch.
      const auto size = *rc::gen::element(0, 1, 20, 30, 47, 48, 200, 600, 5000);
      pushed p{last + *rc::gen::inRange(0, 300),
               *rc::gen::inRange(0, 20) == 0,
               *rc::gen::arbitrary<bool>(),
               {}};
      for (int b = 0; b < size && !p.end; ++b)
        p.bytes.push_back(static_cast<std::uint8_t>(sent.size() * 31 + b));
      last = p.at;
      if (p.end) {
        s.push_end(p.at);
      } else {
        s.push_bytes(p.at, p.bytes, p.loud);
      }
      sent.push_back(std::move(p));
    } else {
      const auto now = last - *rc::gen::inRange(0, 400);
      s.deliver(now, [&](const virtual_stream::piece& p, std::span<const std::uint8_t> bytes) {
        RC_ASSERT(got < sent.size());
        const auto& want = sent[got++];
        RC_ASSERT(p.at <= now);
        RC_ASSERT(p.at == want.at);
        RC_ASSERT((p.what == virtual_stream::kind::end) == want.end);
        if (!want.end) RC_ASSERT(p.loud == want.loud);
        RC_ASSERT(std::vector<std::uint8_t>(bytes.begin(), bytes.end()) == want.bytes);
      });
      // What is left waits: the next piece is not due yet.
      const bool next_not_due = got == sent.size() || sent[got].at > now;
      RC_ASSERT(next_not_due);
      // Kept near its size: at most 4x what is still on its way, and a buffer only beyond the
      // inline room.
      std::size_t waiting = 0;
      for (auto k = got; k < sent.size(); ++k)
        waiting += sizeof(virtual_stream::piece) + sent[k].bytes.size();
      RC_ASSERT(s.buffered_bytes() <= std::max<std::size_t>(4 * waiting, 48));
      RC_ASSERT(s.empty() == (got == sent.size()));
    }
  }
  s.deliver(last, [&](const virtual_stream::piece& p, std::span<const std::uint8_t> bytes) {
    RC_ASSERT(got < sent.size());
    const auto& want = sent[got++];
    RC_ASSERT(p.at == want.at);
    RC_ASSERT(std::vector<std::uint8_t>(bytes.begin(), bytes.end()) == want.bytes);
  });
  RC_ASSERT(got == sent.size());
  RC_ASSERT(s.empty());
  RC_ASSERT(s.buffered_bytes() == 0u);
}

}  // namespace
