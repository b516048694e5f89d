// The hosts' side of the simulated world: per host pmd's machine (pm::agent::host_machine: the
// node agent, its PMIx relay and its child relay) and the agent's end of its link, driven as pmd
// drives them (libpm/tools/pmd/main.cpp): every launcher message becomes agent::received, a link
// that goes down becomes agent::channel_lost, and every action is carried out as pmd carries it
// out: a send through the end, set_heartbeats on the end, the child actions by the child agents'
// carriers (relay.cpp), the PMIx actions by the modelled PMIx server (pmix_clients.cpp).
#include "transport/srun/connect_back.hpp"
#include "world_impl.hpp"

namespace pm::sim {

void world::on_agent_starts(std::uint32_t host, std::uint32_t start) {
  auto& h = hosts_[host];
  // A later start replaced this one, or the host is gone: no agent comes of it.
  if (start != (h.starts & sim_event::max_b) || h.crashed || h.ssh == carrier::none) {
    --agents_pending_;
    return;
  }
  h.ssh_failed = false;
  if (h.ssh_failures > 0) {
    // sshd drops the connection in its key exchange: ssh ends with 255, no agent ran.
    --h.ssh_failures;
    --agents_pending_;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::ssh_failure)];
    line("!! ssh to " + host_name(host) + " fails (255)");
    h.ssh_failed = true;
    h.exit_code = 255;
    const auto t = arrival(h, h.up, now_, 0);
    h.up.push_end(t);
    at(t, ek::link_arrival, host, 1);
    return;
  }
  if (h.agent_fails) {
    // ssh carries back the remote shell's complaint on stderr and ends with 127.
    --agents_pending_;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::agent_failure)];
    line("!! the agent on " + host_name(host) + " does not start");
    if (s_.connect_back) return;  // it never calls: the launcher hears nothing
    h.exit_code = 127;
    const auto t = arrival(h, h.up, now_, 0);
    h.up.push_end(t);
    at(t, ek::link_arrival, host, 1);
    return;
  }
  if (h.silent) {
    // Nothing answers there: no agent, not a byte (ssh waits for a banner that never comes).
    --agents_pending_;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::silent_host)];
    line("!! " + host_name(host) + " does not answer");
    return;
  }
  if (h.lost_call) {
    // Its call never arrives (a firewall, a wrong address): the launcher hears nothing at all.
    --agents_pending_;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::lost_call)];
    line("!! the call of the agent on " + host_name(host) + " is lost");
    return;
  }
  if (h.agent || h.agent_done) {
    --agents_pending_;  // one agent per host: the earlier one still runs, or ran and exited
    return;
  }
  if (s_.connect_back) {
    // It calls first: the greeting line, then its end of the link speaks on the same stream.
    if (h.late_call >= 0)
      ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::late_call)];
    const auto call = srun::greeting(token_, host_name(host));
    const auto t = arrival(h, h.up, now_, 0);
    h.up.push_bytes(t, std::span(reinterpret_cast<const std::uint8_t*>(call.data()), call.size()),
                    true);
    at(t, ek::link_arrival, host, 1);
  }
  h.agent.emplace(agent_options(host));
  h.agent_done = false;
  h.agent_link_down = false;
  link::endpoint_options o;
  o.self = link::role::agent;
  o.nonce = nonce_;  // from its command line (pmd --nonce)
  h.agent_end.emplace(o);
  link::hello mine;
  mine.pid = agent_pid_base + host;
  mine.hostname = host_name(host);
  h.agent_end->start(link::link_time(now_), std::move(mine));
  h.up_loud = true;
  touch(host);
}

void world::agent_send(std::uint32_t host, const link::message& m) {
  auto& h = hosts_[host];
  if (!h.agent_end || h.agent_link_down) return;  // pmd: the link is closed
  h.agent_end->send(m);
  h.up_loud = true;
  touch(host);
}

// A host's agent handles an event. The events its actions produce (a leftover's streams ending
// when its group is killed) are fed after the whole batch, as pmd's feed() does, never nested.
void world::feed_agent(std::uint32_t host, agent::host_event e) {
  if (in_agent_step_) {
    agent_backlog_.emplace_back(host, std::move(e));
    return;
  }
  in_agent_step_ = true;
  step_agent(host, std::move(e));
  for (std::size_t i = 0; i < agent_backlog_.size(); ++i) {
    auto next = std::move(agent_backlog_[i]);
    step_agent(next.first, std::move(next.second));
  }
  agent_backlog_.clear();
  in_agent_step_ = false;
}

void world::step_agent(std::uint32_t host, agent::host_event e) {
  auto& h = hosts_[host];
  if (!h.agent || h.agent_done || h.crashed) return;
  agent_out_.clear();
  h.agent->handle(agent::agent_time(now_), std::move(e), agent_out_);
  if (h.agent->holds_reports()) touch(host);  // they go out when the event is over
  std::vector<agent::host_action> actions;
  actions.swap(agent_out_);
  for (auto& a : actions) {
    std::visit(overloaded{
                   [&](agent::action& x) { carry_out_agent(host, x); },
                   [&](agent::pmix_action& x) { carry_out_pmix(host, x); },
                   [&](agent::child_action& x) { carry_out_child(host, x); },
                   [&](agent::start_pmix&) { start_pmix(host); },
                   [&](agent::set_heartbeats& x) {
                     // The launcher's heartbeats and silence timeout, from now on.
                     if (h.agent_end)
                       h.agent_end->set_heartbeats(link::link_time(now_), x.every, x.silence);
                   },
                   [&](agent::close_input&) {},   // no stdin is simulated
                   [&](agent::close_output&) {},  // nor a failing destination
               },
               a);
  }
  actions.clear();
  agent_out_.swap(actions);
  flush_host_batches(host);
}

void world::carry_out_agent(std::uint32_t host, agent::action& a) {
  std::visit(overloaded{
                 [&](agent::spawn_rank& x) { start_process(host, x.spec); },
                 [&](agent::signal_group& x) {
                   const auto rank = x.pgid - pid_base;
                   if (rank < 0 || rank >= static_cast<std::int64_t>(procs_.size()) ||
                       procs_[static_cast<std::uint32_t>(rank)].host != host) {
                     correctness("the agent on " + host_name(host) +
                                 " signalled a process group it does not own (" +
                                 std::to_string(x.pgid) + ")");
                     return;
                   }
                   deliver_signal(static_cast<std::uint32_t>(rank), x.signo);
                 },
                 [&](agent::send& x) { agent_send(host, x.msg); },
                 [&](agent::start_timer& x) {
                   at(now_ + std::chrono::duration_cast<sim_time>(x.after).count(), ek::agent_timer,
                      host, static_cast<std::uint32_t>(x.timer));
                 },
                 [&](agent::reap_orphans&) {},
                 // pmd sweeps in the same turn of its loop; the result comes back as the next
                 // event (after this step, never nested).
                 [&](agent::sweep&) { sweeps_due_.push_back(host); },
                 [&](agent::exit_agent& x) { agent_exits(host, x.code); },
                 // A restart's: after this step too (pmd's turn), and what it forgets, at once.
                 [&](agent::sweep_ranks&) { rank_sweeps_due_.push_back(host); },
                 [&](agent::forget_ranks&) { forget_ranks(host); },
                 [&](agent::forget_rank& x) { forget_rank(host, x.rank); },
                 // Answered at once, as pmd reads /proc in the same turn (after this step).
                 [&](agent::sample_ranks& x) { sample_ranks(host, x); },
             },
             a);
}

// What one agent step started or signalled becomes one event per kind: pmd forks a spawn
// request's ranks in one turn of its loop and reports them in one write, and the ranks that
// one message signals react together (in a seed-chosen order) after one reaction time.
void world::flush_host_batches(std::uint32_t host) {
  if (!spawn_batch_.empty()) {
    std::int64_t last = now_;
    for (const auto& e : spawn_batch_) last = std::max(last, e.value);
    const auto slot = batch_pool_.take();
    std::swap(batch_pool_[slot], spawn_batch_);
    at(last, ek::spawned, host, slot);
  }
  if (!kill_batch_.empty()) {
    const auto slot = batch_pool_.take();
    std::swap(batch_pool_[slot], kill_batch_);
    at(now_ + rng_.between(0, 10'000), ek::reacted, host, slot);
  }
  if (!term_batch_.empty()) {
    const auto slot = batch_pool_.take();
    std::swap(batch_pool_[slot], term_batch_);
    at(now_ + jitter(s_.latency.reaction), ek::reacted, host, slot);
  }
}

// The agent's end of the link reported these, in order (pmd's on_link_events).
void world::on_agent_events(std::uint32_t host, std::vector<link::link_event>& events) {
  for (auto& e : events) {
    auto& h = hosts_[host];
    if (h.agent_link_down || !h.agent || h.agent_done) return;
    if (auto* m = std::get_if<link::message_in>(&e)) {
      if (std::holds_alternative<link::shutdown_request>(m->msg)) h.shutdown_seen = true;
      feed_agent(host, agent::received{std::move(m->msg)});
    } else if (auto* d = std::get_if<link::link_down>(&e)) {
      h.agent_link_down = true;
      h.agent_detect_at = now_;
      last_progress_ = now_;
      if (h.part_from >= 0 && now_ >= h.part_from) h.partition_noticed = true;
      line("!! the agent on " + host_name(host) + " gives up on the launcher: " + d->reason);
      hash_.add(static_cast<std::uint64_t>(now_));
      hash_.add(0x800 + std::uint64_t{host});
      agent_reasons_.emplace_back(host, d->reason);
      // The host machine ends the child agents too (their agents see their launcher gone).
      feed_agent(host, agent::channel_lost{d->reason});
      return;
    }
    // peer_greeted: nothing to do; input_in: no stdin is simulated.
  }
}

// The agent exits: what its end still holds goes out, then its side of the stream ends (its
// starter sees end-of-file; ssh exits with `code`).
void world::agent_exits(std::uint32_t host, int code) {
  auto& h = hosts_[host];
  if (h.agent_done) return;
  h.agent_done = true;
  h.exit_code = code;
  --agents_pending_;
  flush_agent(host, h, now_, true);
  const auto t = arrival(h, h.up, now_, 0);
  h.up.push_end(t);
  at(t, ek::link_arrival, host, 1);
  h.agent_end.reset();
  // Its machine goes with it (about 700 bytes a host: at the shutdown of 100,000 hosts, the
  // launcher's final report is built as the last agents exit, not beside all of them).
  h.agent.reset();
}

}  // namespace pm::sim
