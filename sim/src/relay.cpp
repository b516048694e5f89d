// The child agents of the tree launch, on the simulated agent's side, as pmd's child_agents
// (libpm/tools/pmd/child_agents.cpp) does them: child_open starts the host's agent (an ssh hop
// from here), child_data from the launcher goes to its stdin (the host's down stream), what it
// writes comes back as child_data, unread, and child_closed says how its ssh ended, after every
// child_data of it. child_close ends its stdin and its ssh (SIGTERM). This agent's own end closes
// its children's stdin (they see their launcher gone and end their ranks), and its sweep waits
// for them.
//
// The smallest relay that plays pmd's part: pmd's child-agent decisions have no sans-I/O home in
// libpm/src/agent yet (issue 21); when they do, the simulator should drive that instead.
#include <signal.h>

#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

bool world::is_child_of(std::uint32_t child, std::uint32_t parent) const {
  const auto& c = hosts_[parent].children;
  return std::find(c.begin(), c.end(), child) != c.end();
}

void world::child_open(std::uint32_t parent, const link::child_open& m) {
  ++result_.stats.relayed_hosts;
  if (m.host >= hosts_.size() || m.host == parent) {
    correctness("the launcher asked the agent on " + host_name(parent) +
                " to start an agent for host " + std::to_string(m.host));
    return;
  }
  if (is_child_of(m.host, parent)) {
    agent_send(parent, link::child_closed{m.host, -1, 0, "a second start of the same host"});
    return;
  }
  auto& c = hosts_[m.host];
  hosts_[parent].children.push_back(m.host);
  c.parent = parent;
  if (c.open_at < 0) c.open_at = relay_from_;
  c.up_ended = false;
  c.ssh = carrier::running;
  const auto hop = s_.latency.agent_hop.count();
  schedule_agent(m.host, relay_from_ + hop + jitter(sim_time(hop / 4)));
}

// Bytes from the launcher for a child: onto its stdin, as loud as they came.
void world::child_data_down(std::uint32_t parent, link::child_data& m) {
  if (!is_child_of(m.host, parent)) return;  // its ssh ended: nobody writes it
  auto& c = hosts_[m.host];
  const auto t = arrival(c, c.down, relay_from_, c.agent_start);
  c.down.push_bytes(t, {reinterpret_cast<const std::uint8_t*>(m.bytes.data()), m.bytes.size()},
                    relay_loud_);
  if (relay_loud_) at(t, ek::link_arrival, m.host, 0);
}

// The launcher is done with a child's link: its stdin closes and its ssh gets SIGTERM, which
// ends it at once (the child's agent reads the end of its stdin).
void world::child_close(std::uint32_t parent, std::uint32_t child) {
  auto& p = hosts_[parent];
  const auto it = std::find(p.children.begin(), p.children.end(), child);
  if (it == p.children.end()) return;
  p.children.erase(it);
  auto& c = hosts_[child];
  const auto t = arrival(c, c.down, relay_from_, c.agent_start);
  c.down.push_end(t);
  at(t, ek::link_arrival, child, 0);
  c.ssh = carrier::none;
  agent_send(parent, link::child_closed{child, -1, SIGTERM, {}});
}

// What a child's agent wrote reached its parent: relayed to the launcher as child_data, leaving
// when it arrived (not when the world happens to hand it over), as loud as it came.
void world::relay_up(std::uint32_t child, const virtual_stream::piece& piece,
                     std::span<const std::uint8_t> bytes) {
  const auto parent = hosts_[child].parent;
  auto& p = hosts_[parent];
  if (!is_child_of(child, parent) || !p.agent_end || p.agent_done || p.crashed) return;
  // What the parent wrote itself in this event leaves first.
  flush_agent(parent, p, now_, true);
  if (piece.what == virtual_stream::kind::end) {
    child_ended(child);
  } else {
    agent_send(parent,
               link::child_data{
                   child, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
  }
  flush_agent(parent, p, piece.at, piece.loud);
}

// A child's ssh ended with its agent: child_closed with the agent's exit status (and the remote
// shell's complaint when there was no agent).
void world::child_ended(std::uint32_t child) {
  auto& c = hosts_[child];
  const auto parent = c.parent;
  auto& p = hosts_[parent];
  std::erase(p.children, child);
  c.ssh = carrier::none;
  agent_send(parent, link::child_closed{child, c.exit_code, 0, std::string(carrier_said(c))});
}

// The agent lost its launcher or is clearing up: every child's stdin closes. Children that will
// never answer (their host crashed or never runs an agent) are counted as ended: pmd kills their
// ssh after its grace.
void world::end_children(std::uint32_t parent) {
  auto& p = hosts_[parent];
  for (std::size_t i = 0; i < p.children.size();) {
    const auto child = p.children[i];
    auto& c = hosts_[child];
    if (c.crashed || c.silent || (c.agent_done && c.up.empty())) {
      p.children.erase(p.children.begin() + static_cast<std::ptrdiff_t>(i));
      c.ssh = carrier::none;
      continue;
    }
    if (c.ssh == carrier::running) {
      const auto t = arrival(c, c.down, now_, c.agent_start);
      c.down.push_end(t);
      at(t, ek::link_arrival, child, 0);
      c.ssh = carrier::closing;
    }
    ++i;
  }
}

}  // namespace pm::sim
