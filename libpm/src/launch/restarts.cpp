// Restarts in place (docs/resilience.md): a launch with restart_policy::max_restarts runs its job
// as incarnations. When one fails, its controller ends it as any failure (every rank stopped, its
// output drained); then, instead of shutting the agents down, the launcher asks every agent still
// up to clear what is left of it (`restart`), waits for all of their answers (`restarted`: nothing
// of it is left on that host) and a short backoff, and starts the next incarnation with a new
// controller over the same map, a new PMIx namespace and a new MASTER_PORT. No ssh, no agent start.
// A lost host is quarantined; its ranks move to a spare (a host the map left empty, whose agent
// started with the job's), or, without one, the job goes on with fewer hosts (--min-hosts).
#include <signal.h>

#include <algorithm>

#include "agent/pmix/pmix_host.hpp"
#include "launch/launcher_impl.hpp"
#include "pm/error.hpp"
#include "text/seconds_text.hpp"

namespace pm::launch {

namespace {

// The controller's timers carry their incarnation above this bit, so that a timer of an ended
// controller that fires late never reaches the next one (both number their timers from 1).
constexpr int incarnation_shift = 40;
constexpr std::uint64_t timer_mask = (std::uint64_t{1} << incarnation_shift) - 1;

// Beyond a lost host's silence bound and kill grace: its agent's reaction and SIGKILL's delivery.
constexpr std::int64_t fence_margin_ms = 100;

// "2-3", "0,4-6": ascending ranks in runs.
std::string rank_ranges(std::span<const std::uint32_t> ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace

// Only failures of the program or of a host restart: a rank that failed, aborted (MPI_Abort; an
// embedder's cancel names no rank) or ended without MPI_Finalize, a job that stalled
// (--stall-timeout), a host lost (when a spare or --min-hosts gives its ranks a place). Never a
// user's signal, a cancel, the timeout, a refusal, or a program that cannot start (it will not
// start next time either).
bool launcher::impl::may_restart() const {
  // --enable-recovery restarts single ranks (rank_recovery.cpp), never the whole job.
  return inc.number < req.restarts.max_restarts && !req.restarts.per_rank && interrupts == 0 &&
         !refused && !done;
}

bool launcher::impl::restartable(const job_report& r, bool tell) {
  if (!may_restart()) return false;
  const auto host_failed = [&] {
    if (r.cause == cause_kind::host_lost) return true;
    // A host whose agent never came up (its ranks "could not start"), not a missing program.
    return r.cause == cause_kind::spawn_failed && r.failed_host &&
           hosts[*r.failed_host].lost_told && !hosts[*r.failed_host].agent;
  };
  // 126 and 127 are a shell's "cannot execute" and "not found": a program that cannot start
  // (--enable-recovery does not restart them either).
  const bool cannot_start = r.cause == cause_kind::rank_failed && r.failed_status &&
                            (r.failed_status->code() == 126 || r.failed_status->code() == 127);
  const bool failed = (r.cause == cause_kind::rank_failed && !cannot_start) ||
                      r.cause == cause_kind::stalled ||
                      (r.cause == cause_kind::abort_requested && r.failed_rank) || host_failed();
  // A discovery command may name hosts that give the ranks a place, and hosts still being set up
  // may come: the place is decided once they answered.
  if (!failed) return false;
  if (!req.restarts.host_discovery.empty()) return true;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if (setting_up(h)) return true;
  }
  if (place_next().has_value()) return true;
  // A failure a restart was for, with budget left, but no place: said, not silent.
  if (tell) out->push_back(say{"cannot restart the job: " + no_place_reason()});
  return false;
}

// A host a lost one's ranks may move to: its agent is up and holds none of the next
// incarnation's ranks (the spares, and hosts only a spawned job used), its shape known if hosts
// are planned.
bool launcher::impl::usable_spare(std::uint32_t h) const {
  const auto& hs = hosts[h];
  if (hs.quarantined || hs.lost_told || !hs.agent || !link_usable(h) || hs.closed ||
      hs.shutdown_sent || hs.abandoned) {
    return false;
  }
  if (map_of_next().node_of_host(h)) return false;
  return !wants_shapes || (h < shapes.size() && shapes[h]);
}

// Where the next incarnation runs: where the last one ran (or was to run) when none of its hosts
// was lost; else each lost host's node on a spare that fits its ranks (allocation order); else,
// with --min-hosts, the job mapped anew onto the hosts that are left. A job that shrank is mapped
// anew onto the hosts left and the usable spares (hosts that joined among them) as soon as there
// is one: it grows back toward its -np. nullopt: no place.
std::optional<launcher::impl::next_place> launcher::impl::place_next() const {
  const auto& base = map_of_next();
  const auto& alloc = base.allocation();
  const auto lost = [&](std::uint32_t h) {
    const auto& hs = hosts[h];
    return hs.quarantined || hs.lost_told || !hs.agent || hs.down;
  };
  std::vector<std::uint32_t> lost_nodes;
  for (std::uint32_t n = 0; n < base.num_nodes(); ++n) {
    if (lost(base.host_of_node(n))) lost_nodes.push_back(n);
  }
  // A job that shrank (--min-hosts) grows back, up to the -np asked for, onto the hosts that
  // joined or were spare (one app: as it shrinks).
  const auto asked = req.apps.empty() ? 0u : req.apps[0].np.value_or(UINT32_MAX);
  bool grows = req.restarts.min_hosts > 0 && req.apps.size() == 1 &&
               req.mapping.by != map_by::ppr_node && base.size() < asked;
  if (grows) {
    grows = false;
    for (std::uint32_t h = 0; h < hosts.size() && !grows; ++h) grows = usable_spare(h);
  }
  if (lost_nodes.empty() && !grows) return next_place{};
  const bool oversubscribe =
      req.mapping.oversubscribe.value_or(alloc.source == allocation_source::implicit_local);
  const auto fits = [&](std::uint32_t h, std::uint32_t from) {
    const auto& spare = alloc.hosts[h];
    const auto ranks = base.ranks_on_host(from);
    const auto count = static_cast<std::uint32_t>(ranks.size());
    if ((spare.slots < count && !oversubscribe) ||
        (spare.max_slots != 0 && spare.max_slots < count))
      return false;
    // An app limited to some hosts (-H in its segment) moves only to one of them.
    for (const auto r : ranks) {
      const auto& allowed = req.apps[base.at(r).app].hosts;
      if (!allowed.empty() &&
          std::find(allowed.begin(), allowed.end(), spare.name) == allowed.end())
        return false;
    }
    return true;
  };
  std::optional<rank_map> moved;
  std::string line;
  std::vector<bool> taken(hosts.size(), false);
  bool placed = !grows;
  for (std::size_t i = 0; i < lost_nodes.size() && placed; ++i) {
    const auto n = lost_nodes[i];
    const auto from = base.host_of_node(n);
    std::optional<std::uint32_t> to;
    for (std::uint32_t h = 0; h < hosts.size() && !to; ++h) {
      if (!taken[h] && usable_spare(h) && fits(h, from)) to = h;
    }
    if (!to) {
      placed = false;
      continue;
    }
    taken[*to] = true;
    moved = move_node(moved ? *moved : base, n, *to);
    const auto ranks = base.ranks_on_host(from);
    line += (line.empty() ? "" : "; ") + std::string(ranks.size() == 1 ? "rank " : "ranks ") +
            rank_ranges(ranks) + (ranks.size() == 1 ? " moves" : " move") + " from " +
            alloc.hosts[from].name + " to spare " + alloc.hosts[*to].name;
  }
  if (placed) return next_place{std::move(moved), std::move(line)};
  // No spare for every lost host: fewer hosts, if allowed (one app: how several would shrink
  // is not the launcher's to guess).
  if (req.restarts.min_hosts == 0 || req.apps.size() != 1) return std::nullopt;
  std::vector<std::uint32_t> left;
  std::uint64_t slots = 0;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if ((base.node_of_host(h) && !lost(h)) || usable_spare(h)) {
      left.push_back(h);
      slots += alloc.hosts[h].slots;
    }
  }
  if (left.size() < req.restarts.min_hosts || slots == 0) return std::nullopt;
  job_spec job{req.apps, req.mapping};
  // The world shrinks to the slots that are left (never above the -np asked for).
  if (job.mapping.by != map_by::ppr_node) {
    job.apps[0].np = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(job.apps[0].np.value_or(UINT32_MAX), slots));
  }
  try {
    auto m = map_job_on(job, alloc, left);
    line = (m.size() > base.size() ? "growing back to " : "going on with ") +
           std::to_string(m.num_nodes()) + " hosts and " + std::to_string(m.size()) +
           " ranks (--min-hosts " + std::to_string(req.restarts.min_hosts) + ")";
    return next_place{std::move(m), std::move(line)};
  } catch (const pm::error&) {
    return std::nullopt;
  }
}

// Hosts the map leaves empty are spares when the launch may restart: their agents start now,
// after the job's own hosts, so that a lost host's ranks find one ready.
void launcher::impl::open_spares() {
  // --enable-recovery never restarts the whole job: no spare could be used.
  if (req.restarts.max_restarts == 0 || !req.restarts.spares || req.restarts.per_rank || done ||
      finishing)
    return;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if (req.map.node_of_host(h) || hosts[h].attempts > 0) continue;
    hosts[h].spare = true;
    decided(h, "spare");
    link_to(h);
  }
}

// A host lost during a launch that restarts is not used again in it (unless a discovery command
// names it when nothing else is left: host_discovery.cpp).
void launcher::impl::quarantine(std::uint32_t h, const std::string& reason) {
  auto& hs = hosts[h];
  if (hs.quarantined) return;
  hs.quarantined = true;
  decided(h, "quarantined");
  inc.quarantined.push_back(quarantined_host{h, reason, inc.number, host_info(h).name});
  if (!req.map.node_of_host(h) && !map_of_next().node_of_host(h)) {
    out->push_back(say{"spare host " + host_info(h).name + " was lost (" + reason +
                       "); it is not used again"});
  }
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
  i.size = req.map.size();
  i.hosts = req.map.num_nodes();
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

// Every agent clears the incarnation (also early: clear_leftovers, when what the ranks left holds
// their output open, needs the agents to kill it, and a restart kills it anyway). Asked again
// when the next incarnation was placed anew (a host lost meanwhile): an agent that answered
// answers again, with the new PMIx facts registered and a fresh port.
void launcher::impl::request_restart(std::optional<std::uint32_t> only) {
  if (!only) inc.requested = true;
  const auto next = inc.number + 1;
  const auto& map = map_of_next();
  std::optional<link::pmix_job> facts;
  if (pmix_facts) {
    facts = agent::pmix::pmix_job_of(agent::pmix::make_job_info(map, namespace_of(next), 0));
  }
  for (std::uint32_t h = only.value_or(0); h < (only ? *only + 1 : hosts.size()); ++h) {
    auto& hs = hosts[h];
    if (!hs.agent || !link_usable(h) || hs.closed || hs.lost_told || hs.shutdown_sent) continue;
    link::restart_request m{next, std::nullopt};
    if (facts) {
      m.pmix = facts;
      m.pmix->node = map.node_of_host(h).value_or(link::no_node);
    }
    send_to(h, m);
    if (!hs.restart_waited) {
      hs.restart_waited = true;
      ++inc.waiting;
    }
  }
}

// Lost hosts are quarantined and the next incarnation placed without them.
void launcher::impl::replace_lost(next_place place) {
  if (!place.map) return;
  const auto& before = map_of_next();
  for (std::uint32_t n = 0; n < before.num_nodes(); ++n) {
    const auto h = before.host_of_node(n);
    if (!place.map->node_of_host(h) && !hosts[h].quarantined) {
      const auto why = loss_reasons.find(h);
      quarantine(h, why == loss_reasons.end() ? "lost" : why->second);
    }
  }
  inc.next_map = std::move(place.map);
  decided(job_wide, "placed anew");
  out->push_back(say{place.line});
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
  // Hosts still being set up are awaited when the place may need them (a host of the job was
  // lost, or never came up): each is up or lost before the place is decided. A restart in place
  // waits for no spare (a spare whose ssh tries a silent host held it up for ssh's timeout).
  const bool discovering = !req.restarts.host_discovery.empty();
  auto here = place_next();
  const bool in_place = !discovering && here && !here->map;
  // Said as it is: a restart with no place yet may still not come ("cannot restart the job"
  // followed a "restarting the job" line); it is announced once placed.
  inc.announce = !here.has_value();
  if (inc.announce) {
    out->push_back(say{inc.failed->summary + "; the job's restart (" + std::to_string(next) +
                       " of " + std::to_string(req.restarts.max_restarts) + ") waits for " +
                       (discovering ? "--host-discovery-script" : "the hosts being set up")});
  } else {
    out->push_back(say{restarting_text() + ": " + inc.failed->summary});
  }
  if (discovering) here.reset();
  for (std::uint32_t h = 0; h < hosts.size() && !in_place; ++h) {
    if (!setting_up(h) || hosts[h].joining) continue;
    hosts[h].joining = true;
    ++inc.joining;
  }
  // With a discovery command, or hosts awaited, the place waits for them (place_after_discovery).
  const bool waits = discovering || inc.joining > 0;
  auto place = waits ? std::nullopt : std::move(here);  // restartable() found one
  const bool moved = place && place->map;
  if (moved) replace_lost(std::move(*place));
  if (discovering) discover();
  // What the ended incarnation's ranks waited for is gone with them.
  for (auto& [key, id] : lookup_timers) cancel_own_timer(id);
  lookup_timers.clear();
  cancel_own_timer(hurry_timer);
  // Asked already (clear_leftovers) for where it ran: again, if it moved.
  if (!inc.requested || moved) request_restart();
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
  // --timeout bounds the whole launch: also the backoff, the discovery, the hosts awaited.
  if (req.control.timeout.count() > 0) {
    const auto left = timeout_left();
    if (left.count() <= 0) {
      timed_out_between();
      return;
    }
    inc.deadline_timer = start_own_timer(left, own_timer{timer_kind::deadline, 0, 0});
  }
  maybe_start_incarnation();
}

// What --timeout leaves of the launch now (every incarnation and the waits between them).
std::chrono::milliseconds launcher::impl::timeout_left() const {
  // Rounded down: the timer fires at the deadline or after it, never before (a model that
  // reads the clock saw a timeout 0.3 ms early).
  return req.control.timeout -
         std::chrono::floor<std::chrono::milliseconds>(now - inc.launch_started);
}

// --timeout ran out between two incarnations: no rank runs, so the launch ends here, 124.
void launcher::impl::timed_out_between() {
  auto r = std::move(*inc.failed);
  r.cause = cause_kind::timeout;
  r.exit_code = exit_codes::timeout;
  r.signal = 0;
  r.failed_rank.reset();
  r.failed_host.reset();
  r.failed_status.reset();
  r.summary = "job timed out after " + text::seconds_text(req.control.timeout) +
              " s, before its restart (" + std::to_string(inc.number + 1) + " of " +
              std::to_string(req.restarts.max_restarts) + ") could start";
  const auto line = r.summary;
  end_restarts(std::move(r), line);
}

void launcher::impl::on_restarted(std::uint32_t h, const link::restarted& r) {
  auto& hs = hosts[h];
  if (!hs.restart_waited || r.incarnation != inc.number + 1) return;  // not asked: ignored
  hs.restart_waited = false;
  --inc.waiting;
  const auto& map = map_of_next();
  if (map.num_nodes() > 0 && h == map.host_of_node(map.at(0).node)) inc.next_port = r.port;
  maybe_start_incarnation();
}

// A host lost while the launch waits to restart: a spare the next incarnation does not use is
// only quarantined; one of its hosts is replaced as at the failure, else the failure that was to
// be restarted ends the launch.
void launcher::impl::restart_host_lost(std::uint32_t h, const std::string& reason) {
  loss_reasons.emplace(h, reason);
  const bool awaited = hosts[h].joining;
  if (!map_of_next().node_of_host(h)) {
    quarantine(h, reason);
    if (awaited) {
      host_joined(h);
      return;
    }
    maybe_start_incarnation();
    return;
  }
  if (awaited) {  // one of the job's hosts that never came up: placed with the others' answers
    host_joined(h);
    return;
  }
  // The hosts a discovery command names are awaited: the place is decided with them.
  if (inc.discovering || inc.joining > 0) return;
  if (auto place = place_next()) {
    replace_lost(std::move(*place));
    request_restart();
    maybe_start_incarnation();
    return;
  }
  auto r = std::move(*inc.failed);
  end_restarts(std::move(r),
               "cannot restart the job: host " + host_info(h).name + " was lost (" + reason + ")");
}

// The launch ends between two incarnations (a host lost, a signal, a cancel): `r` is its report.
void launcher::impl::end_restarts(job_report r, const std::string& line) {
  inc.between = false;
  inc.between_ended = true;
  cancel_own_timer(inc.backoff_timer);
  cancel_own_timer(inc.fence_timer);
  cancel_own_timer(inc.deadline_timer);
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

// A host lost by its silence while the launch may restart: its agent, if it runs (a cut network),
// ends its ranks by itself once it hears nothing from the launcher (the same silence bound,
// noticed up to a heartbeat interval after ours) and the kill grace; the next incarnation waits
// for that, so that no rank runs twice at once (a spare's copy beside the cut-off host's, writing
// the same checkpoint). A host whose link ended is not waited for: its agent, if it lives, read
// the same end and signalled its ranks already. mpirun and torchrun restart at once.
void launcher::impl::fence_lost_host() {
  const auto fence = req.control.kill_grace + req.remote.heartbeat_interval +
                     std::chrono::milliseconds(fence_margin_ms);
  inc.fenced_until = std::max(inc.fenced_until, now + fence);
}

void launcher::impl::maybe_start_incarnation() {
  if (!inc.between || inc.waiting > 0 || !inc.backoff_over || inc.discovering || inc.joining > 0 ||
      done || finishing)
    return;
  if (now < inc.fenced_until) {
    if (inc.fence_timer == 0) {
      inc.fence_timer =
          start_own_timer(std::chrono::ceil<std::chrono::milliseconds>(inc.fenced_until - now),
                          own_timer{timer_kind::fence, 0, 0});
    }
    return;
  }
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
  cancel_own_timer(inc.deadline_timer);
  decided(job_wide, "incarnation " + std::to_string(inc.number));
  auto options = control_of(req);
  if (options.timeout.count() > 0) {
    // --timeout bounds the whole launch, every incarnation together (the deadline timer ends
    // the launch before a start with nothing left).
    options.timeout_said = options.timeout;
    options.timeout = std::max(timeout_left(), std::chrono::milliseconds(1));
  }
  const bool moved = inc.next_map.has_value();
  if (moved) {
    req.map = std::move(*inc.next_map);
    inc.next_map.reset();
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
  for (std::uint32_t r = 0; r < cfg.stdin_of.size(); ++r) release_stdin_of(r);
  cfg.stdin_of.assign(req.map.size(), stdin_source::none);
  req.env.facts.restart_count = inc.number;
  inc.port = inc.next_port;
  inc.next_port = 0;
  if (!req.master_port_fixed && inc.port != 0) req.env.facts.master_port = inc.port;
  if (moved) {
    // Other hosts: MASTER_ADDR and every node's address anew, each host planned anew.
    facts_ready = false;
    if (wants_shapes) {
      plans_done = false;
      shaped_nodes = 0;
      for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
        const auto h = req.map.host_of_node(n);
        if (h < shapes.size() && shapes[h]) ++shaped_nodes;
      }
    }
    decide_facts();
  }
  if (pmix_facts) {
    modex_routes.clear();
    spawned.clear();
    offered.clear();
    claiming.clear();  // an answer for one of them is ignored
    spawned_apps = 0;
    store = control::data_store{};
    start_pmix();
  }
  queue.push_back(job_start{});
}

}  // namespace pm::launch
