// The virtual streams between each agent and its starter (the launcher machine, or its tree
// parent's agent, which relays), and the ends' timers. Bytes one side wrote during a world event
// leave as one piece (as a driver writes what one turn of its loop produced) and arrive after the
// link's latency and jitter, in order, delayed to the end of a partition (TCP retransmits). The
// launcher's link ticks run at its link_deadline, an agent end's at its deadline(), as one
// virtual-time event per host.
//
// A piece of heartbeats alone is quiet: no event of its own. It is handed over, stamped with its
// arrival time, before anything else happens at its receiver: a host's tick first pulls what
// arrived for it along its whole relay chain (pull()).
#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

// When bytes leaving at `from` on a host's stream arrive: latency and jitter, delayed to the end
// of a partition, never before `not_before` (an agent reads nothing before it runs) nor before an
// earlier piece on the same stream (FIFO).
std::int64_t world::arrival(host_rec& h, virtual_stream& s, std::int64_t from,
                            std::int64_t not_before) {
  std::int64_t t = from;
  if (h.part_from >= 0 && t >= h.part_from && t < h.part_until) t = h.part_until;
  t = std::max(t, not_before);
  t += s_.latency.link.count() + jitter(s_.latency.link_jitter);
  t = std::max(t, s.last_arrival + 1);
  s.last_arrival = t;
  return t;
}

void world::touch(std::uint32_t host) {
  auto& h = hosts_[host];
  if (h.touched) return;
  h.touched = true;
  touched_.push_back(host);
}

// After each world event: what the touched ends wrote goes out, and their timers are re-armed.
void world::flush_touched() {
  for (std::size_t i = 0; i < touched_.size(); ++i) {
    const auto host = touched_[i];
    auto& h = hosts_[host];
    if (h.write_due) flush_launcher(host, h);
    // The event was the agent's turn: what it did to ranks goes out now, as pmd's loop does.
    if (h.agent && h.agent->holds_reports()) step_agent(host, agent::turn_ended{});
    flush_agent(host, h, now_, h.up_loud);
    h.touched = false;
    h.up_loud = false;
    arm_tick(host, h);
  }
  touched_.clear();
}

// What the launcher wrote for a host it reaches itself goes onto that host's stream.
void world::flush_launcher(std::uint32_t host, host_rec& h) {
  // Connect-back: the launcher writes nothing before a caller became this host's stream.
  if (s_.connect_back && !h.called) return;
  h.write_due = false;
  const auto out = launcher_->output(host);
  if (out.empty()) return;
  const bool loud = !quiet(out);
  const auto t = arrival(h, h.down, now_, h.agent_start);
  h.down.push_bytes(t, out, loud);
  result_.stats.link_bytes += out.size();
  launcher_->consume_output(host, out.size());
  if (loud) at(t, ek::link_arrival, host, 0);
}

// What a host's agent end wrote, leaving at `from`, goes onto its stream to its starter.
void world::flush_agent(std::uint32_t host, host_rec& h, std::int64_t from, bool loud) {
  if (!h.agent_end) return;
  const auto out = h.agent_end->output();
  if (!out.empty()) {
    const auto t = arrival(h, h.up, from, 0);
    h.up.push_bytes(t, out, loud);
    result_.stats.link_bytes += out.size();
    h.agent_end->consume_output(out.size());
    if (loud) at(t, ek::link_arrival, host, 1);
  }
  h.agent_end->shrink();
}

// True when the bytes hold nothing but heartbeats, also relayed ones (relay frames of heartbeats).
bool world::quiet(std::span<const std::uint8_t> bytes) const {
  const auto& hb = heartbeat_frame_;
  while (!bytes.empty()) {
    if (bytes.size() >= hb.size() && std::equal(hb.begin(), hb.end(), bytes.begin())) {
      bytes = bytes.subspan(hb.size());
      continue;
    }
    if (bytes.size() < link::frame_header_bytes + 5) return false;
    const std::size_t len = (std::size_t{bytes[0]} << 24) | (std::size_t{bytes[1]} << 16) |
                            (std::size_t{bytes[2]} << 8) | std::size_t{bytes[3]};
    if (len < 6 || bytes.size() < link::frame_header_bytes + len ||
        bytes[link::frame_header_bytes] != static_cast<std::uint8_t>(link::frame_kind::relay) ||
        !quiet(bytes.subspan(link::frame_header_bytes + 5, len - 5)))
      return false;
    bytes = bytes.subspan(link::frame_header_bytes + len);
  }
  return true;
}

// Hands one side what has arrived for it by now, each piece stamped with its own arrival time:
// the agent (down), or its starter (up): the launcher, or its tree parent's agent, which relays.
void world::deliver(std::uint32_t host, bool to_starter) {
  auto& h = hosts_[host];
  auto& s = to_starter ? h.up : h.down;
  if (s.empty()) return;
  s.deliver(now_, [&](const virtual_stream::piece& p, std::span<const std::uint8_t> bytes) {
    if (to_starter) {
      if (h.parent != no_host) {
        relay_up(host, p, bytes);
        return;
      }
      if (h.ssh == carrier::none) return;  // nobody reads it any more
      if (p.what == virtual_stream::kind::end) {
        h.up_ended = true;
        if (h.ssh == carrier::closing) {
          feed_launcher([&](launch::actions&) { carrier_done(host, h.exit_code, 0); });
        } else {
          feed_launcher([&](launch::actions& out) {
            launcher_->stream_broken(link::link_time(p.at), host, {}, out);
          });
        }
        return;
      }
      if (s_.connect_back && !h.called && !pass_call(host, h, bytes)) return;
      feed_launcher([&](launch::actions& out) {
        launcher_->received(link::link_time(p.at), host, bytes, out);
      });
      return;
    }
    if (!h.agent_end || h.agent_end->down()) return;  // nobody reads it any more
    relay_from_ = p.at;
    relay_loud_ = p.loud;
    link_events_.clear();
    if (p.what == virtual_stream::kind::bytes) {
      h.agent_end->received(link::link_time(p.at), bytes, link_events_);
    } else {
      h.agent_end->closed(link::link_time(p.at), link_events_);
    }
    touch(host);
    if (!link_events_.empty()) on_agent_events(host, link_events_);
  });
  // Nobody will read them: the agent is gone. (An agent that has not started yet reads them when
  // it does: its launcher may have written, or closed the link, before it ran.)
  if (!to_starter && !h.agent_end && now_ >= h.agent_start) s.drop();
}

// Before a host's ends act: what arrived along its relay chain, up to the launcher and down
// from it, is handed over first.
void world::pull(std::uint32_t host) {
  chain_.clear();
  for (auto x = host; x != no_host; x = hosts_[x].parent) chain_.push_back(x);
  for (const auto x : chain_) deliver(x, true);
  for (auto it = chain_.rbegin(); it != chain_.rend(); ++it) deliver(*it, false);
}

void world::on_link_arrival(std::uint32_t host, bool to_starter) {
  deliver(host, to_starter);
}

// A host's link ends are due: first what arrived for them (quiet heartbeats), then their ticks.
void world::on_link_tick(std::uint32_t host) {
  auto& h = hosts_[host];
  h.tick_at = -1;
  ++result_.stats.link_ticks;
  pull(host);
  if (h.launcher_due >= 0 && h.launcher_due <= now_) {
    h.launcher_due = -1;  // told again after the tick
    feed_launcher(
        [&](launch::actions& out) { launcher_->link_tick(link::link_time(now_), host, out); });
  }
  if (h.agent_end && !h.agent_end->down()) {
    const auto due = h.agent_end->deadline();
    tick_events_.clear();
    h.agent_end->tick(link::link_time(now_), tick_events_);
    if (!tick_events_.empty()) on_agent_events(host, tick_events_);
    // A tree parent's timer: its children's heartbeats (what they sent by now is handed over
    // first, as to a real parent that reads its children's pipes as they come) and their timing.
    if (due && due->count() <= now_ && !h.children.empty() && h.agent && h.agent->relays()) {
      kids_ = h.children;  // (a child's end, handed over, leaves the list)
      for (const auto c : kids_) deliver(c, true);
      relay_from_ = now_;
      relay_loud_ = false;
      feed_agent(host, agent::host_event{agent::children_tick{}});
    }
  }
  touch(host);
}

// One pending tick per host, at the earlier deadline of its two ends. A later deadline leaves the
// pending tick in place (it re-arms when it runs); an earlier one replaces it.
void world::arm_tick(std::uint32_t host, host_rec& h) {
  std::optional<std::int64_t> due;
  if (h.launcher_due >= 0) due = h.launcher_due;
  if (h.agent_end) {
    if (const auto d = h.agent_end->deadline(); d && (!due || d->count() < *due)) due = d->count();
  }
  if (!due) return;
  // Timers run on a 1 ms grid, as pmd's (its epoll timeout is whole milliseconds, rounded up): a
  // tick is at most 1 ms late, never early, and the two ends of a host, whose heartbeats are due
  // within a link latency of each other, share one tick event per interval instead of two.
  constexpr std::int64_t grid = 1'000'000;
  const auto t = std::max<std::int64_t>((*due + grid - 1) / grid * grid, now_);
  if (h.tick_at >= 0 && h.tick_at <= t) return;
  h.tick_at = t;
  at(t, ek::link_tick, host, 0);
}

// The link's promise: silence that begins at t is noticed by t + this (the last bytes sent before
// t arrive within a latency, and the silence timeout runs from their arrival).
std::int64_t world::detection_promise() const {
  return s_.latency.link.count() + s_.latency.link_jitter.count() +
         s_.latency.heartbeat_timeout.count();
}

}  // namespace pm::sim
