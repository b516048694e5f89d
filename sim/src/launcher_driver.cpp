// The driver of the launcher machine (pm::launch::launcher, the production launcher's decisions):
// the world stamps its inputs with virtual time and carries out its actions, as job_runner does
// with Asio. The world decides nothing here: open_host and close_host go to the virtual
// transport, write_host to the host's virtual stream, timers to the event queue, output to a
// counter. What an action needs answered (stream_opened, carrier_ended, output_ended,
// output_drained) is fed after the batch, never as a nested call.
#include <algorithm>
#include <cmath>

#include "pm/error.hpp"
#include "world_impl.hpp"

namespace pm::sim {

namespace {

std::chrono::milliseconds whole_ms(sim_time t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t);
}

}  // namespace

launch::launch_config world::launch_config_for() {
  launch::launch_config c;
  auto& r = c.request;
  r.map = std::move(own_map_);  // the world reads the launcher's from now on
  r.apps = make_job(s_).apps;
  r.mapping = s_.mapping;
  if (o_.env) r.env = *o_.env;
  r.control = s_.control;
  r.restarts.max_restarts = s_.max_restarts;
  r.restarts.spares = s_.spares;
  r.restarts.min_hosts = s_.min_hosts;
  r.restarts.per_rank = s_.enable_recovery;
  // Recovery without restarts lets the job run on past a failed rank: the launcher's rule.
  r.output.merge_stderr = s_.control.streams_per_rank < 2;
  // PMIx facts for every rank on every host cost O(ranks x hosts): only where a rank's script
  // makes PMIx calls or notices are asked for (only PMIx ranks can be told; world.cpp).
  r.pmix = pmix_on_;
  const auto& l = s_.latency;
  auto& rl = r.remote;
  rl.agent_path = "pmd";
  rl.heartbeat_interval = whole_ms(l.heartbeat_interval);
  rl.heartbeat_misses =
      rl.heartbeat_interval.count() <= 0
          ? 1
          : static_cast<std::uint32_t>(std::max<std::int64_t>(
                1, (whole_ms(l.heartbeat_timeout).count() + rl.heartbeat_interval.count() - 1) /
                       rl.heartbeat_interval.count()));
  rl.hello_timeout = whole_ms(l.hello_timeout);
  rl.max_concurrent = std::max<std::uint32_t>(1, l.concurrent_starts);
  rl.tree = l.fanout != 0;
  rl.tree_fanout = std::max<std::uint32_t>(1, l.fanout);
  rl.launcher = s_.connect_back ? agent_launcher::srun : agent_launcher::ssh;
  c.nonce = nonce_;
  c.seed = s_.seed;
  c.local_agent_path = "pmd";
  c.cwd = "/sim";
  c.stdin_of.assign(r.map.size(), launch::stdin_source::none);
  // Without env checks the ranks' variables are never looked at: not built (the old simulator
  // did not build them either). 100,000 mostly idle links keep no buffers.
  c.rank_variables = o_.env.has_value();
  c.shrink_idle_links = true;
  // A pure address: the agent's host name (the real launcher asks the kernel for a route).
  c.pick_address = [](const link::hello& agent, const std::vector<std::string>&,
                      const std::vector<const link::hello*>&) { return agent.hostname; };
  c.decisions = o_.decisions;
  // --report-bindings: pmrun's stderr lines, in order, among the emitted lines.
  if (s_.mapping.report_bindings)
    c.report_binding = [this](const std::string& text) { result_.lines.push_back(text); };
  c.watch_controller = [this](const event& in, std::vector<action>& actions) {
    watch_controller(in, actions);
  };
  return c;
}

void world::begin_input() {
  if (in_launcher_) throw error(errc::internal, "simulator: a nested launcher input");
  in_launcher_ = true;
  launcher_out_.clear();
}

// The launcher's actions, then the answers they asked for (each another input, in order), until
// nothing is left.
void world::carry_out_all() {
  launch::actions batch;
  for (;;) {
    // Carrying out a batch may queue answers, never grow the batch.
    batch.swap(launcher_out_);
    launcher_out_.clear();
    for (auto& a : batch) carry_out(a);
    batch.clear();
    if (answers_.empty()) break;
    auto a = std::move(answers_.front());
    answers_.pop_front();
    const auto t = link::link_time(now_);
    switch (a.what) {
      case launcher_answer::kind::stream_opened:
        launcher_->stream_opened(t, a.host, static_cast<std::int64_t>(a.value), launcher_out_);
        break;
      case launcher_answer::kind::carrier_ended:
        launcher_->carrier_ended(t, a.host, std::move(a.end), launcher_out_);
        break;
      case launcher_answer::kind::output_ended:
        launcher_->output_ended(t, a.host, static_cast<stream_kind>(a.stream), a.value,
                                launcher_out_);
        break;
      case launcher_answer::kind::output_taken:
        launcher_->output_taken(t, a.host, a.value, launcher_out_);
        break;
      case launcher_answer::kind::output_drained:
        launcher_->output_drained(t, launcher_out_);
        break;
    }
  }
  in_launcher_ = false;
}

void world::carry_out(launch::launch_action& a) {
  std::visit(
      overloaded{
          [&](launch::open_host& x) { open_host(x.target.host); },
          [&](launch::host_established& x) {
            hosts_[x.host].established = true;
            release_slot(x.host);
          },
          [&](launch::write_host& x) {
            hosts_[x.host].write_due = true;
            touch(x.host);
          },
          [&](launch::pass_stdin&) {
            correctness("the launcher passed descriptors to a simulated (remote) host");
          },
          [&](launch::close_host& x) { close_host(x.host); },
          [&](launch::link_deadline& x) {
            auto& h = hosts_[x.host];
            h.launcher_due = x.at ? x.at->count() : -1;
            touch(x.host);
          },
          [&](launch::start_timer_after& x) { start_timer(x.timer, x.after); },
          [&](launch::cancel_timer_id& x) { cancel_timer(x.timer); },
          [&](launch::say& x) { result_.lines.push_back(std::move(x.line)); },
          [&](launch::rank_changed& x) {
            const auto& rr = x.rank;
            if (rr.rank >= procs_.size()) return;
            // What the job tells its embedder must be what happened here: a rank it calls
            // running was started by its agent, one it calls exited ended that way.
            const auto& p = procs_[rr.rank];
            if (rr.state == rank_state::running && p.state == pstate::none)
              correctness("rank " + std::to_string(rr.rank) +
                          " was reported running, but no agent started it");
          },
          [&](launch::take_pipes&) {
            correctness("the launcher expected output pipes from a simulated (remote) host");
          },
          [&](launch::end_orphaned_rank&) {
            correctness("the launcher ended a process group of a simulated (remote) host");
          },
          [&](launch::output_open&) {},
          // Output is counted by the scripts, not carried: taken at once, nothing kept.
          [&](launch::output_bytes& x) {
            answer_later({launcher_answer::kind::output_taken, x.host, 0, x.bytes.size(), {}});
          },
          [&](launch::output_close& x) {
            const auto bytes = x.stream == stream_kind::out && x.rank < procs_.size()
                                   ? script(x.rank).out_bytes
                                   : 0;
            answer_later({launcher_answer::kind::output_ended,
                          x.rank,
                          static_cast<std::uint8_t>(x.stream),
                          bytes,
                          {}});
          },
          [&](launch::output_add_job&) {},
          [&](launch::output_drain&) {
            answer_later({launcher_answer::kind::output_drained, 0, 0, 0, {}});
          },
          [&](launch::output_give_up&) {},  // virtual output never congests
          [&](launch::pump_stdin&) {},
          [&](launch::release_stdin&) {},
          [&](launch::input_ready&) {},
          [&](launch::restarting& x) { new_incarnation(std::move(x.ended)); },
          [&](launch::rank_restarted& x) { rank_restarted(std::move(x.restart)); },
          // The simulator offers no discovery command (docs/simulator.md): it never asks for one.
          [&](launch::discover_hosts&) {
            correctness("the launcher ran a host discovery command the scenario has none of");
          },
          [&](launch::claim_slots&) {
            correctness("the launcher claimed slots: the simulated hosts are no DVM's");
          },
          [&](launch::finished& x) { on_finished(std::move(x.report)); },
      },
      a);
}

// The launcher restarts the job in place (docs/resilience.md): the incarnations it reports are
// numbered in order (what the contract checks of a restart is checked when the next incarnation's
// controller starts: next_incarnation).
void world::new_incarnation(incarnation_report ended) {
  if (ended.number != result_.restarts.size())
    correctness("incarnation " + std::to_string(ended.number) + " ended, but " +
                std::to_string(result_.restarts.size()) + " restarts came before it");
  result_.restarts.push_back(std::move(ended));
  line("-- restart " + std::to_string(result_.restarts.size()));
}

// --enable-recovery: a rank starts again alone. The restarts are numbered in order, within the
// budget, and only a rank whose failure the controller was told restarts.
void world::rank_restarted(rank_restart_report r) {
  if (!s_.enable_recovery)
    correctness("rank " + std::to_string(r.rank) +
                " was restarted alone without --enable-recovery");
  if (r.number != result_.rank_restarts.size() + 1)
    correctness("rank restart " + std::to_string(r.number) + " came after " +
                std::to_string(result_.rank_restarts.size()) + " restarts");
  if (r.number > s_.max_restarts)
    correctness("rank restart " + std::to_string(r.number) + " of a budget of " +
                std::to_string(s_.max_restarts));
  line("-- restart rank " + std::to_string(r.rank) + " (" + std::to_string(r.number) + ")");
  result_.rank_restarts.push_back(std::move(r));
}

void world::on_finished(job_report&& report) {
  if (finish_seen_) {
    correctness("the launcher finished twice");
    return;
  }
  finish_seen_ = true;
  // Every process of every job, each once (the controller's finish left them out).
  if (report.ranks.size() != ctl().size())
    correctness("the launcher's report lists " + std::to_string(report.ranks.size()) + " of " +
                std::to_string(ctl().size()) + " processes");
  result_.report = std::move(report);  // 100 bytes a rank: not copied
  line("-- finished");
}

// ---- timers: the launcher's and the controller's, as entries of the event queue ----

void world::start_timer(std::uint64_t id, std::chrono::milliseconds after) {
  std::uint32_t slot;
  if (!free_timers_.empty()) {
    slot = free_timers_.back();
    free_timers_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(timers_.size());
    timers_.emplace_back();
  }
  auto& t = timers_[slot];
  t.id = id;
  t.generation = (t.generation + 1) & sim_event::max_b;
  t.state = timer_state::armed;
  timer_slot_[id] = slot;
  at(now_ + std::chrono::duration_cast<sim_time>(after).count(), ek::launcher_timer, slot,
     t.generation);
}

void world::cancel_timer(std::uint64_t id) {
  auto it = timer_slot_.find(id);
  if (it == timer_slot_.end()) return;
  auto& t = timers_[it->second];
  timer_slot_.erase(it);
  if (t.state != timer_state::armed) return;
  // The driver's race: the timer already expired and its handler is queued, so it fires right
  // after the cancel; the launcher and the controller must ignore it.
  if (!rng_.chance(1, 4)) {
    t.state = timer_state::cancelled;
    return;
  }
  t.state = timer_state::racing;
  ++racing_timers_;
  ++t.generation;
  t.generation &= sim_event::max_b;
  at(now_, ek::launcher_timer, static_cast<std::uint32_t>(&t - timers_.data()), t.generation);
}

void world::on_timer(std::uint32_t slot, std::uint32_t generation) {
  auto& t = timers_[slot];
  if (t.generation != generation || t.state == timer_state::free) return;
  const auto state = t.state;
  const auto id = t.id;
  t.state = timer_state::free;
  free_timers_.push_back(slot);
  if (state == timer_state::cancelled) return;  // cancelled in time
  if (state == timer_state::racing) {
    --racing_timers_;
    ++result_.stats.timers_after_cancel;
  } else {
    timer_slot_.erase(id);
  }
  feed_launcher(
      [&](launch::actions& out) { launcher_->timer_fired(link::link_time(now_), id, out); });
}

}  // namespace pm::sim
