// The child agents of the tree launch, on the simulated agent's side: what pmd's child_agents
// (libpm/tools/pmd/child_agents.cpp) does with the host machine's child actions, and nothing
// more. Which child a launcher message is for, what to forward, what child_closed says and when
// the children are ended is the host machine's child relay (libpm/src/agent/child_relay), run as
// it is. The world only plays the carriers (ssh from the parent's host): start_child starts the
// host's agent after an ssh hop, write_child puts bytes onto the child's stdin (its down stream),
// close_child_input ends that stream, stop_child and kill_child end ssh by a signal; what a
// child's agent writes comes back to the parent's machine as child_output, and the end of its
// stream as child_ended with the agent's exit status (after the remote shell's complaint, as
// child_said, when there was no agent).
#include <signal.h>

#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

// Its carrier runs on the parent's host (the child's own record: the parent's list is not
// touched on every relayed piece).
bool world::is_child_of(std::uint32_t child, std::uint32_t parent) const {
  const auto& c = hosts_[child];
  return c.parent == parent && c.ssh != carrier::none;
}

void world::carry_out_child(std::uint32_t parent, agent::child_action& a) {
  std::visit(overloaded{
                 [&](agent::send& x) { agent_send(parent, x.msg); },  // (host_machine's already)
                 [&](agent::start_child& x) { start_child(parent, x); },
                 [&](agent::write_child& x) { write_child(parent, x); },
                 [&](agent::close_child_input& x) { close_child_input(parent, x.host, now_); },
                 // ssh ends at once by SIGTERM (the child's agent reads the end of its stdin).
                 [&](agent::stop_child& x) { child_carrier_gone(parent, x.host, SIGTERM); },
                 [&](agent::kill_child& x) { child_carrier_gone(parent, x.host, x.signo); },
             },
             a);
}

// ssh to the child's host: its agent runs an ssh hop after the child_open left the launcher's
// stream at the parent (relay_from_).
void world::start_child(std::uint32_t parent, const agent::start_child& x) {
  ++result_.stats.relayed_hosts;
  if (x.host >= hosts_.size() || x.host == parent ||
      std::find(hosts_[parent].children.begin(), hosts_[parent].children.end(), x.host) !=
          hosts_[parent].children.end()) {
    correctness("the agent on " + host_name(parent) + " was asked to start an agent for host " +
                std::to_string(x.host));
    return;
  }
  auto& c = hosts_[x.host];
  hosts_[parent].children.push_back(x.host);
  c.parent = parent;
  if (c.open_at < 0) first_opened(x.host, relay_from_);
  c.up_ended = false;
  c.ssh = carrier::running;
  const auto hop = s_.latency.agent_hop.count();
  schedule_agent(x.host, relay_from_ + hop + jitter(sim_time(hop / 4)));
  if (x.input_closed) close_child_input(parent, x.host, relay_from_);
}

// Bytes from the launcher for a child: onto its stdin, as loud as they came.
void world::write_child(std::uint32_t parent, agent::write_child& x) {
  if (!is_child_of(x.host, parent)) return;  // its ssh ended: nobody writes it
  auto& c = hosts_[x.host];
  const auto t = arrival(c, c.down, relay_from_, c.agent_start);
  c.down.push_bytes(t, {reinterpret_cast<const std::uint8_t*>(x.bytes.data()), x.bytes.size()},
                    relay_loud_);
  if (relay_loud_) at(t, ek::link_arrival, x.host, 0);
}

// The child's stdin closes: its agent reads the end (when it runs) and ends; ssh ends with it.
void world::close_child_input(std::uint32_t parent, std::uint32_t child, std::int64_t from) {
  if (!is_child_of(child, parent)) return;
  auto& c = hosts_[child];
  if (c.ssh != carrier::running) return;
  const auto t = arrival(c, c.down, from, c.agent_start);
  c.down.push_end(t);
  at(t, ek::link_arrival, child, 0);
  c.ssh = carrier::closing;
}

// ssh is ended by a signal: its stdin closes (what was not written is dropped with it), nothing
// of it comes back any more, and the parent's machine hears how it ended after this batch.
void world::child_carrier_gone(std::uint32_t parent, std::uint32_t child, int signo) {
  auto& p = hosts_[parent];
  const auto it = std::find(p.children.begin(), p.children.end(), child);
  if (it == p.children.end()) return;
  p.children.erase(it);
  auto& c = hosts_[child];
  if (c.ssh == carrier::running) {
    const auto t = arrival(c, c.down, now_, c.agent_start);
    c.down.push_end(t);
    at(t, ek::link_arrival, child, 0);
  }
  c.ssh = carrier::none;
  feed_agent(parent, agent::host_event{agent::child_event{agent::child_ended{child, -1, signo}}});
}

// What a child's agent wrote reached its parent: child_output to the parent's machine, which
// relays it to the launcher as child_data (leaving when it arrived, not when the world happens to
// hand it over, as loud as it came); its end is ssh's end, with the agent's exit status.
void world::relay_up(std::uint32_t child, const virtual_stream::piece& piece,
                     std::span<const std::uint8_t> bytes) {
  const auto parent = hosts_[child].parent;
  auto& p = hosts_[parent];
  if (!is_child_of(child, parent) || !p.agent_end || p.agent_done || p.crashed) return;
  // What the parent wrote itself in this event leaves first.
  flush_agent(parent, p, now_, true);
  if (piece.what == virtual_stream::kind::end) {
    auto& c = hosts_[child];
    std::erase(p.children, child);
    c.ssh = carrier::none;
    if (const auto said = carrier_said(c); !said.empty()) {
      feed_agent(parent, agent::host_event{agent::child_event{
                             agent::child_said{child, std::string(said) + "\n"}}});
    }
    feed_agent(parent,
               agent::host_event{agent::child_event{agent::child_ended{child, c.exit_code, 0}}});
  } else {
    feed_agent(
        parent,
        agent::host_event{agent::child_event{agent::child_output{
            child, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())}}});
  }
  flush_agent(parent, p, piece.at, piece.loud);
}

}  // namespace pm::sim
