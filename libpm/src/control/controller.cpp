// The controller: the job's life and failure policy, as a sans-I/O state machine
// (docs/architecture.md, docs/failure-semantics.md).
//
// Cost model: per rank a 32-byte slot (plus a reason string for the few ranks that could not
// start or called abort, and one per lost host). Every event is O(1), except those that by their
// nature reach every live rank — the event that begins an abort, the grace timer's SIGKILL,
// a forwarded signal — which walk the ranks once, host by host, and report(), which copies them.
// Counters (ranks not ended, streams open) decide the finish without a scan.
//
// Spawned jobs (job_spawned) append their ranks to the same slots; the rank map knows only the
// first job, so a spawned process's host is kept beside it (4 bytes), and per host its spawned
// processes, for the walks that go host by host.
#include "pm/controller.hpp"

#include "pm/error.hpp"
#include "text/seconds_text.hpp"

#include <signal.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <unordered_map>

namespace pm {

namespace {

enum class phase : std::uint8_t { idle, running, aborting, finished };

// rank_slot::flags. The two stream bits are indexed by output_stream (out = 0, err = 1).
constexpr std::uint8_t closed_out = 1u << 0;
constexpr std::uint8_t closed_err = 1u << 1;
constexpr std::uint8_t closed_all = closed_out | closed_err;
constexpr std::uint8_t streams_counted = 1u << 2;  // its open streams are in the job's counter
constexpr std::uint8_t called_abort = 1u << 3;     // it failed by itself (abort, unfinalized)
// Recovery (controller_options::rank_restarts): its failed process is to be replaced once every
// stream of that process ended; the rank is pending meanwhile.
constexpr std::uint8_t respawn_due = 1u << 4;
// Recovered on its unfinalized notice, which comes before its exit's report: that report, still
// to come, is the failed process's, not the new one's.
constexpr std::uint8_t exit_to_come = 1u << 5;

// Per rank: 32 bytes, so that a simulated 800,000-rank job needs 25.6 MB here.
struct rank_slot {
  job_time started_at{-1};  // -1: not known
  job_time ended_at{-1};
  std::int64_t pid = 0;
  std::int32_t code = 0;   // exit code (or spawn failure code, abort status)
  std::int16_t signo = 0;  // killed by this signal, if non-zero (Linux has 64)
  rank_state state = rank_state::pending;
  std::uint8_t flags = 0;

  exit_status status() const {
    return signo != 0 ? exit_status::signaled(signo) : exit_status::exited(code);
  }
  void set_status(exit_status s) {
    code = s.code();
    signo = static_cast<std::int16_t>(s.signal());
  }
};
static_assert(sizeof(rank_slot) == 32,
              "keep the per-rank state compact (docs/failure-semantics.md)");

using text::seconds_text;

std::string ranks_text(std::uint32_t n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

bool is_terminal(rank_state s) {
  return s != rank_state::pending && s != rank_state::running;
}

bool is_interrupt(int signo) {
  return signo == SIGINT || signo == SIGTERM || signo == SIGHUP;
}

// Launcher signals the ranks get as they are.
bool is_forwarded(int signo) {
  return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGTSTP || signo == SIGCONT;
}

}  // namespace

bool job_takes_signal(int signo) noexcept {
  return is_interrupt(signo) || is_forwarded(signo);
}

void check_job_signal(int signo) {
  if (!job_takes_signal(signo))
    throw error(errc::usage, "signal " + std::to_string(signo) +
                                 " is not one a job takes (SIGINT, SIGTERM, SIGHUP, SIGUSR1, "
                                 "SIGUSR2, SIGTSTP, SIGCONT)");
}

struct controller::state {
  const rank_map* map;
  controller_options options;
  std::uint8_t expected_streams;  // closed_* bits of the streams each started rank has
  phase ph = phase::idle;
  std::vector<rank_slot> ranks;  // the first job's ranks, then every spawned job's
  std::unordered_map<std::uint32_t, std::string> rank_reasons;  // spawn failure, abort message
  std::unordered_map<std::uint32_t, std::string> host_reasons;  // why a host was lost
  std::uint32_t not_ended = 0;                                  // pending + running
  std::vector<std::uint32_t> not_ended_on_host;                 // per allocation host
  // Spawned jobs: first process of each job (job 0 first: 0), the host of each spawned process
  // (process - map->size()), per allocation host its spawned processes (ascending), and the hosts
  // only spawned jobs use (ascending), walked after the first job's nodes.
  std::vector<std::uint32_t> job_firsts{0};
  std::vector<std::uint32_t> spawned_host;
  std::vector<std::vector<std::uint32_t>> spawned_on_host;  // sized at the first job_spawned
  std::vector<std::uint32_t> spawned_only_hosts;
  std::vector<bool> host_gone;      // per allocation host: host_lost came (no job may join there)
  std::uint64_t streams_open = 0;   // of started ranks, not yet at end-of-stream
  std::uint64_t next_timer = 1;     // ids are unique per controller; 0 means "none"
  std::uint64_t timeout_timer = 0;  // 0: not running
  std::uint64_t grace_timer = 0;
  bool grace_expired = false;  // SIGKILL is due for every rank still alive
  bool leftovers_cleared = false;
  int abort_signal = SIGTERM;    // what the abort sent (SIGTERM, or the launcher's signal)
  std::uint32_t interrupts = 0;  // SIGINT/SIGTERM/SIGHUP the launcher received
  // The first failure (or signal, timeout, cancel) decides the outcome.
  cause_kind cause = cause_kind::none;
  int exit_code = 0;
  int signal = 0;
  std::optional<std::uint32_t> failed_rank, failed_host;
  std::optional<exit_status> failed_status;
  std::string summary;
  // Recovery (controller_options::rank_restarts): restarts given so far (the whole job's budget),
  // each restart in order, each rank's own count, the ranks whose replacement waits for their
  // failed process's streams, and the signals forwarded to the ranks (a rank they end is the
  // user's doing: not recovered).
  std::uint32_t restarts_used = 0;
  std::vector<rank_restart_report> restarts;
  std::unordered_map<std::uint32_t, std::uint32_t> restart_counts;
  std::vector<std::uint32_t> respawn_waiting;
  std::uint64_t forwarded = 0;
  job_time event_time{0};  // of the event being handled

  state(const rank_map& m, controller_options o)
      : map(&m),
        options(o),
        expected_streams(o.streams_per_rank >= 2   ? closed_all
                         : o.streams_per_rank == 1 ? closed_out
                                                   : std::uint8_t{0}),
        ranks(m.size()),
        not_ended(m.size()),
        not_ended_on_host(m.allocation().hosts.size(), 0),
        host_gone(m.allocation().hosts.size(), false) {
    for (std::uint32_t rank = 0; rank < m.size(); ++rank) ++not_ended_on_host[host_of(rank)];
  }

  std::uint32_t host_of(std::uint32_t rank) const {
    return rank < map->size() ? map->at(rank).host : spawned_host[rank - map->size()];
  }
  const std::string& host_name(std::uint32_t host) const {
    return map->allocation().hosts[host].name;
  }
  std::uint32_t num_hosts() const {
    return static_cast<std::uint32_t>(map->allocation().hosts.size());
  }
  job_rank job_rank_of(std::uint32_t rank) const {
    const auto job = static_cast<std::uint32_t>(
        std::upper_bound(job_firsts.begin(), job_firsts.end(), rank) - job_firsts.begin() - 1);
    return {job, rank - job_firsts[job]};
  }
  // "rank 3 on node2", or for a spawned job's rank "rank 0 of spawned job 1 on node2".
  std::string rank_where(std::uint32_t rank) const {
    if (rank < map->size())
      return "rank " + std::to_string(rank) + " on " + host_name(host_of(rank));
    const auto jr = job_rank_of(rank);
    return "rank " + std::to_string(jr.rank) + " of spawned job " + std::to_string(jr.job) +
           " on " + host_name(host_of(rank));
  }
  // Every host with processes, in walking order: the first job's nodes, then the hosts only
  // spawned jobs use.
  template <class F>
  void for_each_host(F&& f) const {
    for (std::uint32_t node = 0; node < map->num_nodes(); ++node) f(map->host_of_node(node));
    for (auto host : spawned_only_hosts) f(host);
  }
  // A host's processes, ascending: the first job's, then the spawned ones (numbered after).
  template <class F>
  void for_each_process_on(std::uint32_t host, F&& f) const {
    for (auto rank : map->ranks_on_host(host)) f(rank);
    if (host < spawned_on_host.size()) {
      for (auto rank : spawned_on_host[host]) f(rank);
    }
  }
  bool valid(std::uint32_t rank) const { return rank < ranks.size(); }

  // Ends a rank; false if it had ended already.
  bool end_rank(rank_slot& r, rank_state final_state, job_time now) {
    if (is_terminal(r.state)) return false;
    r.state = final_state;
    r.ended_at = now;
    --not_ended;
    --not_ended_on_host[host_of(static_cast<std::uint32_t>(&r - ranks.data()))];
    return true;
  }

  // ---- telling the survivors (notify_failures, abort policy off) ----
  bool notifying() const { return options.notify_failures && !options.abort_on_failure; }
  // One notify_ranks per host with ranks not ended, in node order: O(nodes) per failure.
  void notify_survivors(notice_kind kind, std::vector<std::uint32_t> affected, int code,
                        const std::string& line, std::vector<action>& out) {
    if (!notifying()) return;
    for_each_host([&](std::uint32_t host) {
      if (not_ended_on_host[host] != 0)
        out.push_back(notify_ranks{host, kind, affected, code, line});
    });
  }

  // ---- streams: a rank's streams count from its start; a close may come before the start ----
  std::uint64_t open_of(const rank_slot& r) const {
    return static_cast<std::uint64_t>(
        std::popcount(static_cast<unsigned>(expected_streams & ~r.flags & closed_all)));
  }
  void count_streams(rank_slot& r) {
    if ((r.flags & streams_counted) != 0) return;
    r.flags |= streams_counted;
    streams_open += open_of(r);
  }
  void close_stream(rank_slot& r, std::uint8_t bit) {
    if ((expected_streams & bit) == 0 || (r.flags & bit) != 0) return;  // unknown or duplicate
    r.flags |= bit;
    if ((r.flags & streams_counted) != 0) --streams_open;
  }
  // Its host is gone: whatever it had not delivered is lost with the host.
  void drop_streams(rank_slot& r) {
    if ((r.flags & streams_counted) != 0) streams_open -= open_of(r);
    r.flags |= closed_all;
  }

  // ---- signals ----
  // `signos`, in order, to every running rank, batched per host; returns how many ranks.
  std::uint32_t signal_running(std::initializer_list<int> signos, std::vector<action>& out) {
    std::uint32_t count = 0;
    std::vector<std::uint32_t> live;
    for_each_host([&](std::uint32_t host) {
      if (not_ended_on_host[host] == 0) return;  // nobody alive there: skip the walk
      live.clear();
      for_each_process_on(host, [&](std::uint32_t rank) {
        if (ranks[rank].state == rank_state::running) live.push_back(rank);
      });
      if (live.empty()) return;
      count += static_cast<std::uint32_t>(live.size());
      for (int signo : signos) out.push_back(signal_ranks{host, live, signo});
    });
    return count;
  }

  void signal_one(std::uint32_t rank, std::initializer_list<int> signos, std::vector<action>& out) {
    for (int signo : signos) out.push_back(signal_ranks{host_of(rank), {rank}, signo});
  }

  // Begins the abort: SIGCONT (so that stopped ranks act on what follows) then `signo` to every
  // running rank, and the grace timer after which SIGKILL follows. Ranks still being spawned get
  // the same when their start is reported. Returns the number of ranks signalled now (the line
  // counts only those: a rank that ended or never started gets nothing).
  std::uint32_t begin_abort(int signo, std::vector<action>& out) {
    ph = phase::aborting;
    abort_signal = signo;
    end_respawns();
    if (not_ended == 0) return 0;
    const auto n = signal_running({SIGCONT, signo}, out);
    grace_timer = next_timer++;
    out.push_back(start_timer{grace_timer, options.kill_grace});
    return n;
  }

  std::string abort_tail(std::uint32_t n) const {
    if (n == 0) return {};
    return "; aborting the job (" + signal_name(abort_signal) + " to " + ranks_text(n) + ")";
  }

  void decide(cause_kind kind, int code, std::string line) {
    if (cause != cause_kind::none) return;
    cause = kind;
    exit_code = code;
    summary = std::move(line);
  }

  // A failure: the first one decides the outcome; with abort-on-failure (or for an explicit
  // abort) it aborts the job. Callers handle failures during an abort themselves.
  void failure(cause_kind kind, std::optional<std::uint32_t> rank, std::uint32_t host,
               std::optional<exit_status> status, int code, std::string line, bool force_abort,
               std::vector<action>& out, notice_kind notice, std::vector<std::uint32_t> affected,
               int notice_code) {
    if (cause == cause_kind::none) {
      failed_rank = rank;
      failed_host = host;
      failed_status = status;
      decide(kind, code, line);
    }
    notify_survivors(notice, std::move(affected), notice_code, line, out);
    if (options.abort_on_failure || force_abort) {
      const auto n = begin_abort(SIGTERM, out);
      out.push_back(emit{line + abort_tail(n)});
    } else {
      out.push_back(emit{std::move(line)});
    }
  }

  // ---- recovery (controller_options::rank_restarts) ----
  // A failure of a first-job rank's process that it is started again for: while the job runs and
  // the budget lasts; never a program that cannot run (126, 127), a signal the launcher forwarded,
  // a rank of a lost host or of a spawned job.
  bool recoverable(std::uint32_t rank, exit_status status) const {
    if (ph != phase::running || restarts_used >= options.rank_restarts) return false;
    if (rank >= map->size() || host_gone[host_of(rank)]) return false;
    if (status.is_signal()) {
      const auto signo = status.signal();
      return signo <= 0 || signo >= 64 || (forwarded & (std::uint64_t{1} << signo)) == 0;
    }
    return status.code() != 126 && status.code() != 127;
  }

  // The rank's process failed (`status`) and the rank starts again: it is pending from now on,
  // its group gets SIGKILL (what the failed process left would hold its output open), and its
  // spawn goes out once every stream of the failed process ended (maybe_respawn).
  void recover(std::uint32_t rank, exit_status status, std::vector<action>& out,
               const char* why = "") {
    auto& r = ranks[rank];
    const auto host = host_of(rank);
    const auto line = rank_where(rank) + " " + status.describe() + why;
    ++restarts_used;
    rank_restart_report rr;
    rr.number = restarts_used;
    rr.rank = rank;
    rr.host = host;
    rr.count = ++restart_counts[rank];
    rr.status = status;
    rr.summary = line;
    rr.at = event_time;
    restarts.push_back(rr);
    r.set_status(status);
    r.state = rank_state::pending;
    r.ended_at = job_time{-1};
    r.flags |= respawn_due;
    respawn_waiting.push_back(rank);
    out.push_back(rank_restarting{std::move(rr)});
    out.push_back(emit{"restarting " + rank_where(rank) + " (" + std::to_string(restarts_used) +
                       " of " + std::to_string(options.rank_restarts) + "): " + line});
    out.push_back(signal_ranks{host, {rank}, SIGKILL});
    maybe_respawn(rank, out);
  }

  void maybe_respawn(std::uint32_t rank, std::vector<action>& out) {
    auto& r = ranks[rank];
    if ((r.flags & respawn_due) == 0 || r.state != rank_state::pending) return;
    if ((r.flags & expected_streams) != expected_streams) return;  // the failed one's are open
    r.flags = static_cast<std::uint8_t>(r.flags & ~(respawn_due | closed_all | streams_counted));
    std::erase(respawn_waiting, rank);
    out.push_back(spawn{host_of(rank), {rank}});
  }

  // The job is ending: a rank waiting for its replacement ends as its failed process did.
  void end_respawns() {
    for (auto rank : respawn_waiting) {
      auto& r = ranks[rank];
      r.flags = static_cast<std::uint8_t>(r.flags & ~respawn_due);
      if (r.state == rank_state::pending) end_rank(r, rank_state::exited, event_time);
    }
    respawn_waiting.clear();
  }

  // ---- events ----
  void on(job_time, const job_start&, std::vector<action>& out) {
    if (ph != phase::idle) return;
    ph = phase::running;
    for (std::uint32_t node = 0; node < map->num_nodes(); ++node) {
      const auto host = map->host_of_node(node);
      const auto on_host = map->ranks_on_host(host);
      if (on_host.empty()) continue;
      out.push_back(spawn{host, std::vector<std::uint32_t>(on_host.begin(), on_host.end())});
    }
    if (options.timeout.count() > 0) {
      timeout_timer = next_timer++;
      out.push_back(start_timer{timeout_timer, options.timeout});
    }
  }

  void on(job_time now, const rank_started& e, std::vector<action>& out) {
    if (!valid(e.rank)) return;
    auto& r = ranks[e.rank];
    if (r.state != rank_state::pending) {
      // Its exit overtook its start: keep the pid for the report; anything else is a duplicate.
      if (r.pid == 0 && (r.state == rank_state::exited || r.state == rank_state::killed))
        r.pid = e.pid;
      return;
    }
    r.state = rank_state::running;
    r.pid = e.pid;
    r.started_at = now;
    // The failed process's exit came before this start on the same link, or never will.
    r.flags = static_cast<std::uint8_t>(r.flags & ~exit_to_come);
    count_streams(r);
    if (ph == phase::aborting) {
      // It started after the abort began: it gets what the others got.
      if (grace_expired)
        signal_one(e.rank, {SIGKILL}, out);
      else
        signal_one(e.rank, {SIGCONT, abort_signal}, out);
    }
  }

  void on(job_time now, const rank_spawn_failed& e, std::vector<action>& out) {
    if (!valid(e.rank)) return;
    auto& r = ranks[e.rank];
    if (r.state != rank_state::pending) return;  // it started, or ended already
    end_rank(r, rank_state::spawn_failed, now);
    r.set_status(exit_status::exited(e.code));
    rank_reasons[e.rank] = e.reason;
    if (ph == phase::aborting) return;  // the job is ending anyway: not a cause
    failure(cause_kind::spawn_failed, e.rank, host_of(e.rank), exit_status::exited(e.code), e.code,
            rank_where(e.rank) + " could not start: " + e.reason, false, out,
            notice_kind::rank_spawn_failed, {e.rank}, e.code);
  }

  void on(job_time, const stream_closed& e, std::vector<action>& out) {
    if (!valid(e.rank) || static_cast<unsigned>(e.stream) > 1) return;
    close_stream(ranks[e.rank], static_cast<std::uint8_t>(1u << static_cast<unsigned>(e.stream)));
    if ((ranks[e.rank].flags & respawn_due) != 0) maybe_respawn(e.rank, out);
  }

  void on(job_time now, const rank_exited& e, std::vector<action>& out) {
    if (!valid(e.rank)) return;
    auto& r = ranks[e.rank];
    if ((r.flags & exit_to_come) != 0) {  // the recovered process's own (see exit_to_come)
      r.flags = static_cast<std::uint8_t>(r.flags & ~exit_to_come);
      return;
    }
    if (is_terminal(r.state)) return;
    if (r.started_at.count() < 0) r.started_at = now;  // its exit overtook its start
    count_streams(r);  // its streams close later, also when its start was never reported
    r.set_status(e.status);
    if ((r.flags & called_abort) != 0) {
      end_rank(r, rank_state::exited, now);  // it failed already, when it called abort
      return;
    }
    if (ph == phase::aborting) {
      end_rank(r, rank_state::killed, now);  // whatever its status: a victim, not a cause
      return;
    }
    if (!e.status.success() && recoverable(e.rank, e.status)) {
      recover(e.rank, e.status, out);
      return;
    }
    end_rank(r, rank_state::exited, now);
    if (e.status.success()) return;
    failure(cause_kind::rank_failed, e.rank, host_of(e.rank), e.status, e.status.shell_code(),
            rank_where(e.rank) + " " + e.status.describe(), false, out,
            e.status.is_signal() ? notice_kind::rank_signaled : notice_kind::rank_exited, {e.rank},
            e.status.is_signal() ? e.status.signal() : e.status.code());
  }

  void on(job_time now, const host_lost& e, std::vector<action>& out) {
    if (e.host >= map->allocation().hosts.size()) return;
    if (e.before_hello) {
      never_joined(now, e, out);
      return;
    }
    std::uint32_t lost = 0;
    std::optional<std::uint32_t> first;
    std::vector<std::uint32_t> taken;  // for the survivors' notice
    bool with_any = false;             // a host lost with it had ranks to lose
    const auto lose_ranks_of = [&](std::uint32_t host) {
      if (host >= map->allocation().hosts.size()) return false;
      host_gone[host] = true;
      bool any = false;
      for_each_process_on(host, [&](std::uint32_t rank) {
        auto& r = ranks[rank];
        // Output still in flight from that host is gone with it, also for ranks that had ended.
        drop_streams(r);
        if (!end_rank(r, rank_state::lost, now)) return;
        if (!first) first = rank;
        ++lost;
        any = true;
        if (notifying()) taken.push_back(rank);
      });
      return any;
    };
    lose_ranks_of(e.host);
    for (const auto w : e.with) {
      if (w == e.host || !lose_ranks_of(w)) continue;
      with_any = true;
      host_reasons.try_emplace(w, e.with_reason);
    }
    if (lost == 0) return;  // a duplicate, or hosts whose ranks had all ended
    host_reasons[e.host] = e.reason;
    if (ph == phase::aborting) return;
    failure(cause_kind::host_lost, first, e.host, std::nullopt, exit_codes::host_lost,
            "host " + host_name(e.host) + " was lost (" + e.reason + "); " +
                (with_any ? "their " : "its ") + ranks_text(lost) + " failed",
            false, out, notice_kind::host_lost, std::move(taken), 0);
  }

  // host_lost before the agent's hello: its ranks never started. A set-up failure (125) that ends
  // the job whatever the policy; during an abort its ranks simply never start.
  void never_joined(job_time now, const host_lost& e, std::vector<action>& out) {
    host_gone[e.host] = true;
    const bool aborting = ph == phase::aborting;
    std::uint32_t failed = 0;
    std::optional<std::uint32_t> first;
    std::vector<std::uint32_t> taken;  // for the survivors' notice
    for_each_process_on(e.host, [&](std::uint32_t rank) {
      auto& r = ranks[rank];
      drop_streams(r);
      if (r.state == rank_state::running) {
        // A start without a hello cannot happen; should a driver say so, the rank is lost.
        end_rank(r, rank_state::lost, now);
        return;
      }
      if (r.state != rank_state::pending) return;
      if (aborting) {
        end_rank(r, rank_state::not_started, now);
        return;
      }
      end_rank(r, rank_state::spawn_failed, now);
      r.set_status(exit_status::exited(exit_codes::launch_failed));
      if (!first) first = rank;
      ++failed;
      if (notifying()) taken.push_back(rank);
    });
    host_reasons.try_emplace(e.host, e.reason);
    if (aborting || failed == 0) return;
    failure(cause_kind::spawn_failed, first, e.host, exit_status::exited(exit_codes::launch_failed),
            exit_codes::launch_failed,
            "the agent on " + host_name(e.host) + " did not start (" + e.reason + "); its " +
                ranks_text(failed) + " could not start",
            true, out, notice_kind::host_lost, std::move(taken), 0);
  }

  void on(job_time now, const spawn_withdrawn& e, std::vector<action>&) {
    if (ph != phase::aborting) return;  // only an ending job gives up on its ranks
    for (auto rank : e.ranks) {
      if (!valid(rank)) continue;
      auto& r = ranks[rank];
      if (r.state != rank_state::pending) continue;  // started, or ended already
      end_rank(r, rank_state::not_started, now);
      r.flags |= closed_all;  // it never had a stream
    }
  }

  void on(job_time, const timer_fired& e, std::vector<action>& out) {
    if (e.timer == 0) return;
    if (e.timer == timeout_timer) {
      timeout_timer = 0;
      // During an abort, or once every rank ended (only output is pending): nothing to add.
      if (ph == phase::aborting || not_ended == 0) return;
      const auto said = options.timeout_said.count() > 0 ? options.timeout_said : options.timeout;
      const auto line = "job timed out after " + seconds_text(said) + " s";
      decide(cause_kind::timeout, exit_codes::timeout, line);
      notify_survivors(notice_kind::job_ending, {}, exit_code, line, out);
      const auto n = begin_abort(SIGTERM, out);
      out.push_back(emit{line + abort_tail(n)});
    } else if (e.timer == grace_timer) {
      grace_timer = 0;
      grace_expired = true;
      const auto n = signal_running({SIGKILL}, out);
      if (n > 0) {
        out.push_back(emit{ranks_text(n) + " still running after the " +
                           seconds_text(options.kill_grace) + " s grace; sending SIGKILL"});
      }
    }
  }

  // --stall-timeout: the launcher named the live ranks; the job ends as a timeout does.
  void on(job_time, const job_stalled&, std::vector<action>& out) {
    if (ph != phase::running || not_ended == 0) return;
    const auto line =
        "no rank progressed for " + seconds_text(options.stall_timeout) + " s (--stall-timeout)";
    decide(cause_kind::stalled, exit_codes::stalled, line);
    notify_survivors(notice_kind::job_ending, {}, exit_code, line, out);
    const auto n = begin_abort(SIGTERM, out);
    out.push_back(emit{line + abort_tail(n)});
  }

  void on(job_time, const signal_received& e, std::vector<action>& out) {
    if (is_interrupt(e.signo)) {
      ++interrupts;
      const auto name = signal_name(e.signo);
      if (ph == phase::aborting && interrupts >= 2) {
        // Asked again while ending: no more grace.
        if (grace_timer != 0) {
          out.push_back(cancel_timer{grace_timer});
          grace_timer = 0;
        }
        grace_expired = true;
        const auto n = signal_running({SIGKILL}, out);
        if (n > 0)
          out.push_back(emit{"received " + name + " again; sending SIGKILL to " + ranks_text(n)});
        return;
      }
      if (ph == phase::aborting) {
        // The first interrupt while a failure (timeout, cancel) aborts the job: the ranks get it
        // too; the failure stays the cause.
        const auto n = signal_running({SIGCONT, e.signo}, out);
        if (n > 0)
          out.push_back(emit{"received " + name + " while aborting; sent it to " + ranks_text(n) +
                             " (send it again to kill them at once)"});
        return;
      }
      const auto line = "interrupted by " + name;
      if (cause == cause_kind::none) {
        signal = e.signo;
        decide(cause_kind::signal, 128 + e.signo, line);
      }
      notify_survivors(notice_kind::job_ending, {}, exit_code, line, out);
      const auto n = begin_abort(e.signo, out);
      out.push_back(emit{line + abort_tail(n)});
      return;
    }
    if (is_forwarded(e.signo)) {  // others are not ours to forward
      forwarded |= std::uint64_t{1} << e.signo;
      signal_running({e.signo}, out);
    }
  }

  void on(job_time, const abort_requested& e, std::vector<action>& out) {
    if (ph == phase::aborting) return;  // the job is ending already
    // An exit code is 8 bits: 256 would read as 0, a success. What does not fit (0 included: an
    // abort is never a success) is 1, as under mpirun; the line keeps the status the rank gave.
    const int status = e.status >= 1 && e.status <= 255 ? e.status : 1;
    const auto message = e.message.empty() ? std::string() : ": " + e.message;
    if (e.rank) {
      if (!valid(*e.rank)) return;
      auto& r = ranks[*e.rank];
      if (is_terminal(r.state)) return;
      r.flags |= called_abort;
      if (!e.message.empty()) rank_reasons[*e.rank] = e.message;
      // An explicit abort ends the job also with --no-abort-on-failure: that is what the call
      // means (as with mpirun).
      failure(
          cause_kind::abort_requested, e.rank, host_of(*e.rank), exit_status::exited(status),
          status,
          rank_where(*e.rank) + " called abort with status " + std::to_string(e.status) + message,
          true, out, notice_kind::rank_aborted, {*e.rank}, e.status);
      return;
    }
    const auto line = e.refused ? e.message : "the job was cancelled" + message;
    decide(cause_kind::abort_requested, status, line);
    notify_survivors(notice_kind::job_ending, {}, exit_code, line, out);
    const auto n = begin_abort(SIGTERM, out);
    out.push_back(emit{line + abort_tail(n)});
  }

  void on(job_time now, const rank_unfinalized& e, std::vector<action>& out) {
    if (ph == phase::aborting || !valid(e.rank)) return;  // the job is ending already
    auto& r = ranks[e.rank];
    // Its failed process was recovered already (its exit came first): the notice is about that
    // one. A new process's own notice can only come after its start.
    if ((r.flags & respawn_due) != 0 ||
        (r.state == rank_state::pending && restart_counts.contains(e.rank)))
      return;
    if (r.state == rank_state::exited && r.status().success() &&
        recoverable(e.rank, exit_status::exited(1))) {
      // It exited 0 without MPI_Finalize: started again alone as any failed process.
      ++not_ended;
      ++not_ended_on_host[host_of(e.rank)];
      recover(e.rank, e.status, out, " without calling MPI_Finalize (PMIx_Finalize)");
      return;
    }
    const auto as_failure = e.status.success() ? exit_status::exited(1) : e.status;
    if (r.state == rank_state::running && recoverable(e.rank, as_failure)) {
      // The notice comes with the process's end, before its exit report: started again alone
      // now, the report that follows dropped.
      count_streams(r);
      r.flags |= exit_to_come;
      recover(e.rank, e.status, out, " without calling MPI_Finalize (PMIx_Finalize)");
      return;
    }
    if (!is_terminal(r.state)) {
      // The notice comes with the process's end, before its exit report: it ended, by its own
      // failure. Not a victim of the abort it begins (it was counted killed), nor signalled.
      if (r.started_at.count() < 0) r.started_at = now;
      count_streams(r);
      r.set_status(e.status);
      end_rank(r, rank_state::exited, now);
    }
    r.flags |= called_abort;  // counted failed, also when its exit (code 0) came first
    const int code = e.status.shell_code();
    failure(cause_kind::rank_failed, e.rank, host_of(e.rank), e.status, code != 0 ? code : 1,
            rank_where(e.rank) + " " + e.status.describe() +
                " without calling MPI_Finalize (PMIx_Finalize)",
            true, out, notice_kind::rank_unfinalized, {e.rank}, code);
  }

  void on(job_time, const job_spawned& e, std::vector<action>& out) {
    // Nothing joins a job that is ending, or one whose processes all ended (nobody asked).
    if (ph != phase::running || not_ended == 0 || e.hosts.empty()) return;
    if (e.hosts.size() > std::numeric_limits<std::uint32_t>::max() - ranks.size()) return;
    for (auto host : e.hosts) {
      if (host >= num_hosts() || host_gone[host]) return;
    }
    const auto first = static_cast<std::uint32_t>(ranks.size());
    const auto n = static_cast<std::uint32_t>(e.hosts.size());
    job_firsts.push_back(first);
    spawned_on_host.resize(num_hosts());
    ranks.resize(ranks.size() + n);
    spawned_host.insert(spawned_host.end(), e.hosts.begin(), e.hosts.end());
    not_ended += n;
    // One spawn per host, in the order the hosts first appear; ranks ascending.
    std::unordered_map<std::uint32_t, std::size_t> batch;  // host -> its action in `out`
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto host = e.hosts[i];
      const auto process = first + i;
      ++not_ended_on_host[host];
      spawned_on_host[host].push_back(process);
      auto [it, fresh] = batch.try_emplace(host, out.size());
      if (fresh) {
        out.push_back(spawn{host, {}});
        if (!map->node_of_host(host)) {
          auto at = std::lower_bound(spawned_only_hosts.begin(), spawned_only_hosts.end(), host);
          if (at == spawned_only_hosts.end() || *at != host) spawned_only_hosts.insert(at, host);
        }
      }
      std::get<spawn>(out[it->second]).ranks.push_back(process);
    }
  }

  void check_finish(std::vector<action>& out, const controller& self) {
    if (ph == phase::idle || ph == phase::finished) return;
    if (not_ended != 0) return;
    if (grace_timer != 0) {  // nobody left to kill
      out.push_back(cancel_timer{grace_timer});
      grace_timer = 0;
    }
    if (streams_open != 0) {
      if (!leftovers_cleared) {
        leftovers_cleared = true;
        out.push_back(clear_leftovers{});
      }
      return;
    }
    if (timeout_timer != 0) {
      out.push_back(cancel_timer{timeout_timer});
      timeout_timer = 0;
    }
    ph = phase::finished;
    out.push_back(finish{self.report(!options.finish_without_ranks)});
  }
};

controller::controller(const rank_map& map, controller_options options)
    : state_(std::make_unique<state>(map, options)) {}
controller::~controller() = default;
controller::controller(controller&&) noexcept = default;
controller& controller::operator=(controller&&) noexcept = default;

void controller::handle(job_time now, const event& e, std::vector<action>& out) {
  auto& s = *state_;
  if (s.ph == phase::finished) return;
  // Nothing has been asked of the driver yet: whatever it reports is not about this job.
  if (s.ph == phase::idle && !std::holds_alternative<job_start>(e)) return;
  s.event_time = now;
  std::visit([&](const auto& ev) { s.on(now, ev, out); }, e);
  s.check_finish(out, *this);
}

bool controller::finished() const noexcept {
  return state_->ph == phase::finished;
}

bool controller::ending() const noexcept {
  return state_->ph == phase::aborting;
}

rank_report controller::rank_report_of(std::uint32_t rank) const {
  const auto& s = *state_;
  if (rank >= s.ranks.size())
    throw error(errc::internal, "rank_report_of: rank " + std::to_string(rank) +
                                    " is outside the job (" + std::to_string(s.ranks.size()) +
                                    " ranks)");
  const auto& slot = s.ranks[rank];
  rank_report rr;
  rr.rank = rank;
  const auto jr = s.job_rank_of(rank);
  rr.job = jr.job;
  rr.job_rank = jr.rank;
  rr.host = s.host_of(rank);
  rr.state = slot.state;
  rr.pid = slot.pid;
  if (slot.started_at.count() >= 0) rr.started_at = slot.started_at;
  if (slot.ended_at.count() >= 0) rr.ended_at = slot.ended_at;
  if (slot.state != rank_state::pending && slot.state != rank_state::running &&
      slot.state != rank_state::lost && slot.state != rank_state::not_started)
    rr.status = slot.status();
  if (auto it = s.rank_reasons.find(rank);
      slot.state != rank_state::lost && it != s.rank_reasons.end()) {
    rr.reason = it->second;
  } else if (slot.state == rank_state::lost || slot.state == rank_state::spawn_failed) {
    // A lost host's ranks, and those of a host whose agent never started: the host's reason.
    if (auto h = s.host_reasons.find(rr.host); h != s.host_reasons.end()) rr.reason = h->second;
  }
  return rr;
}

namespace {

void check_process(std::uint32_t process, std::size_t size, const char* what) {
  if (process >= size)
    throw error(errc::internal, std::string(what) + ": process " + std::to_string(process) +
                                    " is outside the session (" + std::to_string(size) +
                                    " processes)");
}

}  // namespace

std::uint32_t controller::size() const noexcept {
  return static_cast<std::uint32_t>(state_->ranks.size());
}

std::uint32_t controller::jobs() const noexcept {
  return static_cast<std::uint32_t>(state_->job_firsts.size());
}

std::uint32_t controller::job_first(std::uint32_t job) const {
  const auto& s = *state_;
  if (job >= s.job_firsts.size())
    throw error(errc::internal, "job_first: job " + std::to_string(job) + " does not exist (" +
                                    std::to_string(s.job_firsts.size()) + " jobs)");
  return s.job_firsts[job];
}

std::uint32_t controller::job_size(std::uint32_t job) const {
  const auto& s = *state_;
  if (job >= s.job_firsts.size())
    throw error(errc::internal, "job_size: job " + std::to_string(job) + " does not exist (" +
                                    std::to_string(s.job_firsts.size()) + " jobs)");
  const auto end = job + 1 < s.job_firsts.size() ? s.job_firsts[job + 1]
                                                 : static_cast<std::uint32_t>(s.ranks.size());
  return end - s.job_firsts[job];
}

job_rank controller::job_rank_of(std::uint32_t process) const {
  check_process(process, state_->ranks.size(), "job_rank_of");
  return state_->job_rank_of(process);
}

std::uint32_t controller::host_of(std::uint32_t process) const {
  check_process(process, state_->ranks.size(), "host_of");
  return state_->host_of(process);
}

std::uint32_t controller::live_on_host(std::uint32_t host) const noexcept {
  const auto& s = *state_;
  return host < s.not_ended_on_host.size() ? s.not_ended_on_host[host] : 0;
}

std::uint32_t controller::restarts_of(std::uint32_t process) const noexcept {
  const auto it = state_->restart_counts.find(process);
  return it == state_->restart_counts.end() ? 0 : it->second;
}

std::vector<std::uint32_t> controller::processes_on_host(std::uint32_t host) const {
  const auto& s = *state_;
  std::vector<std::uint32_t> out;
  if (host >= s.num_hosts()) return out;
  s.for_each_process_on(host, [&](std::uint32_t p) { out.push_back(p); });
  return out;
}

job_report controller::report() const {
  return report(true);
}

job_report controller::report(bool with_ranks) const {
  const auto& s = *state_;
  job_report r;
  r.exit_code = s.exit_code;
  r.cause = s.cause;
  r.failed_rank = s.failed_rank;
  r.failed_host = s.failed_host;
  r.failed_status = s.failed_status;
  r.signal = s.signal;
  r.summary = s.summary;
  r.rank_restarts = s.restarts;
  r.host_names.reserve(s.map->allocation().hosts.size());
  for (const auto& h : s.map->allocation().hosts) r.host_names.push_back(h.name);
  if (with_ranks) r.ranks.reserve(s.ranks.size());
  for (std::uint32_t i = 0; i < s.ranks.size(); ++i) {
    const auto& slot = s.ranks[i];
    auto rr = rank_report_of(i);
    switch (slot.state) {
      case rank_state::pending:
      case rank_state::running:
      case rank_state::not_started:
        break;
      case rank_state::lost:
        ++r.ranks_failed;
        break;
      case rank_state::killed:
        ++r.ranks_killed;
        break;
      case rank_state::spawn_failed:
      case rank_state::exited:
        if (slot.state == rank_state::spawn_failed || (slot.flags & called_abort) != 0 ||
            !rr.status->success())
          ++r.ranks_failed;
        break;
    }
    if (with_ranks) r.ranks.push_back(std::move(rr));
  }
  return r;
}

}  // namespace pm
