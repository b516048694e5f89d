// The launcher's side of the simulated world: the driver of the real controller (events in,
// actions carried out), the launch plan, and the launcher's end of every host's agent link,
// driven as job_runner drives its host_links: started/exited/spawn_failed/stream_closed become
// controller events, a link that goes down before the job's end becomes host_lost.
#include <signal.h>

#include <algorithm>

#include "link/launch_plan.hpp"
#include "world_impl.hpp"

namespace pm::sim {

// What the contract calls a failure, noted when the controller is fed it (the first decides).
void world::note_failure(cause_kind kind, std::uint32_t rank, std::uint32_t host, int code) {
  if (first_failure_.kind != cause_kind::none) return;
  first_failure_ = failure_seen{kind, rank, host, code, now_};
}

void world::feed_ctl(const event& e) {
  ++result_.stats.controller_events;
  trace_event(e);
  const bool was_finished = ctl_.finished();
  ctl_out_.clear();
  ctl_.handle(job_time(now_), e, ctl_out_);
  if (o_.tamper_actions) o_.tamper_actions(ctl_out_);
  if (was_finished && !ctl_out_.empty())
    correctness("the controller acted after it finished (" + std::to_string(ctl_out_.size()) +
                " actions)");
  for (std::size_t i = 0; i + 1 < ctl_out_.size(); ++i) {
    if (!std::holds_alternative<finish>(ctl_out_[i])) continue;
    correctness("the controller acted after it finished (" +
                std::to_string(ctl_out_.size() - i - 1) + " actions after its finish)");
    break;
  }
  // Actions may refer to ctl_out_ while executing; keep them in a local buffer.
  std::vector<action> actions;
  actions.swap(ctl_out_);
  for (auto& a : actions) {
    ++result_.stats.actions;
    trace_action(a);
    execute(a);
  }
  actions.clear();
  ctl_out_.swap(actions);
  if (ctl_.ending() && !setup_given_up_) give_up_setup();
}

void world::execute(action& a) {
  std::visit(
      overloaded{
          [&](spawn& x) { do_spawn(x); },
          [&](signal_ranks& x) { do_signal(std::move(x)); },
          [&](start_timer& x) {
            if (x.after == s_.control.kill_grace && grace_started_at_ < 0) grace_started_at_ = now_;
            timers_[x.timer] = timer_state::armed;
            at(now_ + std::chrono::duration_cast<sim_time>(x.after).count(), ek::ctl_timer,
               static_cast<std::uint32_t>(x.timer), static_cast<std::uint32_t>(x.timer >> 32));
          },
          [&](cancel_timer& x) {
            auto it = timers_.find(x.timer);
            if (it == timers_.end() || it->second != timer_state::armed) return;
            // The driver's race: the timer already expired and its handler is queued, so it
            // fires right after the cancel; the controller must ignore it.
            if (!rng_.chance(1, 4)) {
              it->second = timer_state::cancelled;
              return;
            }
            it->second = timer_state::racing;
            at(now_, ek::ctl_timer, static_cast<std::uint32_t>(x.timer),
               static_cast<std::uint32_t>(x.timer >> 32));
          },
          [&](emit& x) { result_.lines.push_back(x.line); },
          [&](clear_leftovers&) {
            for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
              const auto host = map_.host_of_node(node);
              const auto ranks = map_.ranks_on_host(host);
              send_down(host, link::signal_request{
                                  std::vector<std::uint32_t>(ranks.begin(), ranks.end()), SIGKILL});
            }
          },
          [&](finish& x) { do_finish(std::move(x)); },
          // pmrun sends it to the host's agent, whose PMIx server tells its ranks; the simulated
          // ranks have no PMIx client, so the agent takes it and nothing else follows.
          [&](notify_ranks& x) {
            ++result_.stats.notices;
            std::string host_name;
            if (!x.ranks.empty())
              host_name = map_.allocation().hosts[map_.at(x.ranks[0]).host].name;
            send_down(x.host, link::pmix_notify{x.kind, std::move(x.ranks), x.code,
                                                std::move(host_name), std::move(x.line)});
          },
      },
      a);
}

// When the agent of the job's node `node` starts, after the launch began: the launch plan says
// who starts it (the launcher or the agent of an earlier host) and as which child; each starter
// runs at most `concurrent_starts` starts at once, each an agent hop.
std::int64_t world::agent_start_delay(std::uint32_t node) {
  const auto& l = s_.latency;
  const link::launch_plan_options plan{
      l.fanout == 0 ? link::launch_shape::flat : link::launch_shape::tree,
      std::max<std::uint32_t>(1, l.fanout)};
  const std::int64_t cap = std::max<std::uint32_t>(1, l.concurrent_starts);
  std::int64_t delay = 0;
  for (std::uint32_t n = node;;) {
    const auto step = link::plan_step(n, plan);
    delay += (static_cast<std::int64_t>(step.child) / cap + 1) * l.agent_hop.count();
    if (step.parent == link::by_launcher) break;
    n = step.parent;
  }
  return delay;
}

link::endpoint_options world::launcher_link_options() const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  link::endpoint_options o;
  o.self = link::role::launcher;
  o.nonce = nonce_;
  o.hello_timeout = duration_cast<milliseconds>(s_.latency.hello_timeout);
  o.heartbeat_interval = duration_cast<milliseconds>(s_.latency.heartbeat_interval);
  o.silence_timeout = duration_cast<milliseconds>(s_.latency.heartbeat_timeout);
  return o;
}

// The first spawn for a host: its link's launcher end starts (magic and hello, then the job's
// setup and the spawn, pipelined), and its agent is started as the launch plan says.
void world::launch(std::uint32_t host) {
  auto& h = hosts_[host];
  h.launched = true;
  h.launcher_start = now_;
  h.launcher_end.emplace(launcher_link_options());
  h.launcher_end->start(link::link_time(now_), link::hello{});
  h.down_loud = true;
  touch(host);
  const auto hop = s_.latency.agent_hop.count();
  // Connect-back: one srun step starts every agent at once; otherwise the launch plan decides.
  std::int64_t start =
      now_ + (s_.connect_back ? hop : agent_start_delay(map_.node_of_host(host).value_or(0))) +
      jitter(sim_time(hop / 4));
  if (s_.connect_back) {
    gate_->expect(host, host_name(host));
    // A late call: the agent's connection (and so all it says) comes only then.
    if (h.late_call > start) start = h.late_call;
  }
  if (h.part_from >= 0 && start >= h.part_from && start < h.part_until) start = h.part_until;
  h.agent_start = start;
  h.down.last_arrival = start;
  h.up.last_arrival = start;
  h.spawn_free = start;
  if (!h.agent_fails && !h.crashed && !h.lost_call && !h.silent) ++agents_pending_;
  at(start, ek::agent_starts, host, 0);
}

void world::send_down(std::uint32_t host, const link::message& m) {
  auto& h = hosts_[host];
  if (!h.launcher_end || h.launcher_down) return;  // the launcher closed that link
  h.launcher_end->send(m);
  h.down_loud = true;
  touch(host);
}

// The job's setup, as the launcher sends it to every agent before its first spawn: with
// run_options::env, the environment the agents compose must be the contract's. Remote hosts:
// output travels over the link, and the agent learns the heartbeats it must keep.
link::job_setup world::setup_for(std::uint32_t host) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  link::job_setup j;
  j.host = host;
  j.grace_ms = static_cast<std::uint32_t>(s_.control.kill_grace.count());
  j.heartbeat_ms = static_cast<std::uint32_t>(
      duration_cast<milliseconds>(s_.latency.heartbeat_interval).count());
  j.silence_ms =
      static_cast<std::uint32_t>(duration_cast<milliseconds>(s_.latency.heartbeat_timeout).count());
  j.forward_output = true;
  j.streams = s_.control.streams_per_rank;
  const auto joined = [](const std::vector<env_var>& vars) {
    std::vector<std::string> out;
    out.reserve(vars.size());
    for (const auto& v : vars) out.push_back(v.name + "=" + v.value);
    return out;
  };
  const auto apps = std::max<std::size_t>(1, s_.apps.size());
  for (std::size_t a = 0; a < apps; ++a) {
    link::app_spec app;
    app.argv = {"app"};
    if (o_.env) app.env = joined(o_.env->app_variables(static_cast<std::uint32_t>(a)));
    j.apps.push_back(std::move(app));
  }
  if (o_.env) {
    j.base = joined(o_.env->base);
    j.overrides = joined(o_.env->overrides);
  }
  return j;
}

void world::do_spawn(const spawn& x) {
  if (x.host >= hosts_.size()) {
    correctness("spawn on host " + std::to_string(x.host) + ", which does not exist");
    return;
  }
  link::spawn_request req;
  req.ranks.reserve(x.ranks.size());
  for (auto rank : x.ranks) {
    if (rank >= procs_.size()) {
      correctness("spawn of rank " + std::to_string(rank) + ", which does not exist");
      continue;
    }
    auto& p = procs_[rank];
    if ((p.flags & spawn_seen) != 0)
      correctness("rank " + std::to_string(rank) + " was spawned twice");
    p.flags |= spawn_seen;
    if (p.host != x.host)
      correctness("rank " + std::to_string(rank) + " was spawned on " + host_name(x.host) +
                  ", the map put it on " + host_name(p.host));
    link::rank_spec spec;
    spec.rank = rank;
    spec.app = map_.at(rank).app;
    if (o_.env) {
      for (auto& v : profile_env(map_, rank, o_.env->profiles, o_.env->facts)) {
        spec.env.push_back(v.name + "=" + v.value);
      }
    }
    req.ranks.push_back(std::move(spec));
  }
  auto& h = hosts_[x.host];
  if (!h.launched) {
    launch(x.host);
    send_down(x.host, setup_for(x.host));
  }
  // Until rank 0's agent said hello the launch facts are not known: the spawn waits here (its
  // host's link is started, its setup sent), as job_runner holds it.
  if (!facts_ready_) {
    h.held.push_back(std::move(req));
    return;
  }
  send_down(x.host, req);
}

// A host's agent said hello to the launcher's end. Rank 0's host's decides the launch facts:
// every spawn held so far goes out (to links whose agent has not answered yet too: they are
// written as soon as their stream takes them, as job_runner's flush_spawns does).
void world::on_greeted(std::uint32_t host) {
  hosts_[host].greeted = true;
  if (facts_ready_ || setup_given_up_ || map_.size() == 0 || host != map_.at(0).host) return;
  facts_ready_ = true;
  for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
    auto& h = hosts_[map_.host_of_node(node)];
    for (auto& req : h.held) send_down(map_.host_of_node(node), req);
    h.held.clear();
  }
}

// The job is ending: nothing still being set up is waited for (job_runner's give_up_setup).
// Spawns held here never go out, hosts whose agent has not said hello are given up (their link
// closes; their ranks end as never started), in node order.
void world::give_up_setup() {
  setup_given_up_ = true;
  std::vector<std::uint32_t> withdrawn;
  for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
    const auto host = map_.host_of_node(node);
    auto& h = hosts_[host];
    if (!h.launched || h.launcher_down) continue;
    if (h.greeted) {
      for (const auto& req : h.held) {
        for (const auto& spec : req.ranks) withdrawn.push_back(spec.rank);
      }
      h.held.clear();
      continue;
    }
    h.held.clear();
    abandon(host);
    for (auto rank : map_.ranks_on_host(host)) {
      if (ctl_.rank_report_of(rank).state == rank_state::pending) withdrawn.push_back(rank);
    }
  }
  if (withdrawn.empty()) return;
  result_.stats.spawns_withdrawn += static_cast<std::uint32_t>(withdrawn.size());
  for (auto rank : withdrawn) procs_[rank].flags |= end_known;
  feed_ctl(spawn_withdrawn{std::move(withdrawn)});
}

// The launcher closes its end of a link whose agent has not answered (it ends the ssh): no loss,
// the job is ending. The agent, if it ever starts, finds the link closed and exits.
void world::abandon(std::uint32_t host) {
  auto& h = hosts_[host];
  h.abandoned = true;
  ++result_.stats.given_up_in_setup;
  h.shutdown_sent = true;
  last_progress_ = now_;
  if (gate_) gate_->forget(host);
  // What its end still holds goes out first (job_runner's close() writes what the stream takes),
  // then the end of the stream; the launcher's end is gone (no heartbeat, no deadline after it).
  h.down_loud = true;
  flush_end(host, h, true);
  h.launcher_down = true;
  h.launcher_end.reset();
  const auto t = arrival(h, h.down, h.agent_start);
  h.down.push_end(t);
  at(t, ek::link_arrival, host, 0);
  line("!! the launcher gives up on " + host_name(host) + " before its hello: the job is ending");
}

void world::do_signal(signal_ranks&& x) {
  if (x.signo == SIGKILL) {
    // SIGKILL only for ranks that outlive a whole grace: a grace timer must have run out.
    result_.stats.sigkills += static_cast<std::uint32_t>(x.ranks.size());
    const auto grace = std::chrono::duration_cast<sim_time>(s_.control.kill_grace).count();
    // A second SIGINT/SIGTERM/SIGHUP to the launcher escalates to SIGKILL at once.
    if (terminating_signals_ < 2 && (grace_started_at_ < 0 || now_ < grace_started_at_ + grace))
      correctness("SIGKILL to rank " + std::to_string(x.ranks.empty() ? 0 : x.ranks[0]) +
                  " before the kill grace (" + format_duration(sim_time(grace)) + ") expired");
  }
  for (auto rank : x.ranks) {
    if (rank < procs_.size()) procs_[rank].flags |= signalled;
    if (rank < procs_.size() && (procs_[rank].flags & end_known) != 0 && !finish_seen_)
      correctness(signal_name(x.signo) + " to rank " + std::to_string(rank) +
                  ", whose end the controller knew");
  }
  if (x.host >= hosts_.size()) return;
  send_down(x.host, link::signal_request{std::move(x.ranks), x.signo});
}

void world::do_finish(finish&& x) {
  finish_seen_ = true;
  result_.finish_time = sim_time(now_);
  result_.report = std::move(x.report);  // 100 bytes a rank: not copied
  check_report(result_.report);
  // The driver's part of the end: shut every agent down (they clear what is left); a link that
  // closes after that is expected.
  for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
    const auto host = map_.host_of_node(node);
    auto& h = hosts_[host];
    if (!h.launched || h.shutdown_sent) continue;
    h.shutdown_sent = true;
    send_down(host, link::shutdown_request{});
  }
}

// What the launcher's end of a host's link reported, in order (job_runner's on_message/on_down).
void world::on_launcher_events(std::uint32_t host, std::vector<link::link_event>& events) {
  for (auto& e : events) {
    if (hosts_[host].launcher_down) return;
    if (auto* m = std::get_if<link::message_in>(&e)) {
      on_agent_message(host, m->msg);
    } else if (auto* d = std::get_if<link::link_down>(&e)) {
      on_launcher_link_down(host, d->reason);
      return;
    } else if (std::holds_alternative<link::peer_greeted>(e)) {
      hash_.add(static_cast<std::uint64_t>(now_));
      hash_.add(0x700 + std::uint64_t{host});
      on_greeted(host);
    }
    // output_in: output bytes are counted by the scripts, not carried.
  }
}

void world::on_agent_message(std::uint32_t host, link::message& m) {
  std::visit(overloaded{
                 [&](link::started& x) {
                   feed_ctl(rank_started{x.rank, x.pid});
                 },
                 [&](link::spawn_failed& x) {
                   if (x.rank < procs_.size()) {
                     if ((procs_[x.rank].flags & end_known) == 0 && !ctl_.finished())
                       note_failure(cause_kind::spawn_failed, x.rank, host, x.code);
                     procs_[x.rank].flags |= end_known;
                   }
                   feed_ctl(rank_spawn_failed{x.rank, x.code, x.reason});
                 },
                 [&](link::exited& x) {
                   if (x.rank < procs_.size()) {
                     if ((procs_[x.rank].flags & end_known) == 0 && !x.status.success() &&
                         !ctl_.finished())
                       note_failure(cause_kind::rank_failed, x.rank, host, x.status.shell_code());
                     procs_[x.rank].flags |= end_known;
                   }
                   feed_ctl(rank_exited{x.rank, x.status});
                 },
                 [&](link::stream_closed& x) {
                   if (x.rank < procs_.size()) {
                     procs_[x.rank].seen_closed |=
                         static_cast<std::uint8_t>(x.stream == output_stream::out ? 1u : 2u);
                   }
                   feed_ctl(stream_closed{x.rank, x.stream, x.bytes});
                 },
                 [&](link::agent_error& x) {
                   line("   the agent on " + host_name(host) + " reports: " + x.text);
                 },
                 [&](auto&) {},  // shutdown_done: its end of the link closes next
             },
             m);
}

// A rank's abort request (MPI_Abort/PMIx_Abort), carried in order with its host's bytes.
void world::on_abort_request(std::uint32_t host, std::uint32_t rank, int status) {
  if (hosts_[host].launcher_down) return;
  if ((procs_[rank].flags & end_known) == 0 && !ctl_.finished()) {
    note_failure(cause_kind::abort_requested, rank, host, status == 0 ? 1 : status);
    saw_abort_ = true;
  }
  feed_ctl(abort_requested{rank, status, "simulated MPI_Abort"});
}

// The launcher's end of a host's link went down: the agent closed it, went silent, or never
// said hello. The launcher closes what carried the link (the agent sees that when it arrives).
// Before the job's end that is the host lost (as job_runner: a link that closes after the
// shutdown was sent is expected).
void world::on_launcher_link_down(std::uint32_t host, const std::string& reason) {
  auto& h = hosts_[host];
  if (h.launcher_down) return;
  h.launcher_down = true;
  last_progress_ = now_;
  if (gate_) gate_->forget(host);  // no caller becomes it any more
  const auto t = arrival(h, h.down, h.agent_start);
  h.down.push_end(t);
  at(t, ek::link_arrival, host, 0);
  if (h.shutdown_sent) return;
  if (h.part_from >= 0 && now_ >= h.part_from) h.partition_noticed = true;
  line("!! the launcher gives up on " + host_name(host) + ": " + reason);
  const bool faulted = h.crashed || h.agent_fails || (h.part_from >= 0 && now_ >= h.part_from) ||
                       h.lost_call || h.late_call >= 0 || h.call_refused || h.silent;
  if (!faulted)
    correctness(host_name(host) + " was lost though nothing happened to it (" + reason + ")");
  if (h.detect_bound >= 0 && now_ > h.detect_bound)
    correctness(host_name(host) + " was declared lost at " + format_duration(sim_time(now_)) +
                ", later than its link promises (" + format_duration(sim_time(h.detect_bound)) +
                ")");
  result_.hosts_lost.push_back(host_loss{host, sim_time(now_), reason, !h.greeted});
  if (!h.greeted) ++result_.stats.lost_before_hello;
  bool any_live = false;
  std::uint32_t first = 0;
  for (auto rank : map_.ranks_on_host(host)) {
    auto& p = procs_[rank];
    if ((p.flags & end_known) == 0 && !any_live) {
      any_live = true;
      first = rank;
    }
    p.flags |= end_known;
  }
  // Before its agent's hello the host never joined the launch: a set-up failure (125), which
  // ends the job whatever the policy; after it, a lost host (213).
  const bool before_hello = !h.greeted;
  if (any_live && !ctl_.finished()) {
    if (before_hello)
      note_failure(cause_kind::spawn_failed, first, host, exit_codes::launch_failed);
    else
      note_failure(cause_kind::host_lost, first, host, exit_codes::host_lost);
  }
  if (before_hello && any_live && !ctl_.ending() && !ctl_.finished() && forced_abort_at_ < 0)
    forced_abort_at_ = now_;
  feed_ctl(host_lost{host, reason, before_hello});
  // The host's output came over the link that just went down: the output layer sees the end of
  // every stream of it still open (also of ranks that had ended before the loss).
  for (auto rank : map_.ranks_on_host(host)) {
    auto& p = procs_[rank];
    if (p.state == pstate::none || p.state == pstate::failed) continue;
    for (std::uint8_t bit = 0; bit < 2; ++bit) {
      const auto mask = static_cast<std::uint8_t>(1u << bit);
      if ((streams_bits_ & mask) == 0 || (p.seen_closed & mask) != 0) continue;
      p.seen_closed |= mask;
      feed_ctl(stream_closed{rank, static_cast<stream_kind>(bit), 0});
    }
  }
}

}  // namespace pm::sim
