// Simulated processes: they start when an agent forks them, follow their scripts (run, close
// their streams early, make PMIx calls (pmix_clients.cpp), call abort, exit or die by a signal,
// leave a child holding their streams), react to signals, and are swept by their agent at the end.
#include <signal.h>

#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

void world::start_process(std::uint32_t host, const agent::process_spec& spec) {
  const auto rank = spec.rank;
  if (rank >= procs_.size() || procs_[rank].host != host) {
    correctness("the agent on " + host_name(host) + " started rank " + std::to_string(rank) +
                ", which is not its rank");
    return;
  }
  auto& p = procs_[rank];
  if (p.state != pstate::none) {
    correctness("rank " + std::to_string(rank) + " was started twice");
    return;
  }
  p.state = pstate::spawning;
  ++p.gen;
  ++live_procs_;
  if (o_.on_spawn) o_.on_spawn(rank, host, spec.environment());
  if ((p.flags & f_spawn_fail) != 0) {
    // exec failed at once: reported with the batch, as a later event, never a nested call.
    spawn_batch_.push_back(batch_entry{rank, -1});
    return;
  }
  auto& h = hosts_[host];
  const std::int64_t forked =
      std::max(now_, h.spawn_free) + s_.latency.spawn.count() + jitter(s_.latency.spawn_jitter);
  h.spawn_free = forked;
  spawn_batch_.push_back(batch_entry{rank, forked});
}

void world::on_spawned(std::uint32_t host, std::uint32_t slot) {
  // Taken out of the pool: the agent steps below may add batches (and grow the pool).
  std::vector<batch_entry> batch;
  batch.swap(batch_pool_[slot]);
  for (const auto& e : batch) {
    if (hosts_[host].crashed) break;
    if (e.value < 0) {
      spawn_failed(e.rank);
    } else {
      started(e.rank, e.value);
    }
  }
  batch.clear();
  batch_pool_[slot].swap(batch);
  batch_pool_.give_back(slot);
}

void world::spawn_failed(std::uint32_t rank) {
  auto& p = procs_[rank];
  if (p.state != pstate::spawning) return;
  p.state = pstate::failed;
  --live_procs_;
  ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::spawn_failure)];
  line("!! rank " + std::to_string(rank) + " cannot be executed");
  feed_agent(p.host, agent::rank_spawn_failed{rank, 127,
                                              "cannot execute 'app': No such file or directory"});
}

// The rank was forked at `forked`; its script runs from forked + its slow start.
void world::started(std::uint32_t rank, std::int64_t forked) {
  auto& p = procs_[rank];
  const auto host = p.host;
  if (p.state != pstate::spawning) return;
  p.state = pstate::running;
  p.streams = streams_bits_;
  feed_agent(host, agent::rank_spawned{rank, pid_base + rank});
  const auto& sc = script(rank);
  const std::int64_t begin = forked + sc.slow_start.count();
  const std::int64_t run =
      sc.at ? sc.at->count() : s_.latency.run_time.count() + jitter(s_.latency.run_jitter);
  if (sc.close_early) at(begin + run / 2, ek::script_step, rank, tag(rank, 0));
  if (pmix_on_ && (!sc.calls.empty() || sc.end == process_script::ending::abort))
    client_started(rank, begin);
  switch (sc.end) {
    case process_script::ending::exit:
      at(begin + run, ek::proc_end, rank, tag(rank, encode(exit_status::exited(sc.value))));
      break;
    case process_script::ending::signal:
      at(begin + run, ek::proc_end, rank, tag(rank, encode(exit_status::signaled(sc.value))));
      break;
    case process_script::ending::abort:
      at(begin + run, ek::script_step, rank, tag(rank, 1));
      break;
    case process_script::ending::hang:
      break;
  }
}

// A natural end (its script's exit or signal) of a rank that may be blocked in a PMIx call.
void world::on_proc_end(std::uint32_t rank, std::uint32_t status) {
  if (stalled_now(rank)) return;                // stuck: its end never comes
  if (client_blocked(rank, 3, status)) return;  // it ends once the call returns
  const auto st = decode(status);
  // An exit is MPI_Finalize's, then exit(); a signal (a crash) finalizes nothing.
  client_ends(rank, !st.is_signal());
  die(rank, st);
}

void world::on_reacted(std::uint32_t slot) {
  std::vector<batch_entry> batch;
  batch.swap(batch_pool_[slot]);
  // Ranks that react together die in any order.
  for (std::size_t i = batch.size(); i > 1; --i)
    std::swap(batch[i - 1],
              batch[static_cast<std::size_t>(rng_.between(0, static_cast<std::int64_t>(i - 1)))]);
  for (const auto& e : batch) {
    auto value = static_cast<std::uint32_t>(e.value);
    if (untag(e.rank, value)) die(e.rank, decode(value));
  }
  batch.clear();
  batch_pool_[slot].swap(batch);
  batch_pool_.give_back(slot);
}

// The rank's output streams end: the agent, which forwards them, says so over the link.
void world::close_streams(std::uint32_t rank) {
  auto& p = procs_[rank];
  const auto host = p.host;
  const auto open = p.streams;
  p.streams = 0;
  for (std::uint8_t bit = 0; bit < 2; ++bit) {
    if ((open & (1u << bit)) == 0) continue;
    feed_agent(host, agent::output_ended{rank, static_cast<output_stream>(bit),
                                         bit == 0 ? script(rank).out_bytes : 0});
  }
}

void world::die(std::uint32_t rank, exit_status status) {
  auto& p = procs_[rank];
  if (p.state != pstate::running) return;
  const auto host = procs_[rank].host;
  auto& h = hosts_[host];
  p.state = pstate::dead;
  --live_procs_;
  h.last_death = now_;
  if (!clients_.empty()) client_ends(rank, false);
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x300);
  hash_.add(rank);
  hash_.add(encode(status));
  if (tracing())
    line("   rank " + std::to_string(rank) + " on " + host_name(host) + " " + status.describe());
  const bool has_streams = p.streams != 0 && !script(rank).leftover;
  // The output layer sees end-of-file and the agent sees the exit at about the same moment:
  // either may reach the launcher first.
  const bool streams_first = has_streams && rng_.chance(1, 2);
  if (has_streams) {
    if (streams_first)
      ++result_.stats.streams_before_exit;
    else
      ++result_.stats.exits_before_streams;
  }
  if (streams_first) close_streams(rank);
  if ((p.flags & f_lost_exit) != 0) {
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::lost_exit)];
    line("!! the agent on " + host_name(host) + " misses the exit of rank " + std::to_string(rank));
  } else {
    feed_agent(host, agent::rank_exited{rank, status});
  }
  if (script(rank).leftover && p.streams != 0) {
    p.flags |= leftover_alive;
    ++leftovers_alive_;
    ++result_.stats.leftovers;
  } else if (!streams_first) {
    close_streams(rank);
  }
}

void world::deliver_signal(std::uint32_t rank, int signo) {
  auto& p = procs_[rank];
  if (p.state == pstate::running) {
    const auto& sc = script(rank);
    switch (signo) {
      case SIGKILL:
        kill_batch_.push_back(batch_entry{rank, tag(rank, encode(exit_status::signaled(SIGKILL)))});
        return;
      case SIGTERM:
      case SIGINT:
      case SIGHUP:
        if (sc.ignore_term) return;
        [[fallthrough]];
      case SIGUSR1:
      case SIGUSR2:
        term_batch_.push_back(batch_entry{rank, tag(rank, encode(exit_status::signaled(signo)))});
        return;
      default:
        return;  // SIGCONT, SIGTSTP (not modelled: a stop is not an end)
    }
  }
  if (p.state == pstate::dead && (p.flags & leftover_alive) != 0 &&
      (signo == SIGKILL || signo == SIGTERM)) {
    p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
    --leftovers_alive_;
    close_streams(rank);
  }
}

// pmd forks a rank in the turn that asked for it (its exec may fail later); the world models the
// fork's latency instead. A sweep comes in a later turn, when the rank was forked already: a rank
// still spawning then is forked now, so that the sweep finds it (else it would start after its
// agent swept and left, and run on alone).
void world::fork_now(std::uint32_t rank) {
  if (procs_[rank].state != pstate::spawning) return;
  if ((procs_[rank].flags & f_spawn_fail) != 0) {
    spawn_failed(rank);
  } else {
    started(rank, now_);
  }
}

// An agent's sweep: SIGKILL to everything of the job left on its host (leftovers too), then
// swept{0} — as pmd's sweep, which kills and reaps every child, in one turn.
void world::run_sweeps() {
  while (!rank_sweeps_due_.empty()) {
    std::vector<std::uint32_t> due;
    due.swap(rank_sweeps_due_);
    for (const auto host : due) sweep_ranks(host);
  }
  for (std::size_t i = 0; i < sweeps_due_.size(); ++i) {
    const auto host = sweeps_due_[i];
    auto& h = hosts_[host];
    if (h.crashed || !h.agent || h.agent_done) continue;
    for_ranks_on_host(host, [&](std::uint32_t rank) {
      fork_now(rank);
      die(rank, exit_status::signaled(SIGKILL));
      auto& p = procs_[rank];
      if ((p.flags & leftover_alive) != 0) {
        p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
        --leftovers_alive_;
        close_streams(rank);
      }
    });
    // Child agents' carriers (the tree launch) are not killed by the sweep: the host machine
    // closed their stdin before it asked for it, they end by themselves (or are killed after
    // the child relay's grace); they still count, so the sweep comes back (pmd's).
    feed_agent(host, agent::swept{h.children.size()});  // may ask again: appended, run below
  }
  sweeps_due_.clear();
}

// A restart's sweep (pm::agent::sweep_ranks): SIGKILL to everything of the ranks left on the host
// (leftovers too; the child agents' carriers stay), every leader's end said (a missed one too, as
// pmd's sweep looks at each leader before it reaps it), then ranks_swept{0, a port}.
void world::sweep_ranks(std::uint32_t host) {
  auto& h = hosts_[host];
  if (h.crashed || !h.agent || h.agent_done) return;
  for_ranks_on_host(host, [&](std::uint32_t rank) {
    auto& p = procs_[rank];
    fork_now(rank);
    die(rank, exit_status::signaled(SIGKILL));
    if (p.state == pstate::dead && (p.flags & f_lost_exit) != 0) {  // a duplicate is ignored
      feed_agent(host, agent::rank_exited{rank, exit_status::signaled(SIGKILL)});
    }
    if ((p.flags & leftover_alive) != 0) {
      p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
      --leftovers_alive_;
      close_streams(rank);
    }
  });
  // A deterministic port per restart, as a free one would be.
  const auto port = static_cast<std::uint16_t>(42000 + restart_ports_++ % 20000);
  feed_agent(host, agent::ranks_swept{0, port});
}

// A restart is complete: the host's ranks can be started again (a spawned job's are gone). An
// event an old process still has queued (its script's end or next step, a signal's reaction)
// carries its generation and is dropped (world::untag).
void world::forget_ranks(std::uint32_t host) {
  for (auto rank : map_->ranks_on_host(host)) {
    auto& p = procs_[rank];
    if (p.state == pstate::none || p.state == pstate::spawning) continue;
    p.state = pstate::none;
    p.streams = 0;
  }
  spawned_on_.erase(host);
}

// --enable-recovery: the rank starts again alone. Its earlier process must be gone, leftovers
// included (its group got SIGKILL just before), and its output ended; the next one runs the
// default script unless every incarnation runs its own.
void world::forget_rank(std::uint32_t host, std::uint32_t rank) {
  if (rank >= procs_.size() || procs_[rank].host != host) {
    correctness("the agent on " + host_name(host) + " forgot rank " + std::to_string(rank) +
                ", which is not its rank");
    return;
  }
  auto& p = procs_[rank];
  if (p.state == pstate::running || p.state == pstate::spawning || (p.flags & leftover_alive) != 0)
    correctness("rank " + std::to_string(rank) +
                " was started again while its earlier process (or what it left) lived");
  if (p.streams != 0)
    correctness("rank " + std::to_string(rank) +
                " was started again before its earlier process's output ended");
  p.state = pstate::none;
  p.streams = 0;
  if (!s_.scripts_every_incarnation && p.script != spawned_script_) p.script = 0;
}

// A script's step: its streams close early (0), it calls abort (1), or it makes its next PMIx
// call (2) (pmix_clients.cpp).
void world::on_script_step(std::uint32_t rank, std::uint32_t step) {
  auto& p = procs_[rank];
  if (p.state != pstate::running || stalled_now(rank)) return;
  if (step == 0) {
    close_streams(rank);
    return;
  }
  if (client_blocked(rank, step, 0)) return;  // it calls once the call it is in returns
  if (step == 2) {
    make_call(rank);
    return;
  }
  call_abort(rank);
}

}  // namespace pm::sim
