// Restarts in place (docs/resilience.md): a launch with restart_policy::max_restarts runs its job
// as incarnations. When one fails, its controller ends it as any failure (every rank stopped, its
// output drained); then, instead of shutting the agents down, the launcher asks every agent still
// up to clear what is left of it (`restart`), waits for all of their answers (`restarted`: nothing
// of it is left on that host) and a short backoff, and starts the next incarnation with a new
// controller over the same map, a new PMIx namespace and a new MASTER_PORT. No ssh, no agent start.
#include <signal.h>

#include <algorithm>

#include "agent/pmix/pmix_host.hpp"
#include "launch/launcher_impl.hpp"

namespace pm::launch {

namespace {

// The controller's timers carry their incarnation above this bit, so that a timer of an ended
// controller that fires late never reaches the next one (both number their timers from 1).
constexpr int incarnation_shift = 40;
constexpr std::uint64_t timer_mask = (std::uint64_t{1} << incarnation_shift) - 1;

}  // namespace

// Only failures of the program restart: a rank that failed, aborted (MPI_Abort; an embedder's
// cancel names no rank) or ended without MPI_Finalize, and a job that stalled (--stall-timeout).
// Never a user's signal, a cancel, the timeout, a refusal, a program that cannot start (it will not
// start next time either), or a lost host (its ranks have no place).
bool launcher::impl::restartable(const job_report& r) const {
  // --enable-recovery restarts single ranks (rank_recovery.cpp), never the whole job.
  if (inc.number >= req.restarts.max_restarts || req.restarts.per_rank || interrupts > 0 ||
      refused || done)
    return false;
  const bool program_failed = r.cause == cause_kind::rank_failed ||
                              r.cause == cause_kind::stalled ||
                              (r.cause == cause_kind::abort_requested && r.failed_rank);
  if (!program_failed) return false;
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    const auto& hs = hosts[req.map.host_of_node(n)];
    if (hs.lost_told || !hs.agent || hs.down) return false;
  }
  return true;
}

incarnation_report launcher::impl::summary_of(const job_report& r) const {
  incarnation_report i;
  i.number = inc.number;
  i.exit_code = r.exit_code;
  i.cause = r.cause;
  i.failed_rank = r.failed_rank;
  i.failed_host = r.failed_host;
  i.summary = r.cause == cause_kind::none ? std::string() : r.summary;
  i.ranks_failed = r.ranks_failed;
  i.ranks_killed = r.ranks_killed;
  i.started_at = inc.started_at;
  i.ended_at = now;
  return i;
}

std::string launcher::impl::namespace_of(std::uint32_t incarnation) const {
  if (incarnation == 0) return cfg.pmix_namespace;
  return cfg.pmix_namespace + ".r" + std::to_string(incarnation);
}

std::uint64_t launcher::impl::controller_timer_out(std::uint64_t id) const {
  return id | (std::uint64_t{inc.number} << incarnation_shift);
}

std::optional<std::uint64_t> launcher::impl::controller_timer_in(std::uint64_t id) const {
  if ((id >> incarnation_shift) != inc.number) return std::nullopt;
  return id & timer_mask;
}

// Every agent of the job clears the incarnation (also early: clear_leftovers, when what the ranks
// left holds their output open, needs the agents to kill it, and a restart kills it anyway).
void launcher::impl::request_restart() {
  if (inc.requested) return;
  inc.requested = true;
  const auto next = inc.number + 1;
  std::optional<link::pmix_job> facts;
  if (pmix_facts) {
    facts = agent::pmix::pmix_job_of(agent::pmix::make_job_info(req.map, namespace_of(next), 0));
  }
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    auto& hs = hosts[h];
    if (!hs.agent || !link_usable(h) || hs.closed || hs.lost_told || hs.shutdown_sent) continue;
    link::restart_request m{next, std::nullopt};
    if (facts) {
      m.pmix = facts;
      m.pmix->node = req.map.node_of_host(h).value_or(link::no_node);
    }
    send_to(h, m);
    hs.restart_waited = true;
    ++inc.waiting;
  }
}

// The controller ended a failed incarnation that may restart: tell the user and the embedder,
// clear it everywhere, wait the backoff.
void launcher::impl::begin_restart(job_report r) {
  const auto next = inc.number + 1;
  auto ended = summary_of(r);
  inc.ended.push_back(ended);
  inc.failed = std::move(r);
  inc.between = true;
  decided(job_wide, "restart " + std::to_string(next));
  out->push_back(restarting{ended});
  out->push_back(say{"restarting the job (" + std::to_string(next) + " of " +
                     std::to_string(req.restarts.max_restarts) + "): " + inc.failed->summary});
  // What the ended incarnation's ranks waited for is gone with them.
  for (auto& [key, id] : lookup_timers) cancel_own_timer(id);
  lookup_timers.clear();
  cancel_own_timer(hurry_timer);
  request_restart();
  // 0, 1, 3, 7, ... times the base: the first restart at once, a crash loop slowed down.
  const auto steps = (std::uint64_t{1} << std::min<std::uint32_t>(next - 1, 20)) - 1;
  const auto wait = std::min(req.restarts.backoff_max,
                             std::chrono::milliseconds(req.restarts.backoff_base.count() *
                                                       static_cast<std::int64_t>(steps)));
  if (wait.count() <= 0) {
    inc.backoff_over = true;
  } else {
    inc.backoff_timer = start_own_timer(wait, own_timer{timer_kind::restart, 0, 0});
  }
  maybe_start_incarnation();
}

void launcher::impl::on_restarted(std::uint32_t h, const link::restarted& r) {
  auto& hs = hosts[h];
  if (!hs.restart_waited || r.incarnation != inc.number + 1) return;  // not asked: ignored
  hs.restart_waited = false;
  --inc.waiting;
  if (req.map.num_nodes() > 0 && h == req.map.host_of_node(req.map.at(0).node)) {
    inc.next_port = r.port;
  }
  maybe_start_incarnation();
}

// A host lost while the launch waits to restart: the next incarnation has no place for its
// ranks, so the failure that was to be restarted ends the launch.
void launcher::impl::restart_host_lost(std::uint32_t h, const std::string& reason) {
  auto r = std::move(*inc.failed);
  end_restarts(std::move(r),
               "cannot restart the job: host " + host_info(h).name + " was lost (" + reason + ")");
}

// The launch ends between two incarnations (a host lost, a signal, a cancel): `r` is its report.
void launcher::impl::end_restarts(job_report r, const std::string& line) {
  inc.between = false;
  inc.between_ended = true;
  cancel_own_timer(inc.backoff_timer);
  decided(job_wide, "restart given up");
  out->push_back(say{line});
  finish_job(std::move(r));
}

// A signal (signo) or an embedder's cancel (0) between two incarnations: no rank runs, so the
// launch ends here, by it (128 + signo, or 1), with what the agents cleared.
void launcher::impl::interrupted_between(cause_kind cause, int signo, std::string why) {
  ++interrupts;
  auto r = std::move(*inc.failed);
  r.cause = cause;
  r.signal = signo;
  r.exit_code = signo != 0 ? 128 + signo : 1;
  r.failed_rank.reset();
  r.failed_host.reset();
  r.failed_status.reset();
  r.summary = why;
  end_restarts(std::move(r), why);
}

void launcher::impl::maybe_start_incarnation() {
  if (!inc.between || inc.waiting > 0 || !inc.backoff_over || done || finishing) return;
  start_incarnation();
}

// The next incarnation: the same map, plans and agents; a new controller, PMIx namespace and
// MASTER_PORT; nothing of what the ended one's ranks asked for or published.
void launcher::impl::start_incarnation() {
  inc.between = false;
  inc.requested = false;
  inc.backoff_over = false;
  inc.failed.reset();
  ++inc.number;
  inc.started_at = now;
  decided(job_wide, "incarnation " + std::to_string(inc.number));
  auto options = req.control;
  options.streams_per_rank = req.output.merge_stderr ? 1 : 2;
  options.notify_failures = req.pmix;
  if (options.timeout.count() > 0) {
    // --timeout bounds the whole launch, every incarnation together.
    const auto left = options.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                            now - inc.launch_started);
    options.timeout = std::max(left, std::chrono::milliseconds(1));
  }
  ctl = controller(req.map, options);
  told.clear();
  pushed.clear();
  setup_given_up = false;
  for (auto& hs : hosts) {
    hs.pending_spawns.clear();
    hs.quiet = false;  // the agents watch the new ranks afresh (--stall-timeout)
  }
  quiet_hosts = 0;
  stall_due = false;
  stall_told = false;
  if (stall_round) {
    cancel_own_timer(stall_round->timer);
    stall_round.reset();
  }
  // Stdin went to the first incarnation; the next ones read /dev/null.
  std::fill(cfg.stdin_of.begin(), cfg.stdin_of.end(), stdin_source::none);
  req.env.facts.restart_count = inc.number;
  if (!req.master_port_fixed && inc.next_port != 0) req.env.facts.master_port = inc.next_port;
  inc.next_port = 0;
  if (pmix_facts) {
    modex_routes.clear();
    spawned.clear();
    offered.clear();
    spawned_apps = 0;
    store = control::data_store{};
    start_pmix();
  }
  queue.push_back(job_start{});
}

}  // namespace pm::launch
