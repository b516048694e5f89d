// What the launcher sends for the ranks to start, and what comes back on the links besides
// control: the launch facts (MASTER_ADDR/PORT from rank 0's agent's hello), the spawn requests
// (small batches, each rank's profile variables built just before it is sent), where each rank's
// stdin comes from, and the output streams pushed over links.
#include <algorithm>

#include "env/compose.hpp"
#include "launch/launcher_impl.hpp"

namespace pm::launch {

namespace {

// Spawn requests go out in small batches, so that the launcher never holds every rank's
// environment at once.
constexpr std::size_t spawn_batch = 16;

}  // namespace

// Multi-host: MASTER_ADDR and MASTER_PORT come from rank 0's agent (an address of its host the
// others reach, a port free there); TF_CONFIG needs every node's address.
// With hosts to plan (host_plans.cpp), every host's plan comes first: a refusal must come before
// any rank starts anywhere.
void launcher::impl::decide_facts() {
  if (wants_shapes && !plan_hosts()) return;
  if (req.map.num_nodes() <= 1 && all_local()) {
    // One local host: the facts were decided before the start (127.0.0.1).
    facts_ready = true;
    for (std::uint32_t h = 0; h < hosts.size(); ++h) flush_spawns(h);
    return;
  }
  const std::uint32_t h0 = req.map.host_of_node(req.map.at(0).node);
  const auto& rank0 = hosts[h0];
  if (!rank0.agent) return;
  std::vector<const link::hello*> others;
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    const auto h = req.map.host_of_node(n);
    if (h != h0 && hosts[h].agent) others.push_back(&*hosts[h].agent);
  }
  const bool need_all = has(req.env.profiles, env_profile::tf);
  if (need_all && others.size() + 1 < req.map.num_nodes()) return;
  // This machine holds rank 0: its address must be one the other hosts reach, so wait for one.
  if (host_info(h0).local && others.empty() && req.map.num_nodes() > 1) return;
  const auto pick = [&](const link::hello& agent) {
    if (cfg.pick_address) return cfg.pick_address(agent, req.remote.iface, others);
    // Without a route lookup: the agent's first address, else its name.
    return agent.addrs.empty() ? agent.hostname
                               : agent.addrs.front().substr(0, agent.addrs.front().find('%'));
  };
  auto& facts = req.env.facts;
  facts.master_addr = pick(*rank0.agent);
  // A restarted incarnation's port is the one rank 0's agent gave at the restart.
  const auto port = inc.number > 0 && inc.port != 0 ? inc.port : rank0.agent->port;
  if (!req.master_port_fixed && port != 0) facts.master_port = port;
  facts.node_addrs.assign(req.map.num_nodes(), facts.master_addr);
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    const auto& hs = hosts[req.map.host_of_node(n)];
    if (hs.agent) facts.node_addrs[n] = pick(*hs.agent);
  }
  facts_ready = true;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) flush_spawns(h);
}

link::rank_spec launcher::impl::spec_of(std::uint32_t r) const {
  if (const auto* j = spawned_of(r)) {
    // A spawned rank: its own job's map and apps; stdin /dev/null (as under mpirun).
    link::rank_spec s;
    s.rank = r;
    s.app = j->first_app + j->map.at(r - j->first).app;
    if (!cfg.rank_variables) return s;
    // Its map holds the free slots only; the universe is the allocation's (as PMIx says).
    s.env = env_lines(rank_profile(j->map, r - j->first, req.env, req.map.total_slots()));
    return s;
  }
  link::rank_spec s;
  s.rank = r;
  s.app = req.map.at(r).app;
  if (const auto restarts = ctl.restarts_of(r); restarts > 0) return respawn_spec_of(r, restarts);
  if (cfg.rank_variables) s.env = env_lines(rank_profile(req.map, r, req.env));
  add_binding(r, s);  // after the profile's: the same layer (env/compose.hpp)
  s.stdin_from_launcher = r < cfg.stdin_of.size() && cfg.stdin_of[r] != stdin_source::none;
  return s;
}

void launcher::impl::flush_spawns(std::uint32_t h) {
  auto& hs = hosts[h];
  if (hs.pending_spawns.empty() || !link_usable(h)) return;
  auto ranks = std::move(hs.pending_spawns);
  hs.pending_spawns.clear();
  const bool local = host_info(h).local;
  touch(h);
  for (std::size_t first = 0; first < ranks.size();) {
    link::spawn_request m;
    // A local rank with its own stdin gets its descriptor with its own request.
    const bool own = local && ranks[first] < cfg.stdin_of.size() &&
                     cfg.stdin_of[ranks[first]] == stdin_source::own;
    const auto end = own ? first + 1 : std::min(ranks.size(), first + spawn_batch);
    m.ranks.reserve(end - first);
    for (auto i = first; i < end; ++i) m.ranks.push_back(spec_of(ranks[i]));
    first = end;
    std::optional<std::uint32_t> fed;  // the rank whose stdin goes with the request
    for (const auto& r : m.ranks) {
      if (r.stdin_from_launcher && !fed) fed = r.rank;
    }
    const auto at = hs.ep->send(m, local && fed ? 1 : 0);
    if (!fed) continue;
    if (local) {
      out->push_back(pass_stdin{h, at, *fed});
    } else {
      for (const auto& r : m.ranks) {
        if (r.stdin_from_launcher) out->push_back(pump_stdin{h, r.rank});
      }
    }
  }
}

// A retried link starts from nothing: every rank of the host is asked for again.
void launcher::impl::requeue_spawns(std::uint32_t h) {
  auto& hs = hosts[h];
  const auto ranks = ctl.processes_on_host(h);
  hs.pending_spawns.assign(ranks.begin(), ranks.end());
  flush_spawns(h);
}

// ---- output pushed over links ----

// A forwarded stream is opened at its first bytes (or its end, for a rank that wrote nothing).
// An agent's messages are checked here: a stream of a rank that is not on its host, bytes after
// the stream's end, a second end, are ignored rather than handed to the output layer.
static std::uint8_t open_bit(stream_kind s) {
  return s == stream_kind::out ? 1 : 2;
}

bool launcher::impl::pushed_stream_usable(std::uint32_t h, std::uint32_t rank, stream_kind stream) {
  if (!on_host(rank, h)) return false;
  if (stream == stream_kind::err && req.output.merge_stderr) return false;
  if (pushed.size() < ctl.size()) pushed.resize(ctl.size(), 0);
  const std::uint8_t bit = open_bit(stream);
  if ((pushed[rank] & (bit << 2)) != 0) return false;  // closed already
  if ((pushed[rank] & bit) == 0) {
    pushed[rank] |= bit;
    out->push_back(output_open{rank, stream});
  }
  return true;
}

void launcher::impl::close_pushed(std::uint32_t h, std::uint32_t rank, stream_kind stream) {
  if (!pushed_stream_usable(h, rank, stream)) return;
  pushed[rank] |= static_cast<std::uint8_t>(open_bit(stream) << 2);
  out->push_back(output_close{rank, stream});
}

// A lost host sends nothing more: the streams its ranks opened end here, or the output layer
// would wait for them forever (what they had sent is written; the rest is gone with the host).
void launcher::impl::end_pushed_streams(std::uint32_t h) {
  if (pushed.empty()) return;
  for (const auto rank : ctl.processes_on_host(h)) {
    if (rank >= pushed.size()) continue;
    for (const auto stream : {stream_kind::out, stream_kind::err}) {
      const std::uint8_t bit = open_bit(stream);
      if ((pushed[rank] & bit) == 0 || (pushed[rank] & (bit << 2)) != 0) continue;
      pushed[rank] |= static_cast<std::uint8_t>(bit << 2);
      out->push_back(output_close{rank, stream});
    }
  }
}

// Nothing more comes from a host whose link ended after its shutdown: a stream its agent had not
// closed (what the ranks left held the pipe until the shutdown's sweep; a rank that wrote
// nothing never opened its stream) ends here, or the job would wait for it for ever. A local
// agent's pipes end by themselves once the sweep ended their writers.
void launcher::impl::end_streams_after_shutdown(std::uint32_t h) {
  // Only for an end that was expected: a host being lost (its tree parent gone, its loss not yet
  // told) has its streams dropped by the controller with it.
  if (hosts[h].passes_pipes || !end_expected(hosts[h])) return;
  for (const auto rank : ctl.processes_on_host(h)) {
    if (!ctl.rank_report_of(rank).pid) continue;  // never started: no stream
    close_pushed(h, rank, stream_kind::out);
    close_pushed(h, rank, stream_kind::err);
  }
}

// A lost local agent (pmd SIGKILLed, by the OOM killer or a user) took its ranks with it (their
// parent-death signal), but not what they started: a child in the rank's process group keeps
// running, holds the rank's output pipe, and the job would wait for that pipe's end for ever.
// The launcher is on the same machine: it ends the group and stops waiting.
void launcher::impl::end_local_pipes(std::uint32_t h) {
  if (piped.empty()) return;
  for (const auto rank : ctl.processes_on_host(h)) {
    if (rank >= piped.size() || piped[rank] == 0) continue;
    piped[rank] = 0;
    out->push_back(end_orphaned_rank{h, rank, ctl.rank_report_of(rank).pid});
  }
}

void launcher::impl::on_output(std::uint32_t h, std::uint32_t rank, output_stream stream,
                               std::span<const std::uint8_t> bytes) {
  if (!pushed_stream_usable(h, rank, stream)) {
    hosts[h].ep->acknowledge(bytes.size());  // dropped, but the credit comes back
    touch(h);
    return;
  }
  out->push_back(output_bytes{
      h, rank, stream, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
}

}  // namespace pm::launch
