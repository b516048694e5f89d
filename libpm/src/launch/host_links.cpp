// Each host's agent link, as the launcher decides its life: opened at the host's first spawn
// (the hello, the job's setup and the spawn queued at once: no round trip), the hello, messages,
// the link going down, what carried it ending, retries with backoff, the loss (and a lost tree
// parent's subtree), giving up on hosts still being set up, the second interrupt, the shutdown.
// What happens when a host is lost: link_went_down, carrier_done and lose, in that order.
#include <signal.h>

#include <algorithm>

#include "launch/launcher_impl.hpp"

namespace pm::launch {

namespace {

std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace

link::endpoint_options launcher::impl::link_options(std::uint32_t h) const {
  link::endpoint_options o;
  o.self = link::role::launcher;
  o.nonce = cfg.nonce;
  if (!host_info(h).local) {
    o.hello_timeout = req.remote.hello_timeout;
    // A relayed host's heartbeats go hop by hop (link version 12): its tree parent times it and
    // says when it fell silent (child_closed.silent_ms); the launcher times only its own links.
    if (req.remote.heartbeat_interval.count() > 0 && !is_relayed(h)) {
      o.heartbeat_interval = req.remote.heartbeat_interval;
      o.silence_timeout =
          req.remote.heartbeat_interval * std::max<std::uint32_t>(1, req.remote.heartbeat_misses);
    }
  }
  return o;
}

agent_target launcher::impl::target_for(std::uint32_t h) const {
  agent_target t;
  t.host = h;
  t.info = host_info(h);
  const std::string path =
      t.info.local || req.remote.agent_path.empty() ? cfg.local_agent_path : req.remote.agent_path;
  t.agent_argv = {path, "--stdio", "--nonce", hex(cfg.nonce)};
  if (t.info.local) t.environment = base_env;
  return t;
}

link::job_setup launcher::impl::setup_for(std::uint32_t h) const {
  link::job_setup s;
  s.host = h;
  s.grace_ms = static_cast<std::uint32_t>(req.control.kill_grace.count());
  const bool local = host_info(h).local;
  if (!local && req.remote.heartbeat_interval.count() > 0) {
    s.heartbeat_ms = static_cast<std::uint32_t>(req.remote.heartbeat_interval.count());
    s.silence_ms = s.heartbeat_ms * std::max<std::uint32_t>(1, req.remote.heartbeat_misses);
  }
  s.forward_output = !local;
  s.streams = req.output.merge_stderr ? 1 : 2;
  s.cwd = cfg.cwd;
  s.base = mca_exports;
  if (!local) s.base.insert(s.base.end(), slurm_exports.begin(), slurm_exports.end());
  s.overrides = env_lines(req.env.overrides);
  for (std::uint32_t i = 0; i < req.apps.size(); ++i) {
    s.apps.push_back(
        link::app_spec{req.apps[i].argv, req.apps[i].wdir, env_lines(req.env.app_variables(i))});
  }
  if (pmix_facts) {
    s.pmix = pmix_facts;
    s.pmix->node = req.map.node_of_host(h).value_or(link::no_node);
  }
  // Only hosts of the first job (and spares, which may take some) are planned; a host only
  // spawned jobs use never pays for hwloc.
  if (wants_shapes && (req.map.node_of_host(h) || hosts[h].spare)) {
    s.topology = link::topology_request{};
  }
  if (const auto t = req.control.stall_timeout; t.count() > 0) {
    s.stall =
        link::stall_watch{static_cast<std::uint32_t>(std::min<std::int64_t>(t.count(), UINT32_MAX)),
                          static_cast<std::uint32_t>(link::stall_sample_period(t).count())};
  }
  return s;
}

launcher::impl::host_state& launcher::impl::link_to(std::uint32_t h) {
  auto& hs = hosts.at(h);
  if (!hs.ep && !hs.retrying) open_link(h);
  return hs;
}

void launcher::impl::open_link(std::uint32_t h) {
  // A relayed host's parent needs its own link first (the plan is over the job's hosts, so it
  // has ranks too); not while the parent waits to retry its own: its retry opens it.
  if (const auto* c = relay_of(h); c != nullptr && hosts[c->parent].attempts == 0) {
    link_to(c->parent);
  }
  auto& hs = hosts[h];
  ++hs.attempts;
  hs.agent.reset();
  hs.opened = false;
  hs.down = false;
  hs.closed = false;
  hs.loss_reported = false;
  hs.timed_out = false;
  hs.refused_bytes = false;
  decided(h, "open " + std::to_string(hs.attempts));
  hs.ep = std::make_unique<link::endpoint>(link_options(h));
  hs.ep->start(now, link::hello{});
  hs.ep->send(setup_for(h));
  for (const auto& j : spawned) hs.ep->send(j.add_for(h));  // jobs the ranks spawned so far
  touch(h);
  if (is_relayed(h)) {
    relay_open(h);
  } else {
    out->push_back(open_host{target_for(h)});
  }
}

void launcher::impl::touch(std::uint32_t h) {
  auto& hs = hosts[h];
  if (hs.touched) return;
  hs.touched = true;
  touched.push_back(h);
}

// After each input: a relayed host's bytes go to its parent as child_data (which touches the
// parent: the list grows while it is walked), every other host's are the driver's to write; each
// touched link's next deadline is told if it changed.
void launcher::impl::flush_touched() {
  for (std::size_t i = 0; i < touched.size(); ++i) {
    const auto h = touched[i];
    auto& hs = hosts[h];
    hs.touched = false;
    if (!hs.ep) continue;
    if (is_relayed(h)) {
      relay_output(h);
    } else if (!hs.ep->output().empty() && hs.opened && !hs.down) {
      out->push_back(write_host{h});
    }
    // A relayed host waiting for its parent to start it has no deadline of its own: its parent's
    // loss decides its fate (and its hello deadline counts from its start, relay_start).
    const bool waiting = !hs.opened && is_relayed(h);
    const auto at = hs.down || waiting ? std::nullopt : hs.ep->deadline();
    if (at != hs.deadline_told) {
      hs.deadline_told = at;
      out->push_back(link_deadline{h, at});
    }
  }
  touched.clear();
}

bool launcher::impl::link_usable(std::uint32_t h) const {
  return h < hosts.size() && hosts[h].ep && !hosts[h].down;
}

void launcher::impl::send_to(std::uint32_t h, const link::message& m) {
  if (!link_usable(h) || hosts[h].closed) return;
  hosts[h].ep->send(m);
  touch(h);
}

void launcher::impl::handle_link(std::uint32_t h, std::vector<link::link_event>& events) {
  for (auto& e : events) {
    auto& hs = hosts[h];
    if (hs.down || !hs.ep) return;
    if (auto* g = std::get_if<link::peer_greeted>(&e)) {
      on_greeted(h, g->peer);
    } else if (auto* m = std::get_if<link::message_in>(&e)) {
      on_message(h, m->msg, m->fds);
    } else if (auto* o = std::get_if<link::output_in>(&e)) {
      on_output(h, o->rank, o->stream, o->bytes);
    } else if (auto* r = std::get_if<link::relay_in>(&e)) {
      relay_from_parent(h, r->host, r->bytes);
    } else if (std::holds_alternative<link::credit_granted>(e)) {
      out->push_back(input_ready{h});
    } else if (auto* d = std::get_if<link::link_down>(&e)) {
      link_went_down(h, d->reason);
      return;
    }
    // input_in cannot reach the launcher: the endpoint refuses it.
  }
}

// Bytes of the link of `h`, from its carrier or relayed by its tree parent: a link they end
// (they are not the link: noise past what is skipped, garbage) ended by what came on it.
void launcher::impl::link_bytes(std::uint32_t h, std::span<const std::uint8_t> bytes) {
  auto& hs = hosts[h];
  if (!hs.ep || hs.down) return;
  events_lease lease(*this);
  hs.ep->received(now, bytes, lease.events);
  touch(h);
  hs.refused_bytes =
      !lease.events.empty() && std::holds_alternative<link::link_down>(lease.events.back());
  handle_link(h, lease.events);
  if (cfg.shrink_idle_links && hs.ep) hs.ep->shrink();
}

void launcher::impl::on_greeted(std::uint32_t h, const link::hello& agent) {
  hosts[h].agent = agent;
  hosts[h].setup_since.reset();  // a later link (a restart's) gets a deadline of its own
  decided(h, "greeted");
  if (is_relayed(h)) {
    relay_established(h);
  } else {
    out->push_back(host_established{h});
  }
  relay_parent_greeted(h);
  if (!facts_ready) decide_facts();
  if (facts_ready) flush_spawns(h);
  if (hosts[h].joining && !wants_shapes) host_joined(h);  // else once its shape came (on_shape)
}

void launcher::impl::on_message(std::uint32_t h, link::message& m, std::uint32_t fds) {
  // Descriptors only come from a local agent, with `started` (the output pipes); any other
  // message that claims some breaks the link (the driver cannot pair them).
  std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, link::started>) {
          // A rank's pipes travel with a `started` of its own: which rank would they be?
          if (fds > 0 && x.ranks.size() != 1) {
            link_went_down(h, "agent link: a 'started' message with descriptors names " +
                                  std::to_string(x.ranks.size()) + " ranks");
            return;
          }
          for (const auto& r : x.ranks) {
            // Output first, so that the output layer owns the pipes before the rank counts.
            if (fds > 0) {
              out->push_back(take_pipes{h, r.rank, fds});
              hosts[h].passes_pipes = true;
              if (piped.size() <= r.rank) piped.resize(std::size_t{r.rank} + 1, 0);
              piped[r.rank] = fds >= 2 ? 3 : 1;
            }
            queue.push_back(rank_started{r.rank, r.pid});
            spawned_rank_reported(h, r.rank, nullptr);
          }
        } else if constexpr (std::is_same_v<T, link::spawn_failed>) {
          queue.push_back(rank_spawn_failed{x.rank, x.code, x.reason});
          spawned_rank_reported(h, x.rank, &x.reason);
        } else if constexpr (std::is_same_v<T, link::exited>) {
          for (const auto& r : x.ranks) queue.push_back(rank_exited{r.rank, r.status});
        } else if constexpr (std::is_same_v<T, link::stream_closed>) {
          for (const auto& c : x.streams) close_pushed(h, c.rank, c.stream);
        } else if constexpr (std::is_same_v<T, link::restarted>) {
          on_restarted(h, x);
        } else if constexpr (std::is_same_v<T, link::shutdown_done>) {
          // The agent exits next; its end-of-file closes the link.
          hosts[h].shutdown_confirmed = true;
        } else if constexpr (std::is_same_v<T, link::agent_error>) {
          hosts[h].agent_error = x.text;
          // The agent gives the job up: it ends its ranks and exits. Their ends, which may come
          // over the link before its own, are not the cause; its reason is (a rank "killed by
          // SIGTERM" was named instead).
          if (!end_expected(hosts[h])) {
            const bool greeted = hosts[h].agent.has_value();
            if (greeted) mark_subtree(h);  // the links it relays end with it: lost in its line
            lose(h, "the agent said: " + x.text, !greeted);
          }
        } else if constexpr (std::is_same_v<T, link::agent_notice>) {
          out->push_back(say{host_info(h).name + ": " + x.text});
        } else if constexpr (std::is_same_v<T, link::host_shape>) {
          on_shape(h, x);
        } else if constexpr (std::is_same_v<T, link::host_quiet>) {
          on_quiet(h, x);
        } else if constexpr (std::is_same_v<T, link::stall_report>) {
          on_stall_report(h, x);
        } else if constexpr (std::is_same_v<T, link::pmix_server>) {
          hosts[h].pmix = std::make_unique<link::pmix_server>(x);
        } else if constexpr (std::is_same_v<T, link::pmix_spawn>) {
          on_pmix_spawn(h, x);
        } else if constexpr (std::is_same_v<T, link::pmix_publish>) {
          if (on_host(x.rank, h)) answer_data(store.publish(h, x));
        } else if constexpr (std::is_same_v<T, link::pmix_lookup>) {
          on_lookup(h, x);
        } else if constexpr (std::is_same_v<T, link::pmix_unpublish>) {
          if (on_host(x.rank, h)) answer_data({store.unpublish(h, x)});
        } else if constexpr (std::is_same_v<T, link::pmix_abort>) {
          on_pmix_abort(h, x);
        } else if constexpr (std::is_same_v<T, link::fence_contribution>) {
          on_fence(h, x);
        } else if constexpr (std::is_same_v<T, link::pmix_unfinalized>) {
          on_unfinalized(h, x);
        } else if constexpr (std::is_same_v<T, link::modex_request>) {
          on_modex_request(h, x);
        } else if constexpr (std::is_same_v<T, link::modex_reply>) {
          on_modex_reply(h, x);
        } else if constexpr (std::is_same_v<T, link::proc_table_request>) {
          on_proc_table_request(h, x);
        } else if constexpr (std::is_same_v<T, link::child_data> ||
                             std::is_same_v<T, link::child_closed>) {
          relay_from_parent(h, m);
        }
      },
      m);
}

// The link is over. Expected after a shutdown; otherwise the host is lost. How its carrier
// ended (ssh's last words, pmd killed by a signal) makes the best line, so the loss waits for
// it: briefly for a link that was up (a cut network may leave ssh running), or for as long as it
// takes before the hello, when that is all there is to say and ssh's 255 may be retried.
void launcher::impl::link_went_down(std::uint32_t h, std::string reason) {
  auto& hs = hosts[h];
  if (hs.down) return;
  hs.down = true;
  if (!hs.agent_error.empty()) reason = "the agent said: " + hs.agent_error;
  hs.down_reason = reason;
  const bool expected = end_expected(hs);
  hs.down_greeted = hs.agent.has_value();
  // The hosts it relays lose their links with it, now; they are reported right after it.
  if (hs.down_greeted) {
    if (!expected) mark_subtree(h);
    relay_parent_down(h);
  }
  if (!expected && hs.down_greeted && !hs.lost_with_parent) {
    // (A relayed host's silence is timed by its parent, link version 12: the launcher no longer
    // sees a child's silence before its partitioned parent's, and waits no longer for it.)
    hs.loss_timer =
        start_own_timer(std::chrono::milliseconds(300), own_timer{timer_kind::loss, h, 0});
  }
  close_carrier(h);
}

// A link that ends after the shutdown is no loss once its agent confirmed (or the job is over,
// or the host never answered). Before the confirmation it still is: clear_leftovers sends the
// shutdown while the controller waits for output that only a live agent can end.
bool launcher::impl::end_expected(const host_state& hs) const {
  return hs.shutdown_sent && (hs.shutdown_confirmed || finishing || hs.abandoned || !hs.agent);
}

// The launcher is done with the stream of `h`: the driver (or the relay, for a relayed host)
// ends what carried it and says how (carrier_done).
void launcher::impl::close_carrier(std::uint32_t h) {
  auto& hs = hosts[h];
  hs.down = true;
  touch(h);
  if (is_relayed(h)) {
    relay_close(h);
  } else {
    out->push_back(close_host{h});
  }
}

void launcher::impl::carrier_done(std::uint32_t h, const agent_end& end) {
  auto& hs = hosts.at(h);
  if (hs.closed || hs.attempts == 0) return;
  hs.closed = true;
  hs.down = true;
  relayed_link_closed(h);
  if (end_expected(hs) || hs.loss_reported || hs.lost_with_parent || hs.lost_told) {
    end_streams_after_shutdown(h);
    maybe_all_closed();
    return;
  }
  hs.loss_reported = true;
  cancel_own_timer(hs.loss_timer);
  const std::string reason = hs.down_reason;
  // A connection our own hello deadline ended is not tried again: the deadline was its whole
  // chance (ssh killed by SIGTERM exits 255, as a dropped connection does; four tries of 20 s
  // made a silent host cost 80 s).
  // Nor one whose bytes were not the link (login noise beyond the 64 KiB skipped): it would say
  // the same again.
  // Nor one whose hello deadline, which runs from its first try, has passed.
  const bool time_left = !hs.setup_since || req.remote.hello_timeout.count() <= 0 ||
                         now - *hs.setup_since < req.remote.hello_timeout;
  if (!hs.down_greeted && end.retryable && !hs.timed_out && !hs.refused_bytes && time_left &&
      hs.attempts <= req.remote.connect_retries && !finishing && (!setup_given_up || setup_kept)) {
    retry_later(h);
    return;
  }
  if (!hs.down_greeted) {
    // Its agent never answered: a set-up failure, in the carrier's words (ssh's reason), after
    // our deadline's or the link's when we ended it ("ssh was killed by SIGTERM" alone would hide
    // why).
    if ((hs.timed_out || hs.refused_bytes) && !end.how.empty()) {
      lose(h, reason + " (" + end.how + ")", true);
    } else {
      lose(h, end.how.empty() ? reason : end.how, true);
    }
    return;
  }
  lose(h, end.how.empty() ? reason : reason + " (" + end.how + ")");
}

// The carrier could not even start (the transport's open failed, the relay's parent is gone):
// nothing started there, a set-up failure.
void launcher::impl::stream_failed(std::uint32_t h, const std::string& reason) {
  auto& hs = hosts.at(h);
  if (!hs.ep || hs.closed) return;
  hs.down = true;
  hs.closed = true;
  touch(h);
  relayed_link_closed(h);
  lose(h, reason, true);
}

void launcher::impl::retry_later(std::uint32_t h) {
  auto& hs = hosts[h];
  // Jittered exponential backoff: 100 ms, 200 ms, 400 ms, ... plus up to half of it again.
  const auto base = std::chrono::milliseconds(100) * (1u << std::min(hs.attempts - 1, 6u));
  const auto wait =
      base + std::chrono::milliseconds(jitter() % static_cast<std::uint64_t>(base.count() / 2 + 1));
  decided(h, "retry");
  hs.ep.reset();
  hs.deadline_told.reset();
  hs.retrying = true;
  start_own_timer(wait, own_timer{timer_kind::retry, h, 0});
}

// `before_hello`: its agent never said hello (a set-up failure, exit 125; docs/exit-codes.md).
void launcher::impl::lose(std::uint32_t h, const std::string& reason, bool before_hello) {
  auto& hs = hosts[h];
  if (finishing || hs.abandoned) {
    maybe_all_closed();
    return;
  }
  if (hs.lost_told) return;
  hs.lost_told = true;
  decided(h, before_hello ? "lost before its hello" : "lost");
  if (req.restarts.max_restarts > 0) {
    loss_reasons.emplace(h, reason);
    // Silent (or relayed by a host that was lost): its agent may run on, cut off.
    if (hs.timed_out || hs.lost_with_parent) fence_lost_host();
  }
  // Its subtree is lost with it: one line names them all, and each is lost right after it.
  std::vector<std::uint32_t> with_it;
  for (const auto d : relayed_by(h)) {
    if (hosts[d].lost_with_parent && !hosts[d].lost_told) with_it.push_back(d);
  }
  std::sort(with_it.begin(), with_it.end());
  const auto lose_subtree = [&] {
    for (const auto d : with_it) {
      lose(d, relayed_loss(h), !hosts[d].agent.has_value());
    }
  };
  // Asked to clear an incarnation (early, by clear_leftovers, or between two): its answer will
  // not come.
  if (hs.restart_waited) {
    hs.restart_waited = false;
    --inc.waiting;
  }
  if (inc.between) {
    // No controller runs to be told: the restart is placed without this host (and the hosts it
    // relayed, which no longer report a loss of their own), or given up.
    relay_parent_down(h);
    end_pushed_streams(h);
    end_local_pipes(h);
    restart_host_lost(h, reason);
    lose_subtree();
    return;
  }
  if (hs.spare && !req.map.node_of_host(h)) quarantine(h, reason);
  relay_parent_down(h);  // a host that never came up started none of its children
  end_pushed_streams(h);
  end_local_pipes(h);
  std::string names;
  std::vector<std::uint32_t> greeted;  // lost in the same step: counted in its line
  for (const auto d : with_it) {
    names += (names.empty() ? "" : ", ") + host_info(d).name;
    if (hosts[d].agent) greeted.push_back(d);
  }
  queue.push_back(
      host_lost{h, with_it.empty() ? reason : reason + "; with it the hosts it relayed: " + names,
                before_hello, std::move(greeted), relayed_loss(h)});
  lose_subtree();
  pmix_host_lost(h);
}

// Closes a host's link before its agent answered, without calling it lost: the job is ending.
void launcher::impl::abandon(std::uint32_t h) {
  auto& hs = hosts[h];
  decided(h, "given up");
  hs.abandoned = true;
  hs.shutdown_sent = true;
  hs.pending_spawns.clear();
  if (hs.retrying) {
    hs.retrying = false;  // its retry timer finds it abandoned
    return;
  }
  if (!hs.ep || hs.closed) return;
  if (!hs.down) close_carrier(h);
}

// A second SIGINT/SIGTERM/SIGHUP: the controller sends SIGKILL to every rank at once; an agent
// that does not confirm within a moment (a silent host) is not waited for: its link closes and
// its ranks count as lost (its agent, cut off, ends them itself). mpirun exits at the second
// Ctrl-C; so does pmrun, with nothing left behind.
void launcher::impl::hurry() {
  if (hurry_timer != 0 || finishing) return;
  hurry_timer = start_own_timer(std::chrono::milliseconds(500), own_timer{timer_kind::hurry, 0, 0});
}

void launcher::impl::hurry_now() {
  if (finishing) return;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    auto& hs = hosts[h];
    if (!hs.ep || hs.closed || hs.lost_told || hs.abandoned) continue;
    if (ctl.live_on_host(h) == 0) continue;
    hs.shutdown_sent = true;  // its link's end is ours, not a loss to wait for
    if (!hs.down) close_carrier(h);
    lose(h, "not waited for after a second interrupt");
  }
}

// Bottom up: a tree parent's agent ends the agents it started when it shuts down (pmd's sweep
// closes their stdin), which would cut them off before they report their ranks' last output; so
// it gets its shutdown once the links it relays have closed.
void launcher::impl::shutdown_agents() {
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    auto& hs = hosts[h];
    if (hs.shutdown_sent || !hs.ep || hs.closed) continue;
    if (relays_open_links(h)) {
      hs.shutdown_waits = true;
      continue;
    }
    send_shutdown(h);
  }
}

void launcher::impl::send_shutdown(std::uint32_t h) {
  auto& hs = hosts[h];
  hs.shutdown_waits = false;
  hs.shutdown_sent = true;
  hs.pending_spawns.clear();
  if (hs.down) return;  // its carrier's end is on its way
  send_to(h, link::shutdown_request{});
}

bool launcher::impl::relays_open_links(std::uint32_t h) const {
  const auto it = tree_children.find(h);
  if (it == tree_children.end()) return false;
  for (const auto c : it->second) {
    if (hosts[c].ep && !hosts[c].closed) return true;
  }
  return false;
}

// A relayed host's link closed: its parent's shutdown may have waited for it.
void launcher::impl::relayed_link_closed(std::uint32_t h) {
  const auto* c = relay_of(h);
  if (c == nullptr) return;
  const auto p = c->parent;
  auto& ps = hosts[p];
  if (ps.shutdown_waits && !ps.shutdown_sent && ps.ep && !ps.closed && !relays_open_links(p)) {
    send_shutdown(p);
  }
}

// The hosts whose links went through `h` (its children in the plan, theirs, ...), breadth
// first, in time linear in the subtree (a lost parent among 10,000 hosts).
std::vector<std::uint32_t> launcher::impl::relayed_by(std::uint32_t h) const {
  std::vector<std::uint32_t> found;
  for (std::size_t i = 0; i <= found.size(); ++i) {
    const std::uint32_t parent = i == 0 ? h : found[i - 1];
    if (auto it = tree_children.find(parent); it != tree_children.end()) {
      found.insert(found.end(), it->second.begin(), it->second.end());
    }
  }
  return found;
}

void launcher::impl::mark_subtree(std::uint32_t h) {
  for (const auto d : relayed_by(h)) {
    auto& ds = hosts[d];
    if (ds.ep && !ds.lost_told) ds.lost_with_parent = true;
  }
}

}  // namespace pm::launch
