// The run loop of the simulated world and its public entry points (docs/simulator.md). The rest of
// the world lives in a file per concept: see world_impl.hpp.
#include "link/launch_plan.hpp"
#include "world_impl.hpp"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <new>

#include "pm/error.hpp"

namespace pm::sim {

const char* to_string(verdict v) noexcept {
  switch (v) {
    case verdict::ok:
      return "ok";
    case verdict::correctness:
      return "correctness failure";
    case verdict::liveness:
      return "liveness failure";
    case verdict::crash:
      return "crash";
  }
  return "?";
}

int exit_code(verdict v) noexcept {
  switch (v) {
    case verdict::ok:
      return 0;
    case verdict::crash:
      return 10;
    case verdict::liveness:
      return 11;
    case verdict::correctness:
      return 12;
  }
  return 12;
}

std::string hash_text(std::uint64_t hash) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

std::string run_result::explain() const {
  std::string out = std::string(to_string(outcome));
  for (const auto& p : problems) out += "\n  " + p;
  out += "\nreplay: " + replay;
  return out;
}

std::uint32_t encode(exit_status s) {
  return s.is_signal() ? 0x10000u | static_cast<std::uint32_t>(s.signal())
                       : static_cast<std::uint32_t>(s.code());
}
exit_status decode(std::uint32_t v) {
  return (v & 0x10000u) != 0 ? exit_status::signaled(static_cast<int>(v & 0xffffu))
                             : exit_status::exited(static_cast<int>(v));
}

world::world(const scenario& s, const run_options& o)
    : s_(s),
      o_(o),
      rng_(s.seed),
      own_map_(map_job(make_job(s), make_allocation(s))),
      nonce_(rng_.next()),
      procs_(map_->size()),
      hosts_(map_->allocation().hosts.size()) {
  const auto n = map_->size();
  ranks_before_ = n;
  for (std::uint32_t node = 0; node < map_->num_nodes(); ++node) {
    const auto host = map_->host_of_node(node);
    for (auto rank : map_->ranks_on_host(host)) procs_[rank].host = host;
  }
  scripts_.push_back(s.default_script);
  // MPMD: an app's script for its ranks (a rank's own script, below, still wins).
  std::vector<std::uint32_t> app_script(s.apps.size(), 0);
  for (std::size_t i = 0; i < s.apps.size(); ++i) {
    if (!s.apps[i].script) continue;
    app_script[i] = static_cast<std::uint32_t>(scripts_.size());
    scripts_.push_back(*s.apps[i].script);
  }
  if (std::any_of(app_script.begin(), app_script.end(), [](auto i) { return i != 0; })) {
    for (std::uint32_t rank = 0; rank < n; ++rank)
      procs_[rank].script = app_script[map_->at(rank).app];
  }
  check_targets(s, static_cast<std::uint32_t>(hosts_.size()), n);
  for (const auto& [rank, script] : s.scripts) {
    procs_[rank].script = static_cast<std::uint32_t>(scripts_.size());
    scripts_.push_back(script);
  }
  if (s.connect_back) {
    // The job's token, drawn only in connect-back runs (other runs keep their trace hashes).
    static constexpr char digits[] = "0123456789abcdef";
    for (int i = 0; i < 64; ++i) token_.push_back(digits[rng_.next() & 15]);
    gate_.emplace(token_);
  }
  if (s.latency.fanout != 0 && !s.connect_back) {
    // The tree over the job's hosts in node order (the launcher machine's plan_tree): a host
    // whose relaying parent was struck is lost with it, even if it was never started.
    const link::launch_plan_options shape{link::launch_shape::tree, s.latency.fanout};
    for (std::uint32_t node = 0; node < map_->num_nodes(); ++node) {
      const auto step = link::plan_step(node, shape);
      if (step.parent == link::by_launcher) continue;
      hosts_[map_->host_of_node(node)].plan_parent = map_->host_of_node(step.parent);
    }
  }
  // PMIx facts on every host only where a rank calls a fence or a spawn, or notices are asked
  // for (pmix_clients.cpp): every host would hold every rank's place.
  const auto calls = [](const process_script& p) { return !p.calls.empty(); };
  pmix_on_ = s.control.notify_failures || std::any_of(scripts_.begin(), scripts_.end(), calls);
  if (pmix_on_) {
    spawned_script_ = static_cast<std::uint32_t>(scripts_.size());
    scripts_.push_back(s.default_script);
    scripts_.back().calls.clear();
  }
  for (const auto& f : s.faults) plan(f);
  link::append_message(heartbeat_frame_, link::heartbeat{});
  launcher_.emplace(launch_config_for());
  map_ = &launcher_->map();
  max_events_ = o.max_events != 0 ? o.max_events : 64ull * n + 1'000'000;
  streams_bits_ = s.control.streams_per_rank >= 2 ? 3 : s.control.streams_per_rank == 1 ? 1 : 0;
}

void world::at(std::int64_t t, ek kind, std::uint32_t a, std::uint32_t b) {
  t = std::clamp<std::int64_t>(t, 0, max_key_time);
  std::uint64_t key = (static_cast<std::uint64_t>(t) << 16) | (rng_.next() >> 48);
  key = std::max(key, queue_.last());  // due now: after the event being handled
  if (b > sim_event::max_b) throw error(errc::internal, "simulator: event field out of range");
  if (kind != ek::link_tick) ++pending_work_;
  queue_.push(sim_event{key, a, (static_cast<std::uint32_t>(kind) << 24) | b});
}

void world::problem(verdict v, std::string text) {
  if (result_.outcome == verdict::ok || result_.outcome == verdict::correctness)
    result_.outcome = v;
  if (result_.problems.size() < 20)
    result_.problems.push_back("at " + format_duration(sim_time(now_)) + ": " + std::move(text));
}

// Settled: what is left in the queue is stale (natural ends of processes that were killed,
// timers of a finished controller, heartbeats); nothing can change any more.
bool world::settled() const {
  return finish_seen_ && live_procs_ == 0 && leftovers_alive_ == 0 && agents_pending_ == 0 &&
         racing_timers_ == 0;
}

// Nothing is queued but the link endpoints' timers, and for longer than any of them needs to
// notice a silent peer: only heartbeats can follow, forever. That is the "no events left" of a
// world whose links are alive (a deadlock: the job waits for something that never comes).
bool world::idle_too_long() const {
  if (pending_work_ != 0) return false;
  const auto& l = s_.latency;
  const auto bound = std::max(l.hello_timeout, l.heartbeat_timeout) + l.heartbeat_interval +
                     l.link + l.link_jitter + std::chrono::milliseconds(1);
  return now_ - last_progress_ > bound.count();
}

run_result world::run() {
  result_.replay = s_.replay_command();
  bool idle = false;
  try {
    at(0, ek::job_start, 0, 0);
    while (!queue_.empty()) {
      const sim_event e = queue_.top();
      if (e.t() > o_.max_time.count()) {
        liveness("the virtual time limit (" + format_duration(o_.max_time) +
                 ") was reached before the job finished");
        break;
      }
      if (result_.stats.events >= max_events_) {
        liveness("the event budget (" + std::to_string(max_events_) +
                 " events) was spent before the job finished");
        break;
      }
      queue_.pop();
      now_ = e.t();
      ++result_.stats.events;
      if (e.kind() != ek::link_tick) {
        --pending_work_;
        last_progress_ = now_;
      }
      dispatch(e);
      run_sweeps();
      flush_touched();
      if (settled()) break;
      if (!finish_seen_ && idle_too_long()) {
        idle = true;
        break;
      }
    }
    result_.end_time = sim_time(now_);
    if (queue_.empty() || finish_seen_ || idle) final_checks();
  } catch (const std::bad_alloc&) {
    throw;  // the machine's limit, not a crash of what is simulated: the caller's to handle
  } catch (const std::exception& ex) {
    result_.outcome = verdict::crash;
    result_.problems.push_back("at " + format_duration(sim_time(now_)) + ": " + ex.what());
  }
  // Finished is what a driver sees: the finish action (the controller's own flag alone would
  // leave a real driver waiting).
  result_.finished = finish_seen_;
  if (!result_.finished) result_.report = launcher_->report();
  for (const auto& h : hosts_) {
    if (h.partition_fired && !h.partition_noticed) ++result_.stats.partitions_healed;
  }
  for (auto& [host, reason] : agent_reasons_) {
    const auto& h = hosts_[host];
    result_.agents_lost.push_back(agent_loss{host, sim_time(h.agent_detect_at),
                                             sim_time(std::max(h.agent_detect_at, h.last_death)),
                                             std::move(reason)});
  }
  result_.trace_hash = hash_.value();
  return std::move(result_);
}

void world::dispatch(const sim_event& e) {
  switch (e.kind()) {
    case ek::job_start:
      feed_launcher([&](launch::actions& out) { launcher_->start(link::link_time(now_), out); });
      return;
    case ek::link_arrival:
      on_link_arrival(e.a, e.b() == 1);
      return;
    case ek::link_tick:
      if (hosts_[e.a].tick_at != e.t()) return;  // re-armed since
      on_link_tick(e.a);
      return;
    case ek::agent_starts:
      on_agent_starts(e.a, e.b());
      return;
    case ek::spawned:
      on_spawned(e.a, e.b());
      return;
    case ek::reacted:
      on_reacted(e.b());
      return;
    case ek::script_step: {
      auto step = e.b();
      if (untag(e.a, step)) on_script_step(e.a, step);
      return;
    }
    case ek::proc_end: {
      auto status = e.b();
      if (untag(e.a, status)) on_proc_end(e.a, status);
      return;
    }
    case ek::launcher_timer:
      on_timer(e.a, e.b());
      return;
    case ek::agent_timer:
      feed_agent(e.a, agent::timer_fired{e.b()});
      return;
    case ek::host_crash:
      on_crash(e.a);
      return;
    case ek::partition_begin:
      on_partition(e.a);
      return;
    case ek::launcher_signal:
      on_launcher_signal(static_cast<int>(e.a));
      return;
    case ek::forged_call:
      on_forged_call(e.a);
      return;
    case ek::carrier_end:
      on_carrier_end(e.a, e.b());
      return;
  }
}

run_result run(const scenario& s, const run_options& options) {
  world w(s, options);
  return w.run();
}

}  // namespace pm::sim
