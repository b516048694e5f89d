// The controller's steps as the launcher machine runs them (launch_config::watch_controller):
// every event it is fed and the actions it answers go into the trace, may be tampered with (a
// planted bug, run_options::tamper_actions), and are checked against the contract as they happen:
// a rank spawned once and where the map put it, SIGKILL only after a whole grace, no signal to a
// rank whose end was known, nothing after the finish. The first failure the controller was fed
// (the contract's "first failure decides") is noted here, where the order is the controller's.
#include <signal.h>

#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

namespace {
// The endpoints count in whole milliseconds, and their ticks run on a 1 ms grid.
constexpr std::int64_t ms_slack = 2'000'000;
}  // namespace

void world::note_failure(cause_kind kind, std::uint32_t rank, std::uint32_t host, int code) {
  if (first_failure_.kind != cause_kind::none) return;
  first_failure_ = failure_seen{kind, rank, host, code, now_};
}

// A new controller starts after the last one finished: the launcher restarts the job in place
// (docs/resilience.md). The incarnation that ended must have been one a restart is for, within
// the budget; the contract is then checked anew (its own first failure, spawns, signals), and
// its ranks run the default script unless every incarnation runs theirs.
void world::next_incarnation() {
  ++incarnations_;
  const auto& f = first_failure_;
  // A lost host's failure restarts only where its ranks found a place (a spare, --min-hosts):
  // then no rank of the next incarnation is on a host that was lost.
  const bool host_failed = f.kind == cause_kind::host_lost || (f.kind == cause_kind::spawn_failed &&
                                                               f.host != no_host && struck(f.host));
  const bool restartable = f.kind == cause_kind::rank_failed || f.kind == cause_kind::stalled ||
                           (f.kind == cause_kind::abort_requested && f.rank != no_host) ||
                           host_failed;
  for (const auto& loss : result_.hosts_lost) {
    if (map_->node_of_host(loss.host))
      correctness("incarnation " + std::to_string(incarnations_) + " placed ranks on " +
                  host_name(loss.host) + ", which was lost");
  }
  if (!restartable)
    correctness("the launcher restarted the job after " + std::string(pm::to_string(f.kind)) +
                ", which is never restarted");
  if (incarnations_ > s_.max_restarts)
    correctness("restart " + std::to_string(incarnations_) + " of a budget of " +
                std::to_string(s_.max_restarts));
  // The jobs the ranks spawned ended with them: the next incarnation's are numbered from the
  // map's size again (their generations kept, so that nothing queued for the old ones reaches
  // the new). A shrunk job (--min-hosts) has fewer ranks: those past its size were forgotten by
  // their agents, or went with their lost host.
  const auto before = ranks_before_;
  for (auto i = before; i < procs_.size(); ++i) {
    if (procs_[i].state == pstate::running || procs_[i].state == pstate::spawning)
      correctness("process " + std::to_string(i) + " of a spawned job outlived its incarnation");
    if (spawned_gens_.size() <= i - before) spawned_gens_.resize(i - before + 1, 0);
    spawned_gens_[i - before] = procs_[i].gen;
  }
  for (auto i = static_cast<std::size_t>(map_->size()); i < std::min(procs_.size(), before); ++i) {
    if (procs_[i].state == pstate::running || procs_[i].state == pstate::spawning)
      correctness("rank " + std::to_string(i) + " outlived its incarnation");
  }
  procs_.resize(map_->size());
  ranks_before_ = map_->size();
  // A lost host's ranks moved (a spare), or the job was mapped anew (--min-hosts): a rank on
  // another host than before starts afresh there; its old process went with its lost host.
  for (std::uint32_t rank = 0; rank < procs_.size(); ++rank) {
    auto& p = procs_[rank];
    const auto h = map_->at(rank).host;
    if (p.host == h) continue;
    if (p.state == pstate::running || p.state == pstate::spawning)
      correctness("rank " + std::to_string(rank) + " still ran on " + host_name(p.host) +
                  " when it moved to " + host_name(h));
    p.state = pstate::none;
    p.streams = 0;
    p.host = h;
  }
  for (auto& p : procs_) {
    p.flags = static_cast<std::uint8_t>(p.flags & ~(spawn_seen | end_known | signalled));
    if (!s_.scripts_every_incarnation && p.script != spawned_script_) p.script = 0;
  }
  first_failure_ = {};
  ctl_finished_ = false;
  saw_abort_ = false;
  forced_abort_at_ = -1;
  grace_started_at_ = -1;
}

void world::watch_controller(const event& in, std::vector<action>& actions) {
  ++result_.stats.controller_events;
  if (ctl_finished_ && std::holds_alternative<job_start>(in)) next_incarnation();
  trace_event(in);
  const bool was_finished = ctl_finished_;
  const auto failure_before = first_failure_;
  const auto forced_before = forced_abort_at_;
  note_event(in);
  // --enable-recovery: a rank the controller starts again alone did not end, and its failure
  // was none of the job's (the budget is checked with the launcher's rank_restarted).
  for (const auto& a : actions) {
    const auto* r = std::get_if<rank_restarting>(&a);
    if (r == nullptr || r->restart.rank >= procs_.size()) continue;
    auto& p = procs_[r->restart.rank];
    p.flags = static_cast<std::uint8_t>(p.flags & ~(end_known | spawn_seen));
    if (first_failure_.rank == r->restart.rank && failure_before.kind == cause_kind::none)
      first_failure_ = failure_before;
    forced_abort_at_ = forced_before;
    recovering_ = r->restart.rank;
    respawning_.insert(r->restart.rank);
  }
  if (o_.tamper_actions) o_.tamper_actions(actions);
  if (was_finished && !actions.empty())
    correctness("the controller acted after it finished (" + std::to_string(actions.size()) +
                " actions)");
  for (std::size_t i = 0; i + 1 < actions.size(); ++i) {
    if (!std::holds_alternative<finish>(actions[i])) continue;
    correctness("the controller acted after it finished (" +
                std::to_string(actions.size() - i - 1) + " actions after its finish)");
    break;
  }
  for (const auto& a : actions) {
    ++result_.stats.actions;
    trace_action(a);
    check_action(a);
  }
}

// What the event tells of the world: which ranks' ends the controller knows, and the first
// failure (as the contract counts failures) in the order the controller was fed them.
void world::note_event(const event& e) {
  const auto ends = [&](std::uint32_t rank) {
    const bool known = rank < procs_.size() && (procs_[rank].flags & end_known) != 0;
    if (rank < procs_.size()) procs_[rank].flags |= end_known;
    return !known && !ctl_finished_;
  };
  std::visit(
      overloaded{
          [&](const rank_spawn_failed& x) {
            if (ends(x.rank))
              note_failure(cause_kind::spawn_failed, x.rank, procs_[x.rank].host, x.code);
          },
          [&](const rank_exited& x) {
            if (ends(x.rank) && !x.status.success())
              note_failure(cause_kind::rank_failed, x.rank, procs_[x.rank].host,
                           x.status.shell_code());
          },
          [&](const host_lost& x) { note_host_lost(x); },
          [&](const rank_started& x) { respawning_.erase(x.rank); },
          [&](const abort_requested& x) {
            if (!x.rank) {
              // The launcher's own (a PMIx fence that cannot complete): no rank, no host.
              if (ctl_finished_) return;
              note_failure(cause_kind::abort_requested, no_host, no_host,
                           x.status >= 1 && x.status <= 255 ? x.status : 1);
              saw_abort_ = true;
              return;
            }
            if (*x.rank >= procs_.size()) return;
            if ((procs_[*x.rank].flags & end_known) != 0 || ctl_finished_) return;
            note_failure(cause_kind::abort_requested, *x.rank, procs_[*x.rank].host,
                         x.status >= 1 && x.status <= 255 ? x.status : 1);
            saw_abort_ = true;
          },
          [&](const signal_received& x) {
            if (ctl_finished_) return;
            if (x.signo == SIGINT || x.signo == SIGTERM || x.signo == SIGHUP) {
              ++terminating_signals_;
              note_failure(cause_kind::signal, 0, 0, 128 + x.signo);
            }
            // A forwarded SIGUSR1/2 ends ranks that do not handle it: they did not fail.
            if (x.signo != SIGTSTP && x.signo != SIGCONT) saw_launcher_signal_ = true;
          },
          // PMIx_Init without PMIx_Finalize: a failure that ends the job whatever the
          // abort policy (its peers would wait for it in a fence).
          [&](const rank_unfinalized& x) {
            ++result_.stats.unfinalized;
            if (x.rank >= procs_.size() || (procs_[x.rank].flags & end_known) != 0 || ctl_finished_)
              return;
            // --enable-recovery: about the process that was recovered (before its next start).
            if (respawning_.contains(x.rank)) return;
            const bool ending_before =
                first_failure_.kind != cause_kind::none &&
                (s_.control.abort_on_failure || terminating_signals_ > 0 || forced_abort_at_ >= 0);
            const int code = x.status.shell_code();
            note_failure(cause_kind::rank_failed, x.rank, procs_[x.rank].host,
                         code != 0 ? code : 1);
            if (!ending_before && forced_abort_at_ < 0) forced_abort_at_ = now_;
          },
          // --stall-timeout: only when every running rank stalled, and never before the timeout
          // after the last stall began; the job ends whatever the abort policy.
          [&](const job_stalled&) {
            if (ctl_finished_) return;
            const bool ending_before =
                first_failure_.kind != cause_kind::none &&
                (s_.control.abort_on_failure || terminating_signals_ > 0 || forced_abort_at_ >= 0);
            if (s_.control.stall_timeout.count() <= 0)
              correctness("the job was found stalled without a stall timeout");
            const auto timeout = std::chrono::duration_cast<sim_time>(s_.control.stall_timeout);
            for (std::uint32_t rank = 0; rank < procs_.size(); ++rank) {
              if (procs_[rank].state != pstate::running) continue;
              const auto it = stalls_.find(rank);
              if (it == stalls_.end() || now_ < it->second.first + timeout.count()) {
                correctness("the job was found stalled at " + format_duration(sim_time(now_)) +
                            " while rank " + std::to_string(rank) + " progressed");
                break;
              }
            }
            note_failure(cause_kind::stalled, no_host, no_host, exit_codes::stalled);
            if (!ending_before && forced_abort_at_ < 0) forced_abort_at_ = now_;
          },
          // A spawned job the controller took: its ranks join the world's processes.
          [&](const job_spawned& x) { add_spawned(x); },
          [&](const spawn_withdrawn& x) {
            result_.stats.spawns_withdrawn += static_cast<std::uint32_t>(x.ranks.size());
            for (auto rank : x.ranks) {
              if (rank < procs_.size()) procs_[rank].flags |= end_known;
            }
          },
          [&](const auto&) {},
      },
      e);
}

// A host is struck by a fault when one hit it or a tree parent that relayed its link.
bool world::struck(std::uint32_t host) const {
  for (auto x = host; x != no_host;
       x = hosts_[x].parent != no_host ? hosts_[x].parent : hosts_[x].plan_parent) {
    const auto& h = hosts_[x];
    if (h.crashed || h.agent_fails || (h.part_from >= 0 && now_ >= h.part_from) || h.lost_call ||
        h.late_call >= 0 || h.call_refused || h.silent || h.ssh_failed)
      return true;
  }
  return false;
}

// The launcher declared a host lost (its link went down before the job's end). It must be one a
// fault struck, within the link's promise plus the launcher's wait for how the carrier ended.
void world::note_host_lost(const host_lost& x) {
  if (x.host >= hosts_.size()) {
    correctness("host_lost for host " + std::to_string(x.host) + ", which does not exist");
    return;
  }
  auto& h = hosts_[x.host];
  if (h.lost || ctl_finished_) return;
  h.lost = true;
  last_progress_ = now_;
  if (h.part_from >= 0 && now_ >= h.part_from) h.partition_noticed = true;
  line("!! the launcher gives up on " + host_name(x.host) + ": " + x.reason);
  const bool hurried =
      terminating_signals_ >= 2 && x.reason.starts_with("not waited for after a second interrupt");
  if (!struck(x.host) && !hurried)
    correctness(host_name(x.host) + " was lost though nothing happened to it (" + x.reason + ")");
  // The launcher reports a loss once it knows how the carrier ended, or 300 ms after the link
  // went down; a relayed host's silence is noticed by its parent at its next heartbeat tick (up
  // to an interval later); each relay level adds a round trip.
  std::int64_t bound = -1;
  std::int64_t depth = 0;
  for (auto a = x.host; a != no_host; a = hosts_[a].parent, ++depth)
    bound = std::max(bound, hosts_[a].detect_bound);
  if (bound >= 0 && !hurried) {
    const auto& l = s_.latency;
    bound += 300'000'000 + l.heartbeat_interval.count() +
             depth * 2 * (l.link.count() + l.link_jitter.count()) + ms_slack;
    if (now_ > bound)
      correctness(host_name(x.host) + " was declared lost at " + format_duration(sim_time(now_)) +
                  ", later than its link promises (" + format_duration(sim_time(bound)) + ")");
  }
  result_.hosts_lost.push_back(host_loss{x.host, sim_time(now_), x.reason, x.before_hello});
  if (x.before_hello) ++result_.stats.lost_before_hello;
  bool any_live = false;
  std::uint32_t first = 0;
  const auto lose_ranks_on = [&](std::uint32_t host) {
    for_ranks_on_host(host, [&](std::uint32_t rank) {
      auto& p = procs_[rank];
      if ((p.flags & end_known) == 0 && !any_live) {
        any_live = true;
        first = rank;
      }
      p.flags |= end_known;
    });
  };
  lose_ranks_on(x.host);
  // The hosts it relayed go with it, in its failure (host_lost.with).
  if (!x.before_hello) {
    for (const auto w : x.with) {
      if (w < hosts_.size()) lose_ranks_on(w);
    }
  }
  // Before its agent's hello the host never joined the launch: a set-up failure (125), which
  // ends the job whatever the policy; after it, a lost host (213).
  const bool ending_before =
      terminating_signals_ > 0 || forced_abort_at_ >= 0 ||
      (s_.control.abort_on_failure && first_failure_.kind != cause_kind::none) ||
      (s_.control.timeout.count() > 0 &&
       now_ >= std::chrono::duration_cast<sim_time>(s_.control.timeout).count());
  if (any_live) {
    if (x.before_hello)
      note_failure(cause_kind::spawn_failed, first, x.host, exit_codes::launch_failed);
    else
      note_failure(cause_kind::host_lost, first, x.host, exit_codes::host_lost);
  }
  if (x.before_hello && any_live && !ending_before) forced_abort_at_ = now_;
}

void world::check_action(const action& a) {
  std::visit(
      overloaded{
          [&](const spawn& x) {
            if (x.host >= hosts_.size()) {
              correctness("spawn on host " + std::to_string(x.host) + ", which does not exist");
              return;
            }
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
                correctness("rank " + std::to_string(rank) + " was spawned on " +
                            host_name(x.host) + ", the map put it on " + host_name(p.host));
            }
          },
          [&](const signal_ranks& x) {
            if (x.signo == SIGKILL && x.ranks.size() == 1 && x.ranks[0] == recovering_) {
              // --enable-recovery: what the failed process left, before its rank starts again.
              recovering_ = no_host;
              return;
            }
            if (x.signo == SIGKILL) {
              // SIGKILL only for ranks that outlive a whole grace: a grace timer must have run
              // out. A second SIGINT/SIGTERM/SIGHUP to the launcher escalates at once.
              result_.stats.sigkills += static_cast<std::uint32_t>(x.ranks.size());
              const auto grace =
                  std::chrono::duration_cast<sim_time>(s_.control.kill_grace).count();
              if (terminating_signals_ < 2 &&
                  (grace_started_at_ < 0 || now_ < grace_started_at_ + grace))
                correctness("SIGKILL to rank " + std::to_string(x.ranks.empty() ? 0 : x.ranks[0]) +
                            " before the kill grace (" + format_duration(sim_time(grace)) +
                            ") expired");
            }
            for (auto rank : x.ranks) {
              if (rank >= procs_.size()) continue;
              procs_[rank].flags |= signalled;
              if ((procs_[rank].flags & end_known) != 0 && !ctl_finished_)
                correctness(signal_name(x.signo) + " to rank " + std::to_string(rank) +
                            ", whose end the controller knew");
            }
          },
          [&](const pm::start_timer& x) {
            if (x.after == s_.control.kill_grace && grace_started_at_ < 0) grace_started_at_ = now_;
          },
          [&](const notify_ranks&) { ++result_.stats.notices; },
          [&](const finish& x) {
            ctl_finished_ = true;
            result_.finish_time = sim_time(now_);
            check_report(x.report);
          },
          [&](const auto&) {},
      },
      a);
}

}  // namespace pm::sim
