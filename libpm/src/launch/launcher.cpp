// The launcher machine's inputs, its controller, its timers and the job's end. The other
// concerns are in host_links.cpp, tree_relay.cpp, spawn_requests.cpp and pmix_routing.cpp
// (launcher_impl.hpp says which holds what).
#include <signal.h>

#include <algorithm>

#include "launch/launcher_impl.hpp"
#include "pm/error.hpp"

namespace pm::launch {

namespace {

std::string joined(const env_var& v) {
  std::string s;
  s.reserve(v.name.size() + 1 + v.value.size());
  s.append(v.name).push_back('=');
  s.append(v.value);
  return s;
}

}  // namespace

launcher::impl::impl(launch_config c)
    : cfg(std::move(c)),
      req(cfg.request),
      ctl(req.map, control_of(req)),
      hosts(req.map.allocation().hosts.size()),
      jitter(cfg.seed) {
  for (const auto& v : req.env.base) base_env.push_back(joined(v));
  for (const auto& v : req.env.base) {
    if (v.name.starts_with("OMPI_MCA_")) mca_exports.push_back(joined(v));
    if (v.name.starts_with("SLURM_")) slurm_exports.push_back(joined(v));
  }
  if (req.restarts.max_restarts > 0) {
    req.env.facts.max_restarts = req.restarts.max_restarts;
    req.env.facts.restart_count = 0;
    req.env.facts.run_id = req.restarts.run_id.empty() ? cfg.pmix_namespace : req.restarts.run_id;
  }
}

bool launcher::impl::all_local() const {
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    if (!host_info(req.map.host_of_node(n)).local) return false;
  }
  return true;
}

// One input: what it decides, then everything it queued (controller events, deferred steps),
// then each touched link's bytes and deadline as actions.
template <class F>
void launcher::impl::step(link_time t, actions& o, F&& f) {
  if (done) return;
  now = t;
  out = &o;
  f();
  settle();
  out = nullptr;
}

void launcher::impl::settle() {
  for (;;) {
    while (!queue.empty() && !done) {
      event e = std::move(queue.front());
      queue.pop_front();
      run_controller(std::move(e));
    }
    if (stall_due && !done) {
      check_stall();  // may queue job_stalled
      continue;
    }
    if (later.empty() || done) break;
    auto f = std::move(later.front());
    later.pop_front();
    f();
  }
  if (!done) flush_touched();
}

void launcher::impl::run_controller(event e) {
  std::vector<action> acts;
  const auto before = ctl.size();
  ctl.handle(now, e, acts);
  if (cfg.watch_controller) cfg.watch_controller(e, acts);
  if (std::holds_alternative<job_spawned>(e)) spawn_taken(before);
  tell_state_changes(e);
  release_stdin_after(e);
  // Ranks that end may leave only quiet hosts with live ranks.
  if (quiet_hosts > 0 &&
      (std::holds_alternative<rank_exited>(e) || std::holds_alternative<host_lost>(e) ||
       std::holds_alternative<rank_spawn_failed>(e))) {
    stall_due = true;
  }
  for (auto& a : acts) {
    if (cfg.decisions) record(a);
    execute(a);
  }
  if (ctl.ending() && !setup_given_up) give_up_setup();
}

void launcher::impl::record(const action& a) const {
  const auto ranks = [](const std::vector<std::uint32_t>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, spawn>) {
          decided(x.host, "spawn " + ranks(x.ranks));
        } else if constexpr (std::is_same_v<T, signal_ranks>) {
          decided(x.host, "signal " + ranks(x.ranks) + " " + signal_name(x.signo));
        } else if constexpr (std::is_same_v<T, notify_ranks>) {
          decided(x.host, "notify " + std::string(to_string(x.kind)) + " " + ranks(x.ranks));
        } else if constexpr (std::is_same_v<T, finish>) {
          decided(job_wide,
                  "finish " + std::to_string(x.report.exit_code) + " " + to_string(x.report.cause));
        }
      },
      a);
}

// The job is ending (a failure under the abort policy, a signal, the timeout, a cancel): it
// waits for nothing that was still being set up. Spawns held here (waiting for the launch
// facts, or for a link) never go out, and hosts whose agent has not said hello yet (ssh still
// connecting or retrying, a silent or unroutable host) are given up at once: their links close
// (the agent, if it started, sees the end and exits with whatever it started) and their ranks
// end as never started (docs/failure-semantics.md, "Set-up").
void launcher::impl::give_up_setup() {
  setup_given_up = true;
  // A launch that may restart keeps setting its hosts up: the restart waits for them (restarts.cpp,
  // setting_up); if it does not restart after all, finish_job gives them up then.
  setup_kept = may_restart();
  std::vector<std::uint32_t> withdrawn;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    auto& hs = hosts[h];
    if (hs.attempts == 0 || hs.lost_told || hs.abandoned) continue;
    if (hs.agent || setup_kept) {
      // Its agent is up (or may come for the restart): what it was sent is reported; what
      // waits here is not sent.
      withdrawn.insert(withdrawn.end(), hs.pending_spawns.begin(), hs.pending_spawns.end());
      hs.pending_spawns.clear();
      if (hs.agent) continue;
      for (const auto rank : ctl.processes_on_host(h)) {
        if (ctl.rank_report_of(rank).state == rank_state::pending) withdrawn.push_back(rank);
      }
      continue;
    }
    abandon(h);
    for (const auto rank : ctl.processes_on_host(h)) {
      if (ctl.rank_report_of(rank).state == rank_state::pending) withdrawn.push_back(rank);
    }
  }
  if (!withdrawn.empty()) queue.push_back(spawn_withdrawn{std::move(withdrawn)});
}

// A rank's stdin is the launcher's to hold while the rank may still need it from here: until a
// local rank started (its agent got its own copy with the spawn request) and until a remote one
// ended (it is pumped over the link meanwhile).
void launcher::impl::release_stdin_after(const event& e) {
  if (const auto* started = std::get_if<rank_started>(&e)) {
    if (started->rank < cfg.stdin_of.size() && host_info(ctl.host_of(started->rank)).local) {
      release_stdin_of(started->rank);
    }
  } else if (const auto* exited = std::get_if<rank_exited>(&e)) {
    release_stdin_of(exited->rank);
  } else if (const auto* failed = std::get_if<rank_spawn_failed>(&e)) {
    release_stdin_of(failed->rank);
  } else if (const auto* lost = std::get_if<host_lost>(&e)) {
    for (const auto rank : ctl.processes_on_host(lost->host)) release_stdin_of(rank);
  }
}

void launcher::impl::release_stdin_of(std::uint32_t rank) {
  if (rank >= cfg.stdin_of.size() || cfg.stdin_of[rank] == stdin_source::none) return;
  cfg.stdin_of[rank] = stdin_source::none;
  out->push_back(release_stdin{rank});
}

// rank_changed for the ranks the event may have moved: only rank events, a lost host and
// withdrawn spawns change a rank's state (the controller's rules), so this is O(1) per rank.
void launcher::impl::tell_state_changes(const event& e) {
  if (!cfg.rank_states) return;
  if (told.size() < ctl.size()) told.resize(ctl.size(), rank_state::pending);
  const auto tell = [&](std::uint32_t rank, const exit_status* ended = nullptr) {
    if (rank >= told.size()) return;
    auto rr = ctl.rank_report_of(rank);
    if (rr.state == told[rank]) return;
    const auto was = std::exchange(told[rank], rr.state);
    if (rr.state == rank_state::pending) {
      // A rank restarted alone (--enable-recovery) is pending again at once: the end it had is
      // told as it happened (its pid, its status), then its next start.
      if (ended == nullptr || was != rank_state::running) return;
      rr.state = rank_state::exited;
      rr.status = *ended;
    }
    out->push_back(rank_changed{std::move(rr)});
  };
  if (const auto* x = std::get_if<rank_started>(&e)) tell(x->rank);
  if (const auto* x = std::get_if<rank_exited>(&e)) tell(x->rank, &x->status);
  if (const auto* x = std::get_if<rank_spawn_failed>(&e)) tell(x->rank);
  if (const auto* x = std::get_if<host_lost>(&e)) {
    for (auto rank : ctl.processes_on_host(x->host)) tell(rank);
  }
  if (const auto* x = std::get_if<spawn_withdrawn>(&e)) {
    for (auto rank : x->ranks) tell(rank);
  }
}

// ---- the controller's actions ----

void launcher::impl::execute(action& a) {
  std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, spawn>) {
          if (req.restarts.per_rank) respawning(x.ranks);
          auto& hs = link_to(x.host);
          hs.pending_spawns.insert(hs.pending_spawns.end(), x.ranks.begin(), x.ranks.end());
          if (facts_ready) flush_spawns(x.host);
        } else if constexpr (std::is_same_v<T, signal_ranks>) {
          if (x.host < hosts.size() && hosts[x.host].ep) {
            send_to(x.host, link::signal_request{std::move(x.ranks), x.signo});
          }
        } else if constexpr (std::is_same_v<T, start_timer>) {
          out->push_back(start_timer_after{controller_timer_out(x.timer), x.after});
        } else if constexpr (std::is_same_v<T, cancel_timer>) {
          out->push_back(cancel_timer_id{controller_timer_out(x.timer)});
        } else if constexpr (std::is_same_v<T, notify_ranks>) {
          // Ranks failed, or the job is being ended, where the abort policy is off: the host's
          // agent tells its ranks with a PMIx event (docs/pmix.md, "Events"). The link keeps the
          // order, so the notice is there before any signal the same event sends.
          if (!pmix_facts) return;
          std::string where;
          if (!x.ranks.empty() && x.ranks.front() < ctl.size()) {
            where = host_info(ctl.host_of(x.ranks.front())).name;
          }
          send_to(x.host, link::pmix_notify{x.kind, std::move(x.ranks), x.code, std::move(where),
                                            std::move(x.line)});
        } else if constexpr (std::is_same_v<T, emit>) {
          out->push_back(say{std::move(x.line)});
        } else if constexpr (std::is_same_v<T, clear_leftovers>) {
          // The ranks are gone but something they left holds their output open: the agents
          // end it, by their shutdown, or by the restart that follows anyway.
          // (The report is asked for only where a restart could follow: at 800,000 ranks it is
          // 80 MB, built while every host's state is still there.)
          if (may_restart() && restartable(ctl.report())) {
            if (!inc.requested) request_restart();
          } else {
            shutdown_agents();
          }
        } else if constexpr (std::is_same_v<T, rank_restarting>) {
          rank_restart_begun(std::move(x.restart));
        } else if constexpr (std::is_same_v<T, finish>) {
          if (restartable(x.report, true)) {
            // The failed incarnation's report is kept whole: the launch may end with it, after
            // the next controller replaced this one.
            ranks_of_final(x.report);
            begin_restart(std::move(x.report));
          } else {
            finish_job(std::move(x.report));
          }
        }
      },
      a);
}

// Every stream reached its end: the output layer writes what it holds (output_drained), then
// the agents clear what the ranks left behind, then `finished`.
void launcher::impl::finish_job(job_report report) {
  // Hosts still being set up (kept for a restart that does not come, or spares whose ssh still
  // tries a host that does not answer) are given up now: no rank will start anywhere, and the
  // end must not wait for ssh's connect timeout.
  setup_kept = false;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if (setting_up(h)) abandon(h);
  }
  fill_resources(report);
  report.recovery = req.restarts.per_rank;
  if (req.restarts.max_restarts > 0 && !req.restarts.per_rank) {
    report.incarnations = std::move(inc.ended);
    // Ended between two incarnations: the last one is listed already, as it failed.
    if (!inc.between_ended) report.incarnations.push_back(summary_of(report));
    report.quarantined = std::move(inc.quarantined);
  }
  // A report from the controller's finish has no ranks' reports (finish_without_ranks: 104 bytes
  // a rank, 83 MB at 800,000, not held through the drain and the shutdown beside every host's
  // state). A finished controller's are final (it takes no event any more): they are taken from
  // it at `finished` (ranks_of_final), once the agents are gone.
  final_report = std::move(report);
  finishing = true;
  for (auto& [id, t] : timers) {
    if (t.kind != timer_kind::relay_close) out->push_back(cancel_timer_id{id});
  }
  std::erase_if(timers, [](const auto& t) { return t.second.kind != timer_kind::relay_close; });
  lookup_timers.clear();
  hurry_timer = 0;
  out->push_back(output_drain{});
}

void launcher::impl::maybe_all_closed() {
  if (!waiting_for_links || done) return;
  for (const auto& hs : hosts) {
    if (hs.attempts > 0 && !hs.closed) return;
  }
  for (const auto& [id, t] : timers) out->push_back(cancel_timer_id{id});
  timers.clear();
  done = true;
  // Moved, not copied: at 800,000 ranks the report is 80 MB. report() asks the controller after
  // this (its state is final).
  ranks_of_final(*final_report);
  out->push_back(finished{std::move(*final_report)});
  final_report.reset();
}

// ---- timers ----

std::uint64_t launcher::impl::start_own_timer(std::chrono::milliseconds after, own_timer t) {
  const auto id = next_timer++;
  timers.emplace(id, t);
  out->push_back(start_timer_after{id, after});
  return id;
}

void launcher::impl::cancel_own_timer(std::uint64_t& id) {
  if (id == 0) return;
  if (timers.erase(id) > 0) out->push_back(cancel_timer_id{id});
  id = 0;
}

void launcher::impl::own_timer_fired(const own_timer& t) {
  auto& hs = hosts[t.host];
  switch (t.kind) {
    case timer_kind::retry:
      if (finishing || hs.abandoned) return;
      hs.retrying = false;
      open_link(t.host);
      if (facts_ready) requeue_spawns(t.host);
      return;
    case timer_kind::loss:
      hs.loss_timer = 0;
      if (hs.loss_reported) return;
      hs.loss_reported = true;
      // A relayed host whose parent went down meanwhile (a partition silences both at once)
      // is reported with its parent.
      if (hs.lost_with_parent) return;
      lose(t.host, hs.down_reason);
      return;
    case timer_kind::hurry:
      hurry_timer = 0;
      hurry_now();
      return;
    case timer_kind::lookup:
      lookup_timers.erase({t.host, t.id});
      if (auto a = store.expire(t.host, t.id)) answer_data({*a});
      return;
    case timer_kind::relay_close:
      tree_child[t.host].close_timer = 0;
      relay_end(t.host, {});
      return;
    case timer_kind::fence:
      inc.fence_timer = 0;
      maybe_start_incarnation();
      return;
    case timer_kind::restart:
      inc.backoff_timer = 0;
      inc.backoff_over = true;
      maybe_start_incarnation();
      return;
    case timer_kind::stall:
      stall_timer_fired(t.id);
      return;
    case timer_kind::restart_leftover:  // id: the rank's restart count above, the rank below
      restart_held_up(static_cast<std::uint32_t>(t.id & 0xffffffffu),
                      static_cast<std::uint32_t>(t.id >> 32));
      return;
    case timer_kind::deadline:
      inc.deadline_timer = 0;
      if (inc.between) timed_out_between();
      return;
  }
}

// ---- the public face ----

launcher::launcher(launch_config config) : impl_(std::make_unique<impl>(std::move(config))) {}
launcher::~launcher() = default;
launcher::launcher(launcher&&) noexcept = default;
launcher& launcher::operator=(launcher&&) noexcept = default;

void launcher::start(link_time now, actions& out) {
  impl_->step(now, out, [this] {
    auto& m = *impl_;
    m.plan_tree();
    if (m.req.pmix) m.start_pmix();
    m.wants_shapes = needs_topology(m.req.mapping);
    // Spawns wait for the launch facts, and for every host's plan when hosts are planned.
    m.facts_ready = !m.wants_shapes && m.req.map.num_nodes() <= 1 && m.all_local();
    m.inc.launch_started = m.inc.started_at = m.now;
    m.queue.push_back(job_start{});
    m.later.push_back([&m] { m.open_spares(); });
  });
}

void launcher::stream_opened(link_time now, std::uint32_t host, std::int64_t carrier_pid,
                             actions& out) {
  impl_->step(now, out, [&] {
    auto& hs = impl_->hosts.at(host);
    if (!hs.ep || hs.down) return;
    hs.opened = true;
    hs.carrier_pid = carrier_pid;
    // Its hello deadline counts from its first try's stream, across ssh's retries.
    if (!hs.setup_since) hs.setup_since = now;
    hs.ep->stream_opened(*hs.setup_since);
    impl_->touch(host);
  });
}

void launcher::open_failed(link_time now, std::uint32_t host, std::string reason, actions& out) {
  impl_->step(now, out, [&] { impl_->stream_failed(host, reason); });
}

void launcher::received(link_time now, std::uint32_t host, std::span<const std::uint8_t> bytes,
                        actions& out) {
  impl_->step(now, out, [&] {
    (void)impl_->hosts.at(host);  // a host of the job, or out_of_range
    impl_->link_bytes(host, bytes);
  });
}

void launcher::stream_broken(link_time now, std::uint32_t host, const std::string& why,
                             actions& out) {
  impl_->step(now, out, [&] {
    auto& hs = impl_->hosts.at(host);
    if (!hs.ep || hs.down) return;
    std::vector<link::link_event> events;
    hs.ep->closed(now, events, why);
    impl_->handle_link(host, events);
  });
}

void launcher::carrier_ended(link_time now, std::uint32_t host, agent_end end, actions& out) {
  impl_->step(now, out, [&] { impl_->carrier_done(host, end); });
}

void launcher::link_tick(link_time now, std::uint32_t host, actions& out) {
  impl_->step(now, out, [&] {
    auto& hs = impl_->hosts.at(host);
    hs.deadline_told.reset();
    if (!hs.ep || hs.down) return;
    impl::events_lease lease(*impl_);
    auto& events = lease.events;
    hs.ep->tick(now, events);
    hs.timed_out = !events.empty() && std::holds_alternative<link::link_down>(events.back());
    impl_->touch(host);
    impl_->handle_link(host, events);
  });
}

void launcher::timer_fired(link_time now, std::uint64_t timer, actions& out) {
  impl_->step(now, out, [&] {
    auto& m = *impl_;
    if (timer < launcher_timers) {
      const auto id = m.controller_timer_in(timer);
      if (!m.finishing && id) m.queue.push_back(pm::timer_fired{*id});
      return;
    }
    auto it = m.timers.find(timer);
    if (it == m.timers.end()) return;  // cancelled: its firing was already on its way
    const auto t = it->second;
    m.timers.erase(it);
    m.own_timer_fired(t);
  });
}

void launcher::output_ended(link_time now, std::uint32_t rank, stream_kind stream,
                            std::uint64_t bytes, actions& out) {
  impl_->step(now, out, [&] {
    auto& piped = impl_->piped;
    if (rank < piped.size())
      piped[rank] &= static_cast<std::uint8_t>(stream == stream_kind::out ? ~1u : ~2u);
    impl_->queue.push_back(stream_closed{rank, stream, bytes});
  });
}

void launcher::output_taken(link_time now, std::uint32_t host, std::uint64_t bytes, actions& out) {
  impl_->step(now, out, [&] {
    auto& hs = impl_->hosts.at(host);
    if (!hs.ep || hs.down) return;
    hs.ep->acknowledge(bytes);
    impl_->touch(host);
  });
}

void launcher::output_unwanted(link_time now, std::uint32_t rank, stream_kind stream,
                               actions& out) {
  impl_->step(now, out, [&] {
    auto& m = *impl_;
    if (rank >= m.pushed.size() || rank >= m.ctl.size()) return;
    // Bits 1/2: open, 4/8: closed, 16/32: its agent was told.
    const std::uint8_t open = stream == stream_kind::out ? 1 : 2;
    auto& bits = m.pushed[rank];
    if ((bits & open) == 0 || (bits & (open << 2)) != 0 || (bits & (open << 4)) != 0) return;
    bits |= static_cast<std::uint8_t>(open << 4);
    const auto host = m.ctl.host_of(rank);
    if (m.link_usable(host)) m.send_to(host, link::output_unwanted{rank, stream});
  });
}

void launcher::output_drained(link_time now, actions& out) {
  impl_->step(now, out, [&] {
    auto& m = *impl_;
    if (!m.finishing || m.waiting_for_links) return;
    m.waiting_for_links = true;
    m.shutdown_agents();
    m.maybe_all_closed();
  });
}

void launcher::stdin_bytes(link_time now, std::uint32_t host, std::uint32_t rank,
                           std::span<const std::uint8_t> bytes, actions& out) {
  impl_->step(now, out, [&] {
    if (!impl_->link_usable(host) || bytes.empty()) return;
    auto& ep = *impl_->hosts[host].ep;
    if (bytes.size() > ep.credit()) throw error(errc::internal, "stdin beyond the link's credit");
    ep.send_input(rank, bytes);
    impl_->touch(host);
  });
}

void launcher::stdin_ended(link_time now, std::uint32_t host, std::uint32_t rank, actions& out) {
  impl_->step(now, out, [&] {
    if (impl_->link_usable(host)) impl_->send_to(host, link::input_closed{rank});
  });
}

void launcher::signal(link_time now, int signo, actions& out) {
  impl_->step(now, out, [&] {
    auto& m = *impl_;
    if (m.inc.between && (signo == SIGINT || signo == SIGTERM || signo == SIGHUP)) {
      // No rank runs: the launch ends here, by the signal, with what the agents cleared.
      m.interrupted_between(cause_kind::signal, signo,
                            "interrupted by " + signal_name(signo) + " while restarting");
      return;
    }
    if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP) {
      // The second one escalates (the controller's SIGKILL to every rank) and waits for no agent.
      if (++m.interrupts >= 2) {
        m.queue.push_back(signal_received{signo});
        m.hurry();
        m.out->push_back(output_give_up{});  // again at each: what came since is let go too
        return;
      }
    }
    // A stopped launcher reads nothing: the agents must not take its silence for a loss.
    for (std::uint32_t h = 0; h < m.hosts.size(); ++h) {
      auto& hs = m.hosts[h];
      if (!hs.ep || hs.down) continue;
      if (signo == SIGTSTP) hs.ep->suspend(now);
      if (signo == SIGCONT) hs.ep->resume(now);
      if (signo == SIGTSTP || signo == SIGCONT) m.touch(h);
    }
    m.queue.push_back(signal_received{signo});
  });
}

void launcher::cancel(link_time now, actions& out) {
  impl_->step(now, out, [&] {
    auto& m = *impl_;
    if (m.inc.between) {
      m.interrupted_between(cause_kind::abort_requested, 0, "cancelled while restarting");
      return;
    }
    m.queue.push_back(abort_requested{std::nullopt, 1, "cancelled"});
  });
}

void launcher::give_up_output(link_time now, actions& out) {
  impl_->step(now, out, [&] { impl_->out->push_back(output_give_up{}); });
}

void launcher::hosts_discovered(link_time now, discovery found, actions& out) {
  impl_->step(now, out, [&] { impl_->on_discovered(std::move(found)); });
}

void launcher::slots_claimed(link_time now, std::uint64_t id, std::string refusal, actions& out) {
  impl_->step(now, out, [&] { impl_->on_slots_claimed(id, refusal); });
}

std::span<const std::uint8_t> launcher::output(std::uint32_t host) const {
  const auto& hs = impl_->hosts.at(host);
  if (!hs.ep) return {};
  return hs.ep->output();
}

std::uint64_t launcher::output_offset(std::uint32_t host) const {
  const auto& hs = impl_->hosts.at(host);
  return hs.ep ? hs.ep->output_offset() : 0;
}

void launcher::consume_output(std::uint32_t host, std::size_t n) {
  auto& hs = impl_->hosts.at(host);
  if (!hs.ep) return;
  hs.ep->consume_output(n);
  if (impl_->cfg.shrink_idle_links && hs.ep->output().empty()) hs.ep->shrink();
}

std::uint64_t launcher::input_credit(std::uint32_t host) const {
  if (!impl_->link_usable(host)) return 0;
  return impl_->hosts[host].ep->credit();
}

bool launcher::takes_input(std::uint32_t host) const {
  return impl_->link_usable(host) && !impl_->finishing;
}

bool launcher::done() const noexcept {
  return impl_->done;
}
const controller& launcher::control() const noexcept {
  return impl_->ctl;
}
const rank_map& launcher::map() const noexcept {
  return impl_->req.map;
}
job_report launcher::report() const {
  if (!impl_->final_report) return impl_->ctl.report();
  auto r = *impl_->final_report;
  impl_->ranks_of_final(r);
  return r;
}

std::vector<agent_report> launcher::agents() const {
  std::vector<agent_report> list;
  for (std::uint32_t h = 0; h < impl_->hosts.size(); ++h) {
    const auto& hs = impl_->hosts[h];
    if (hs.attempts == 0) continue;
    agent_report a;
    a.host = h;
    if (hs.agent) a.pid = hs.agent->pid;
    if (hs.pmix) {
      a.pmix_uri = hs.pmix->uri;
      a.pmix_tmpdir = hs.pmix->tmpdir;
    }
    list.push_back(std::move(a));
  }
  return list;
}

controller_options control_of(const job_request& r) {
  controller_options c = r.control;
  c.streams_per_rank = r.output.merge_stderr ? 1 : 2;
  c.notify_failures = r.pmix;  // only PMIx ranks can be told (their agents' servers send events)
  c.rank_restarts = r.restarts.per_rank ? r.restarts.max_restarts : 0;
  c.finish_without_ranks = true;  // taken from the controller when needed (finish_job)
  // PRRTE's meaning: recovery without a budget restarts nothing and lets the others run on past
  // a failed rank, unless the failure policy was asked for (restart_policy::keep_abort).
  if (r.restarts.per_rank && r.restarts.max_restarts == 0 && !r.restarts.keep_abort)
    c.abort_on_failure = false;
  return c;
}

}  // namespace pm::launch
