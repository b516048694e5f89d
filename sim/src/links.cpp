// The virtual streams between the two real link endpoints of each host, and the endpoints'
// timers. Bytes one end wrote during a world event leave as one piece (as a driver writes what one
// turn of its loop produced) and arrive after the link's latency and jitter, in order, delayed to
// the end of a partition (TCP retransmits). An endpoint's tick runs at its deadline() as a
// virtual-time event: heartbeats, the peer's silence, the hello deadline are the endpoint's own.
#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

// When bytes written now on a host's stream arrive: latency and jitter, delayed to the end of a
// partition, never before `not_before` (an agent reads nothing before it runs) nor before an
// earlier piece on the same stream (FIFO).
std::int64_t world::arrival(host_rec& h, virtual_stream& s, std::int64_t not_before) {
  std::int64_t t = now_;
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
    flush_end(host, h, true);
    flush_end(host, h, false);
    h.touched = false;
    h.down_loud = false;
    h.up_loud = false;
    arm_tick(host, h);
  }
  touched_.clear();
}

// Moves what one end wrote onto its stream. A piece of heartbeats alone is quiet: no event of its
// own, its receiver gets it before anything else happens to it (deliver()).
void world::flush_end(std::uint32_t host, host_rec& h, bool launcher_side) {
  auto& ep = launcher_side ? h.launcher_end : h.agent_end;
  if (!ep) return;
  // Connect-back: the launcher's bytes wait until a caller became this host's stream.
  if (launcher_side && s_.connect_back && !h.called) return;
  const auto out = ep->output();
  if (!out.empty()) {
    auto& s = launcher_side ? h.down : h.up;
    const auto t = arrival(h, s, launcher_side ? h.agent_start : 0);
    s.push_bytes(t, out);
    result_.stats.link_bytes += out.size();
    ep->consume_output(out.size());
    if (launcher_side ? h.down_loud : h.up_loud)
      at(t, ek::link_arrival, host, launcher_side ? 0 : 1);
  }
  ep->shrink();
}

// Hands one end what has arrived for it by now, each piece stamped with its own arrival time.
void world::deliver(std::uint32_t host, bool to_launcher) {
  auto& h = hosts_[host];
  auto& s = to_launcher ? h.up : h.down;
  if (s.empty()) return;
  s.deliver(now_, [&](const virtual_stream::piece& p, std::span<const std::uint8_t> bytes) {
    if (to_launcher && s_.connect_back && !h.called && !pass_call(host, h, p, bytes)) return;
    auto& ep = to_launcher ? h.launcher_end : h.agent_end;
    if (!ep || ep->down()) return;  // nobody reads it any more
    if (p.what == virtual_stream::kind::abort) {
      if (to_launcher) on_abort_request(host, p.rank, p.status);
      return;
    }
    link_events_.clear();
    const link::link_time at(p.at);
    if (p.what == virtual_stream::kind::bytes) {
      ep->received(at, bytes, link_events_);
    } else {
      ep->closed(at, link_events_);
    }
    touch(host);
    if (link_events_.empty()) return;
    if (to_launcher) {
      on_launcher_events(host, link_events_);
    } else {
      on_agent_events(host, link_events_);
    }
  });
  // Nobody will read them: the end is gone. (An agent that has not started yet reads them when
  // it does: its launcher may have written, or closed the link, before it ran.)
  if (!(to_launcher ? h.launcher_end : h.agent_end) && (to_launcher || now_ >= h.agent_start))
    s.drop();
}

// Connect-back: what arrives before the host's caller was accepted is the call's greeting, read
// up to its newline and judged by the launcher's caller_gate (the real one, as the srun transport
// feeds it). True when `bytes` (the rest after the greeting) go on to the link.
bool world::pass_call(std::uint32_t host, host_rec& h, const virtual_stream::piece& p,
                      std::span<const std::uint8_t>& bytes) {
  if (h.call_refused || p.what != virtual_stream::kind::bytes) return false;  // a closed caller
  const auto nl = std::find(bytes.begin(), bytes.end(), std::uint8_t{'\n'});
  const auto take = static_cast<std::size_t>(nl - bytes.begin()) + (nl != bytes.end() ? 1 : 0);
  auto& greeting = greetings_[host];
  greeting.append(reinterpret_cast<const char*>(bytes.data()), take);
  bytes = bytes.subspan(take);
  const auto v = gate_->judge(greeting);
  if (v.kind == srun::caller_gate::verdict::more) return false;
  ++result_.stats.calls;
  if (v.kind == srun::caller_gate::verdict::refuse) {
    refuse_call(host, h, v.why);
    return false;
  }
  if (v.host != host) correctness("the caller of " + host_name(host) + " became another host's");
  h.called = true;
  line("   the agent on " + host_name(host) + " called back");
  if (h.dup_call) {
    // Its second call (a retried connect) comes right behind the first: refused.
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::duplicate_call)];
    ++result_.stats.calls;
    const auto again = gate_->judge(greeting);
    if (again.kind == srun::caller_gate::verdict::accept) {
      correctness("a second caller became the stream of " + host_name(host));
    } else {
      ++result_.stats.callers_refused;
      line("!! a second call of the agent on " + host_name(host) + ": refused (" + again.why + ")");
    }
  }
  h.down_loud = true;  // the launcher's held bytes (hello, setup, spawns) go out now
  touch(host);
  return !bytes.empty();
}

// A refused caller's connection is closed: its agent reads the end and exits.
void world::refuse_call(std::uint32_t host, host_rec& h, const std::string& why) {
  h.call_refused = true;
  ++result_.stats.callers_refused;
  line("!! the launcher refuses the call of the agent on " + host_name(host) + ": " + why);
  const auto t = arrival(h, h.down, h.agent_start);
  h.down.push_end(t);
  at(t, ek::link_arrival, host, 0);
}

void world::on_link_arrival(std::uint32_t host, bool to_launcher) {
  deliver(host, to_launcher);
}

// A host's link ends are due: first what arrived for them (quiet heartbeats), then their ticks.
void world::on_link_tick(std::uint32_t host) {
  auto& h = hosts_[host];
  h.tick_at = -1;
  ++result_.stats.link_ticks;
  deliver(host, true);
  deliver(host, false);
  if (h.launcher_end && !h.launcher_end->down()) {
    tick_events_.clear();
    h.launcher_end->tick(link::link_time(now_), tick_events_);
    if (!tick_events_.empty()) on_launcher_events(host, tick_events_);
  }
  if (h.agent_end && !h.agent_end->down()) {
    tick_events_.clear();
    h.agent_end->tick(link::link_time(now_), tick_events_);
    if (!tick_events_.empty()) on_agent_events(host, tick_events_);
  }
  touch(host);
}

// One pending tick per host, at the earlier deadline of its two ends. A later deadline leaves the
// pending tick in place (it re-arms when it runs); an earlier one replaces it.
void world::arm_tick(std::uint32_t host, host_rec& h) {
  std::optional<link::link_time> due;
  for (const auto* ep : {&h.launcher_end, &h.agent_end}) {
    if (!*ep) continue;
    if (const auto d = (*ep)->deadline(); d && (!due || *d < *due)) due = d;
  }
  if (!due) return;
  // Timers run on a 1 ms grid, as pmd's (its epoll timeout is whole milliseconds, rounded up): a
  // tick is at most 1 ms late, never early, and the two ends of a host, whose heartbeats are due
  // within a link latency of each other, share one tick event per interval instead of two.
  constexpr std::int64_t grid = 1'000'000;
  const auto t = std::max<std::int64_t>((due->count() + grid - 1) / grid * grid, now_);
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
