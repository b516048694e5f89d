// Driving one end of the agent link with a peer's bytes from the fuzzer, as the real drivers do
// (pmd on the agent side, the launcher machine's link endpoint on the launcher side) but with no descriptor,
// clock or process: time is virtual, and every action is answered in memory.
//
// Input layout (docs/fuzzing.md): three bytes that decide how the bytes arrive, then the bytes the
// peer sends, exactly as they travel (magic, hello, frames):
//   [0] chunk size: 0 = everything at once, else 1..255 bytes per received() call
//   [1] virtual milliseconds that pass between chunks (deadlines: hello, heartbeats, silence)
//   [2] flags: 1 acknowledge received data, 2 send data to the peer while credit lasts,
//              4 suspend and resume this side between chunks, 8 end with the stream closed
//              (else with a broken stream)
// The peer's nonce is link_nonce: seeds (tests/fuzz/corpus/link_*) carry it.
#pragma once

#include <algorithm>
#include <functional>

#include "fuzz_support.hpp"
#include "link/endpoint.hpp"

namespace pm::fuzz {

inline constexpr std::uint64_t link_nonce = 0x5eed5eed5eedULL;
inline constexpr std::size_t link_header_bytes = 3;

struct link_script {
  std::size_t chunk = 0;
  std::chrono::milliseconds step{0};
  bool ack = false, send_data = false, suspend = false, clean_close = true;
  std::span<const std::uint8_t> stream;

  static link_script read(const std::uint8_t* data, std::size_t size) {
    link_script s;
    if (size < link_header_bytes) {
      s.stream = {data, size};
      return s;
    }
    s.chunk = data[0];
    s.step = std::chrono::milliseconds(data[1]);
    s.ack = (data[2] & 1) != 0;
    s.send_data = (data[2] & 2) != 0;
    s.suspend = (data[2] & 4) != 0;
    s.clean_close = (data[2] & 8) != 0;
    s.stream = {data + link_header_bytes, size - link_header_bytes};
    return s;
  }
};

inline link::endpoint_options link_options(link::role self) {
  link::endpoint_options o;
  o.self = self;
  o.nonce = link_nonce;
  o.hello_timeout = std::chrono::milliseconds(2000);
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.silence_timeout = std::chrono::milliseconds(1000);
  o.max_noise = 4096;
  o.send_window = 4096;  // small, so that acks and credit matter
  o.ack_batch = 512;
  return o;
}

/// What every event stream must satisfy: nothing after link_down, peer_greeted at most once and
/// first, data only after it.
class event_checker {
 public:
  void take(const link::link_event& e) {
    check(!down_, "an event after link_down");
    if (std::holds_alternative<link::link_down>(e)) {
      check(!std::get<link::link_down>(e).reason.empty(), "link_down without a reason");
      check(std::get<link::link_down>(e).reason.find('\n') == std::string::npos,
            "a link_down reason spans several lines");
      down_ = true;
      return;
    }
    if (std::holds_alternative<link::peer_greeted>(e)) {
      check(!greeted_, "peer_greeted twice");
      greeted_ = true;
      return;
    }
    check(greeted_, "an event from the peer before its hello");
  }

 private:
  bool down_ = false;
  bool greeted_ = false;
};

/// Feeds the script's stream to `ep` (already started) chunk by chunk, ticking at deadlines and
/// writing its output away; `on_event` answers each event (it may send). `between` runs after
/// every chunk.
inline void drive_link(link::endpoint& ep, const link_script& s,
                       const std::function<void(link::link_time, link::link_event&)>& on_event,
                       const std::function<void(link::link_time)>& between = {}) {
  event_checker checker;
  std::vector<link::link_event> events;
  link::link_time now{0};
  const auto settle = [&] {
    for (auto& e : events) {
      checker.take(e);
      on_event(now, e);
    }
    events.clear();
    ep.consume_output(ep.output().size());
  };
  auto rest = s.stream;
  while (!rest.empty() && !ep.down()) {
    const std::size_t n = s.chunk == 0 ? rest.size() : std::min(rest.size(), s.chunk);
    ep.received(now, rest.first(n), events);
    rest = rest.subspan(n);
    settle();
    now += s.step;
    if (const auto d = ep.deadline(); d && *d <= now) ep.tick(now, events);
    settle();
    if (s.suspend) {
      ep.suspend(now);
      ep.resume(now);
    }
    if (between) between(now);
    settle();
  }
  ep.closed(now, events, s.clean_close ? std::string() : std::string("Connection reset by peer"));
  settle();
  check(ep.down(), "the link is not down after its stream closed");
  check(ep.output().empty(), "a link that is down still has bytes to send");
}

}  // namespace pm::fuzz
