// The contract, checked against what happened (docs/failure-semantics.md): the report follows the
// first failure the controller was fed, an abort reaches every rank, nothing of the job outlives
// it, and a lost host's agent clears its ranks by itself.
#include <signal.h>

#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

bool world::rank_hit(std::uint32_t rank) const {
  const auto& p = procs_[rank];
  const auto& h = hosts_[procs_[rank].host];
  return (p.flags & (f_spawn_fail | f_lost_exit)) != 0 || !script(rank).succeeds() || h.lost ||
         struck(procs_[rank].host) || stalls_.contains(rank);
}

void world::check_report(const job_report& r) {
  // Each rank's report until `f` says stop. The launcher's finish carries none
  // (controller_options::finish_without_ranks: at 800,000 ranks they are 83 MB): then they come
  // one by one from the finished controller.
  const auto until = [&](auto&& f) {
    if (!r.ranks.empty()) {
      for (const auto& rr : r.ranks) {
        if (f(rr)) return;
      }
      return;
    }
    for (std::uint32_t rank = 0; rank < ctl().size(); ++rank) {
      if (f(ctl().rank_report_of(rank))) return;
    }
  };
  until([&](const rank_report& rr) {
    if (rr.state != rank_state::pending && rr.state != rank_state::running) return false;
    correctness("the job finished while rank " + std::to_string(rr.rank) + " was " +
                pm::to_string(rr.state));
    return true;
  });
  const auto& f = first_failure_;
  const bool timeout_set = s_.control.timeout.count() > 0;
  if (r.cause == cause_kind::timeout) {
    if (!timeout_set) correctness("the job timed out without a timeout set");
    if (f.kind != cause_kind::none &&
        f.t < std::chrono::duration_cast<sim_time>(s_.control.timeout).count())
      correctness("the job reported a timeout, but " + std::string(pm::to_string(f.kind)) +
                  " (rank " + std::to_string(f.rank) + ") came first");
  } else if (f.kind == cause_kind::signal) {
    if (r.cause != cause_kind::signal || r.exit_code != f.code)
      correctness("the launcher's " + signal_name(f.code - 128) +
                  " came first, but the report says " + pm::to_string(r.cause) + " with code " +
                  std::to_string(r.exit_code) + ": " + r.summary);
  } else if (f.kind == cause_kind::none) {
    if (r.exit_code != 0 || r.cause != cause_kind::none)
      correctness("no rank failed, yet the job ended with code " + std::to_string(r.exit_code) +
                  " (" + r.summary + ")");
  } else if (f.rank == no_host) {
    // The launcher's own abort (no rank): its cause and code.
    if (r.cause != f.kind || r.exit_code != f.code)
      correctness("the launcher aborted the job first (code " + std::to_string(f.code) +
                  "), but the report says " + pm::to_string(r.cause) + " with code " +
                  std::to_string(r.exit_code) + ": " + r.summary);
  } else {
    if (r.cause != f.kind || r.exit_code != f.code || r.failed_host != f.host ||
        (f.kind != cause_kind::host_lost && r.failed_rank != f.rank))
      correctness("the first failure was " + std::string(pm::to_string(f.kind)) + " of rank " +
                  std::to_string(f.rank) + " on " + host_name(f.host) + " (exit code " +
                  std::to_string(f.code) + "), but the report says " + pm::to_string(r.cause) +
                  " with code " + std::to_string(r.exit_code) + ": " + r.summary);
  }
  // An abort signals every rank that is still running: a rank whose end the controller learned
  // after the abort began must have been sent a signal (SIGTERM, or SIGKILL after the grace).
  const bool aborted = r.cause != cause_kind::none &&
                       (s_.control.abort_on_failure || r.cause == cause_kind::signal ||
                        r.cause == cause_kind::timeout || forced_abort_at_ >= 0);
  if (aborted) {
    std::int64_t began = r.cause == cause_kind::timeout
                             ? std::chrono::duration_cast<sim_time>(s_.control.timeout).count()
                             : f.t;
    // With the policy off, a host lost before its hello began the abort, whatever came first.
    if (!s_.control.abort_on_failure && r.cause != cause_kind::signal &&
        r.cause != cause_kind::timeout && forced_abort_at_ >= 0)
      began = forced_abort_at_;
    until([&](const rank_report& rr) {
      if (rr.state != rank_state::exited && rr.state != rank_state::killed) return false;
      if (f.kind != cause_kind::none && rr.rank == f.rank) return false;
      if (!rr.ended_at || rr.ended_at->count() <= began) return false;
      if ((procs_[rr.rank].flags & signalled) != 0) return false;
      correctness("rank " + std::to_string(rr.rank) + " ended at " + format_duration(*rr.ended_at) +
                  ", after the abort began at " + format_duration(sim_time(began)) +
                  ", and was never signalled");
      return true;
    });
  }
  // Without abort, every rank that no fault touched runs to completion and succeeds.
  if (!s_.control.abort_on_failure && !saw_abort_ && !saw_launcher_signal_ && !timeout_set &&
      forced_abort_at_ < 0) {
    until([&](const rank_report& rr) {
      if (rank_hit(rr.rank)) return false;
      if (rr.state == rank_state::exited && rr.status && rr.status->success()) return false;
      correctness("with abort off, rank " + std::to_string(rr.rank) +
                  ", untouched by any fault, ended " + pm::to_string(rr.state) +
                  (rr.status ? " (" + rr.status->describe() + ")" : std::string()));
      return true;
    });
  }
}

void world::final_checks() {
  if (!finish_seen_ && ctl_finished_) {
    liveness("the controller finished at " + format_duration(result_.finish_time) +
             ", but the launcher never did (no finished action): a link it waits for never "
             "closed");
    return;
  }
  if (!finish_seen_ && ctl().finished()) {
    liveness(
        "the controller considers the job finished but never told the driver (no finish "
        "action): a real launcher would wait forever");
    return;
  }
  if (!finish_seen_) {
    std::uint32_t not_ended = 0;
    std::optional<std::uint32_t> example;
    const auto report = ctl().report();
    for (const auto& rr : report.ranks) {
      if (rr.state == rank_state::pending || rr.state == rank_state::running) {
        ++not_ended;
        if (!example) example = rr.rank;
      }
    }
    std::string text = "no events left, but the job is not finished: " + std::to_string(not_ended) +
                       (not_ended == 1 ? " rank not ended" : " ranks not ended");
    if (example)
      text += " (e.g. rank " + std::to_string(*example) + ", " +
              pm::to_string(report.ranks[*example].state) + " as the controller sees it)";
    liveness(std::move(text));
    return;
  }
  std::uint32_t reported = 0;
  for (std::uint32_t rank = 0; rank < procs_.size() && reported < 3; ++rank) {
    const auto& p = procs_[rank];
    if (p.state == pstate::running || p.state == pstate::spawning ||
        (p.flags & leftover_alive) != 0) {
      correctness("rank " + std::to_string(rank) + " on " + host_name(procs_[rank].host) +
                  " still runs after the job ended");
      ++reported;
    }
  }
  const auto grace = std::chrono::duration_cast<sim_time>(s_.control.kill_grace).count();
  for (std::uint32_t host = 0; host < hosts_.size(); ++host) {
    const auto& h = hosts_[host];
    if (h.agent && !h.agent_done && !h.crashed)
      liveness("the agent on " + host_name(host) + " never exited");
    // A host cut off for good: its agent must give up on the launcher by itself, when the
    // silence runs out or, at the latest, when the launcher's closing reaches it after the heal.
    if (h.partition_fired && h.lost && !h.shutdown_seen && !h.crashed &&
        (h.agent || h.agent_done)) {
      // The launcher's closing travels through the host's tree parents: when one of them
      // crashed, it never comes, and what the heal let through (a heartbeat) starts the agent's
      // silence anew: it gives up a detection time after the heal.
      bool relay_crashed = false;
      for (auto a = h.parent; a != no_host && !relay_crashed; a = hosts_[a].parent)
        relay_crashed = hosts_[a].crashed;
      // The cut that silenced it for good is the latest of its own and its tree parents' (a
      // parent cut off silences the hosts it relays too; an earlier short cut of its own healed).
      const host_rec* cut = &h;
      for (auto a = h.parent; a != no_host; a = hosts_[a].parent) {
        const auto& p = hosts_[a];
        if (p.partition_fired && p.part_from > cut->part_from) cut = &p;
      }
      const auto after_heal = cut->part_until + s_.latency.link.count() +
                              s_.latency.link_jitter.count() +
                              (relay_crashed ? detection_promise() : 0);
      const auto bound = std::max(cut->part_from + detection_promise(), after_heal) +
                         2'000'000;  // whole ms, ticks on a 1 ms grid
      if (h.agent_detect_at < 0 || h.agent_detect_at > bound)
        correctness("the agent on " + host_name(host) + " was cut off from " +
                    format_duration(sim_time(cut->part_from)) + " and gave up on the launcher " +
                    (h.agent_detect_at < 0
                         ? std::string("never")
                         : "only at " + format_duration(sim_time(h.agent_detect_at))));
    }
    if (h.agent_detect_at >= 0 && h.last_death >= 0) {
      const auto bound = h.agent_detect_at + grace + 1'000'000;
      if (h.last_death > bound)
        correctness("a process of the old job ran on " + host_name(host) + " until " +
                    format_duration(sim_time(h.last_death)) +
                    ", after its agent lost the launcher at " +
                    format_duration(sim_time(h.agent_detect_at)));
    }
  }
}

}  // namespace pm::sim
