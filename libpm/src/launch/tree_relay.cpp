// The tree launch (docs/multihost.md, "The tree launch"): a host whose plan parent is another
// host P is reached through P's agent. Once P said hello (and has fewer than
// remote_launch::max_concurrent children being set up), P is sent child_open{host, argv}, argv
// being the complete ssh command line built with the same functions as the flat launch. The
// host's own link (hello, nonce, output credit) then runs end to end inside P's: what its endpoint
// writes goes to P as child_data{host, bytes}, and child_data from P is fed to it. P does not read
// it; a deeper level nests (child_data inside child_data). Its heartbeats go hop by hop (link
// version 12): P times it and reports its silence (child_closed.silent_ms), the launcher does not.
// child_closed from P ends the host's stream with how ssh ended (255 before the hello may be
// retried, as with the flat launch); P's link going down ends every child of P at once.
#include "launch/launcher_impl.hpp"
#include "launch/relayed_ssh_end.hpp"
#include "link/launch_plan.hpp"
#include "pm/error.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm::launch {

// The plan over the job's remote hosts in node order (ssh only, not through an embedder's
// transport).
void launcher::impl::plan_tree() {
  if (!req.remote.tree || cfg.embedder_transport || req.remote.launcher != agent_launcher::ssh) {
    return;
  }
  std::vector<std::uint32_t> remote;
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    const auto h = req.map.host_of_node(n);
    if (!host_info(h).local) remote.push_back(h);
  }
  const link::launch_plan_options shape{link::launch_shape::tree,
                                        std::max<std::uint32_t>(1, req.remote.tree_fanout)};
  for (std::uint32_t i = 0; i < remote.size(); ++i) {
    const auto step = link::plan_step(i, shape);
    if (step.parent == link::by_launcher) continue;
    if (tree_child.empty()) {
      tree_child.resize(hosts.size());
      relayed_host.resize(hosts.size());
    }
    relayed_host[remote[i]] = true;
    tree_child[remote[i]].parent = remote[step.parent];
    tree_children[remote[step.parent]].push_back(remote[i]);
  }
}

void launcher::impl::relay_open(std::uint32_t h) {
  auto& c = tree_child[h];
  const auto parent = c.parent;
  const auto close_timer = c.close_timer;
  c = relayed{};
  c.parent = parent;
  c.close_timer = close_timer;
  c.stage = relay_stage::queued;
  auto& p = relay_parents[parent];
  if (p.down) {
    relay_end(h, agent_end{"host " + host_info(parent).name +
                               ", whose agent was to start this one, was lost",
                           false});
    return;
  }
  p.queue.push_back(h);
  relay_start_ready(parent);
}

static std::uint32_t relay_cap(const remote_launch& r) {
  return std::max<std::uint32_t>(1, r.max_concurrent);
}

void launcher::impl::relay_start_ready(std::uint32_t parent) {
  auto& p = relay_parents[parent];
  while (p.greeted && !p.down && p.setting_up < relay_cap(req.remote) && !p.queue.empty()) {
    const auto h = p.queue.front();
    p.queue.pop_front();
    relay_start(h);
  }
}

void launcher::impl::relay_start(std::uint32_t h) {
  auto& c = tree_child[h];
  if (c.stage != relay_stage::queued) return;
  std::vector<std::string> argv;
  try {
    ssh::ssh_settings s;
    if (!req.remote.rsh_agent.empty()) s.agent = req.remote.rsh_agent;
    s.extra_args = req.remote.rsh_args;
    argv = ssh::ssh_argv(s, host_info(h), target_for(h).agent_argv);
  } catch (const pm::error& e) {
    c.stage = relay_stage::ended;
    later.push_back([this, h, what = std::string(e.what())] { stream_failed(h, what); });
    return;
  }
  c.stage = relay_stage::running;
  c.counted = true;
  ++relay_parents[c.parent].setting_up;
  send_to(c.parent, link::child_open{h, std::move(argv)});
  auto& hs = hosts[h];
  if (hs.ep && !hs.down) {
    hs.opened = true;
    // Its hello deadline counts from here, its first try's start (across retries).
    if (!hs.setup_since) hs.setup_since = now;
    hs.ep->stream_opened(*hs.setup_since);
    touch(h);
  }
}

void launcher::impl::relay_release_slot(relayed& c) {
  if (!c.counted) return;
  c.counted = false;
  auto& p = relay_parents[c.parent];
  if (p.setting_up > 0) --p.setting_up;
  relay_start_ready(c.parent);
}

// The host's stream is over (`how`): its parent said so (child_closed comes after every child_data
// of it, all fed already), or it is cut here. Its endpoint sees the end, and its carrier is then
// over with `how`.
void launcher::impl::relay_end(std::uint32_t h, agent_end how) {
  auto& c = tree_child[h];
  if (c.stage == relay_stage::ended || c.stage == relay_stage::none) return;
  const bool was_queued = c.stage == relay_stage::queued;
  c.stage = relay_stage::ended;
  c.how = std::move(how);
  cancel_own_timer(c.close_timer);
  relay_release_slot(c);
  if (was_queued) {
    // Its link never got a stream: it fails with the line.
    std::erase(relay_parents[c.parent].queue, h);
    later.push_back([this, h, line = c.how.how] { stream_failed(h, line); });
    return;
  }
  auto& hs = hosts[h];
  if (hs.ep && !hs.down) {
    std::vector<link::link_event> events;
    hs.ep->closed(now, events);
    handle_link(h, events);  // link_down: link_went_down, which asks relay_close
    return;
  }
  if (c.closing) later.push_back([this, h, how = c.how] { carrier_done(h, how); });
}

// The launcher is done with the relayed stream of `h`: the parent ends the ssh (stdin closed,
// SIGTERM) and says how with child_closed; a parent that cannot is lost, which ends it too.
// Bounded all the same (3 s).
void launcher::impl::relay_close(std::uint32_t h) {
  auto& c = tree_child[h];
  c.closing = true;
  if (c.stage == relay_stage::ended) {
    later.push_back([this, h, how = c.how] { carrier_done(h, how); });
    return;
  }
  if (c.stage == relay_stage::queued) {
    relay_end(h, agent_end{hosts[h].down_reason, false});  // the link's reason is the line
    return;
  }
  send_to(c.parent, link::child_close{h});
  if (c.close_timer == 0) {
    c.close_timer =
        start_own_timer(std::chrono::seconds(3), own_timer{timer_kind::relay_close, h, 0});
  }
}

void launcher::impl::relay_established(std::uint32_t h) {
  auto* c = relay_of(h);
  if (c == nullptr) return;
  c->established = true;
  relay_release_slot(*c);
}

void launcher::impl::relay_parent_greeted(std::uint32_t parent) {
  if (!tree_children.contains(parent)) return;
  relay_parents[parent].greeted = true;
  relay_start_ready(parent);
}

void launcher::impl::relay_parent_down(std::uint32_t parent) {
  if (!tree_children.contains(parent)) return;
  auto& p = relay_parents[parent];
  if (p.down) return;
  p.down = true;
  const agent_end how{relayed_loss(parent), false};
  for (const auto h : tree_children[parent]) {
    const auto stage = tree_child[h].stage;  // h is relayed: planned so
    if (stage == relay_stage::queued || stage == relay_stage::running) relay_end(h, how);
  }
}

// Bytes of `host`'s link that its parent relayed: fed to its endpoint where they lie (a relay
// frame's payload, inside its parent's, ...), so a host deep in the tree costs no copy per level.
void launcher::impl::relay_from_parent(std::uint32_t parent, std::uint32_t host,
                                       std::span<const std::uint8_t> bytes) {
  const auto* c = relay_of(host);
  if (c == nullptr || c->parent != parent || c->stage != relay_stage::running) return;
  link_bytes(host, bytes);
}

void launcher::impl::relay_from_parent(std::uint32_t parent, link::message& m) {
  if (auto* d = std::get_if<link::child_data>(&m)) {
    relay_from_parent(parent, d->host,
                      {reinterpret_cast<const std::uint8_t*>(d->bytes.data()), d->bytes.size()});
  } else if (auto* x = std::get_if<link::child_closed>(&m)) {
    auto* c = relay_of(x->host);
    if (c == nullptr || c->parent != parent) return;
    if (x->silent_ms != 0 && c->stage == relay_stage::running) {
      // Its parent heard nothing from it (heartbeats go hop by hop): the link ends as by our
      // own silence timeout; the parent has stopped its ssh already (no child_close for it).
      const auto h = x->host;
      c->stage = relay_stage::ended;
      c->how = agent_end{
          "its silence noticed by " + host_info(parent).name + ", which relayed its link", false};
      cancel_own_timer(c->close_timer);
      relay_release_slot(*c);
      auto& hs = hosts[h];
      if (hs.ep && !hs.down) {
        hs.timed_out = true;
        events_lease lease(*this);
        hs.ep->peer_silent(std::chrono::milliseconds(x->silent_ms), lease.events);
        touch(h);
        handle_link(h, lease.events);  // link_down: link_went_down, relay_close: carrier_done
      } else if (c->closing) {
        later.push_back([this, h, how = c->how] { carrier_done(h, how); });
      }
      return;
    }
    const auto target = target_for(x->host);
    relay_end(x->host, relayed_ssh_end(*x, host_info(x->host), target.agent_argv.front(),
                                       host_info(parent).name, c->established));
  }
}

// What a relayed host's endpoint wrote goes to its parent as child_data.
void launcher::impl::relay_output(std::uint32_t h) {
  auto& hs = hosts[h];
  const auto& c = tree_child[h];
  if (c.stage != relay_stage::running || !link_usable(c.parent)) return;
  auto bytes = hs.ep->output();
  if (bytes.empty()) return;
  auto& p = hosts[c.parent];
  if (p.closed) return;
  p.ep->send_relay(h, bytes);  // child_data, from one buffer into the other
  touch(c.parent);
  hs.ep->consume_output(bytes.size());
  if (cfg.shrink_idle_links) hs.ep->shrink();
}

}  // namespace pm::launch
