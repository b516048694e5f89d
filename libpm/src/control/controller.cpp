// The controller: the job's life and failure policy, as a sans-I/O state machine
// (docs/architecture.md, docs/failure-semantics.md).
#include "pm/controller.hpp"

#include <signal.h>

#include <bit>
#include <cstdio>
#include <unordered_map>

namespace pm {

namespace {

enum class phase : std::uint8_t { idle, running, aborting, finished };

// Per rank: a few bytes, so that a simulated 800,000-rank job stays small.
struct rank_slot {
  rank_state state = rank_state::pending;
  std::uint8_t streams_open = 0;  // bit 0 stdout, bit 1 stderr
  bool started = false;
  exit_status status;
  std::int64_t pid = 0;
  job_time started_at{-1};
  job_time ended_at{-1};
};

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

bool is_terminal(rank_state s) {
  return s != rank_state::pending && s != rank_state::running;
}

}  // namespace

struct controller::state {
  const rank_map* map;
  controller_options options;
  phase ph = phase::idle;
  std::vector<rank_slot> ranks;
  std::unordered_map<std::uint32_t, std::string>
      reasons;  // only for ranks that failed to start or were lost
  std::uint32_t not_ended = 0;
  std::uint64_t streams_open = 0;
  std::uint64_t next_timer = 1;
  std::uint64_t timeout_timer = 0;  // 0: none active
  std::uint64_t grace_timer = 0;
  bool grace_expired = false;
  bool leftovers_cleared = false;
  int abort_signal = SIGTERM;
  // The first failure (or signal, timeout, cancel) decides.
  cause_kind cause = cause_kind::none;
  int exit_code = 0;
  int signal = 0;
  std::optional<std::uint32_t> failed_rank, failed_host;
  std::optional<exit_status> failed_status;
  std::string summary;
  std::uint32_t ranks_failed = 0;

  state(const rank_map& m, controller_options o)
      : map(&m), options(o), ranks(m.size()), not_ended(m.size()) {}

  const std::string& host_name(std::uint32_t rank) const {
    return map->allocation().hosts[map->at(rank).host].name;
  }
  std::string rank_where(std::uint32_t rank) const {
    return "rank " + std::to_string(rank) + " on " + host_name(rank);
  }
  bool valid(std::uint32_t rank) const { return rank < ranks.size(); }

  // Ends a rank; returns false if it had ended already.
  bool end_rank(std::uint32_t rank, rank_state final_state, job_time now) {
    auto& r = ranks[rank];
    if (is_terminal(r.state)) return false;
    r.state = final_state;
    r.ended_at = now;
    --not_ended;
    return true;
  }

  void start_stream_count(rank_slot& r) {
    if (r.started) return;
    r.started = true;
    r.streams_open = options.streams_per_rank >= 2 ? 3 : options.streams_per_rank == 1 ? 1 : 0;
    streams_open += static_cast<std::uint64_t>(std::popcount(r.streams_open));
  }

  void drop_streams(rank_slot& r) {
    streams_open -= static_cast<std::uint64_t>(std::popcount(r.streams_open));
    r.streams_open = 0;
  }

  // Signals every running rank, batched per host; returns how many were signalled.
  std::uint32_t signal_running(std::initializer_list<int> signos, std::vector<action>& out) {
    std::uint32_t count = 0;
    for (std::uint32_t node = 0; node < map->num_nodes(); ++node) {
      const auto host = map->host_of_node(node);
      std::vector<std::uint32_t> live;
      for (auto rank : map->ranks_on_host(host)) {
        if (ranks[rank].state == rank_state::running) live.push_back(rank);
      }
      if (live.empty()) continue;
      count += static_cast<std::uint32_t>(live.size());
      for (int signo : signos) out.push_back(signal_ranks{host, live, signo});
    }
    return count;
  }

  void signal_one(std::uint32_t rank, std::initializer_list<int> signos, std::vector<action>& out) {
    for (int signo : signos) out.push_back(signal_ranks{map->at(rank).host, {rank}, signo});
  }

  // Starts the abort: SIGCONT (so stopped ranks see it) and `signo` to every running rank, and the
  // grace timer after which SIGKILL follows. Returns the number of ranks signalled.
  std::uint32_t begin_abort(int signo, std::vector<action>& out) {
    ph = phase::aborting;
    abort_signal = signo;
    const auto n = signal_running({SIGCONT, signo}, out);
    grace_timer = next_timer++;
    out.push_back(start_timer{grace_timer, options.kill_grace});
    return n;
  }

  std::string abort_note(std::uint32_t n) const {
    return "aborting the job (" + signal_name(abort_signal) + " to " + std::to_string(n) +
           (n == 1 ? " rank)" : " ranks)");
  }
  std::string abort_tail(std::uint32_t n) const { return "; " + abort_note(n); }

  // A failure: the first one decides the outcome; with abort-on-failure it aborts the job.
  void failure(cause_kind kind, std::optional<std::uint32_t> rank,
               std::optional<std::uint32_t> host, std::optional<exit_status> status, int code,
               std::string line, std::vector<action>& out) {
    ++ranks_failed;
    const bool first = cause == cause_kind::none;
    if (first) {
      cause = kind;
      exit_code = code;
      failed_rank = rank;
      failed_host = host;
      failed_status = status;
      summary = line;
    }
    if (ph == phase::aborting) return;
    if (options.abort_on_failure) {
      const auto n = begin_abort(SIGTERM, out);
      out.push_back(emit{line + abort_tail(n)});
    } else {
      out.push_back(emit{line});
    }
  }

  void on(job_time, const job_start&, std::vector<action>& out) {
    if (ph != phase::idle) return;
    ph = phase::running;
    for (std::uint32_t node = 0; node < map->num_nodes(); ++node) {
      const auto host = map->host_of_node(node);
      const auto on_host = map->ranks_on_host(host);
      out.push_back(spawn{host, std::vector<std::uint32_t>(on_host.begin(), on_host.end())});
    }
    if (options.timeout.count() > 0) {
      timeout_timer = next_timer++;
      out.push_back(start_timer{timeout_timer, options.timeout});
    }
  }

  void on(job_time now, const rank_started& e, std::vector<action>& out) {
    if (!valid(e.rank) || ranks[e.rank].state != rank_state::pending) return;
    auto& r = ranks[e.rank];
    r.state = rank_state::running;
    r.pid = e.pid;
    r.started_at = now;
    start_stream_count(r);
    if (ph == phase::aborting) {
      // It started after the abort began: it gets what the others got.
      if (grace_expired)
        signal_one(e.rank, {SIGKILL}, out);
      else
        signal_one(e.rank, {SIGCONT, abort_signal}, out);
    }
  }

  void on(job_time now, const rank_spawn_failed& e, std::vector<action>& out) {
    if (!valid(e.rank) || ranks[e.rank].state != rank_state::pending) return;
    end_rank(e.rank, rank_state::spawn_failed, now);
    ranks[e.rank].status = exit_status::exited(e.code);
    reasons[e.rank] = e.reason;
    if (ph == phase::aborting) return;  // the job is ending anyway: not a cause
    failure(cause_kind::spawn_failed, e.rank, map->at(e.rank).host, exit_status::exited(e.code),
            e.code, rank_where(e.rank) + " could not start: " + e.reason, out);
  }

  void on(job_time, const stream_closed& e, std::vector<action>&) {
    if (!valid(e.rank)) return;
    auto& r = ranks[e.rank];
    const auto bit = static_cast<std::uint8_t>(1u << static_cast<unsigned>(e.stream));
    if ((r.streams_open & bit) == 0) return;  // duplicate, or its host was lost
    r.streams_open = static_cast<std::uint8_t>(r.streams_open & ~bit);
    --streams_open;
  }

  void on(job_time now, const rank_exited& e, std::vector<action>& out) {
    if (!valid(e.rank)) return;
    auto& r = ranks[e.rank];
    if (is_terminal(r.state)) return;
    start_stream_count(r);  // an exit reported before the start: its streams still close later
    if (r.started_at.count() < 0) r.started_at = now;
    const bool killed = ph == phase::aborting;
    end_rank(e.rank, killed ? rank_state::killed : rank_state::exited, now);
    r.status = e.status;
    if (killed || e.status.success()) return;
    failure(cause_kind::rank_failed, e.rank, map->at(e.rank).host, e.status, e.status.shell_code(),
            rank_where(e.rank) + " " + e.status.describe(), out);
  }

  void on(job_time now, const host_lost& e, std::vector<action>& out) {
    if (e.host >= map->allocation().hosts.size()) return;
    std::uint32_t lost = 0;
    std::optional<std::uint32_t> first;
    for (auto rank : map->ranks_on_host(e.host)) {
      // Output still in flight from that host is gone with it, also for ranks that had ended.
      drop_streams(ranks[rank]);
      if (!end_rank(rank, rank_state::lost, now)) continue;
      reasons[rank] = e.reason;
      if (!first) first = rank;
      ++lost;
    }
    if (lost == 0 || ph == phase::aborting) return;
    const auto& name = map->allocation().hosts[e.host].name;
    failure(cause_kind::host_lost, first, e.host, std::nullopt, exit_codes::host_lost,
            "host " + name + " was lost (" + e.reason + "); its " + std::to_string(lost) +
                (lost == 1 ? " rank failed" : " ranks failed"),
            out);
  }

  void on(job_time, const timer_fired& e, std::vector<action>& out) {
    if (e.timer == 0) return;
    if (e.timer == timeout_timer) {
      timeout_timer = 0;
      if (ph == phase::aborting) return;
      if (cause == cause_kind::none) {
        cause = cause_kind::timeout;
        exit_code = exit_codes::timeout;
        summary = "job timed out after " + seconds_text(options.timeout) + " s";
      }
      const auto n = begin_abort(SIGTERM, out);
      out.push_back(
          emit{"job timed out after " + seconds_text(options.timeout) + " s" + abort_tail(n)});
    } else if (e.timer == grace_timer) {
      grace_timer = 0;
      grace_expired = true;
      signal_running({SIGKILL}, out);
    }
  }

  void on(job_time, const signal_received& e, std::vector<action>& out) {
    if (ph == phase::idle) return;
    switch (e.signo) {
      case SIGINT:
      case SIGTERM:
      case SIGHUP: {
        if (ph == phase::aborting) {
          // Asked again while ending: no more grace.
          if (grace_timer != 0) {
            out.push_back(cancel_timer{grace_timer});
            grace_timer = 0;
          }
          grace_expired = true;
          const auto n = signal_running({SIGKILL}, out);
          if (n > 0)
            out.push_back(emit{"received " + signal_name(e.signo) + " again; sending SIGKILL to " +
                               std::to_string(n) + (n == 1 ? " rank" : " ranks")});
          return;
        }
        if (cause == cause_kind::none) {
          cause = cause_kind::signal;
          signal = e.signo;
          exit_code = 128 + e.signo;
          summary = "interrupted by " + signal_name(e.signo);
        }
        const auto n = begin_abort(e.signo, out);
        out.push_back(emit{"interrupted by " + signal_name(e.signo) + abort_tail(n)});
        return;
      }
      case SIGUSR1:
      case SIGUSR2:
      case SIGTSTP:
      case SIGCONT:
        signal_running({e.signo}, out);
        return;
      default:
        return;
    }
  }

  void on(job_time, const abort_requested& e, std::vector<action>& out) {
    if (ph == phase::idle) return;
    if (e.rank) {
      if (!valid(*e.rank) || is_terminal(ranks[*e.rank].state)) return;
      const int status = e.status == 0 ? 1 : e.status;
      if (ph == phase::aborting) return;
      failure(cause_kind::abort_requested, e.rank, map->at(*e.rank).host,
              exit_status::exited(status), status,
              rank_where(*e.rank) + " called abort with status " + std::to_string(e.status) +
                  (e.message.empty() ? "" : ": " + e.message),
              out);
      if (!options.abort_on_failure && ph != phase::aborting) {
        // An explicit abort ends the job even when failures would not (MPI_Abort's meaning).
        const auto n = begin_abort(SIGTERM, out);
        out.push_back(emit{abort_note(n)});
      }
      return;
    }
    if (ph == phase::aborting) return;
    if (cause == cause_kind::none) {
      cause = cause_kind::abort_requested;
      exit_code = e.status == 0 ? 1 : e.status;
      summary = "the job was cancelled" + (e.message.empty() ? "" : ": " + e.message);
    }
    const auto n = begin_abort(SIGTERM, out);
    out.push_back(emit{"the job was cancelled" + abort_tail(n)});
  }

  void check_finish(std::vector<action>& out, const controller& self) {
    if (ph == phase::idle || ph == phase::finished) return;
    if (not_ended != 0) return;
    if (streams_open != 0) {
      if (!leftovers_cleared) {
        leftovers_cleared = true;
        out.push_back(clear_leftovers{});
      }
      return;
    }
    for (auto* timer : {&timeout_timer, &grace_timer}) {
      if (*timer != 0) {
        out.push_back(cancel_timer{*timer});
        *timer = 0;
      }
    }
    ph = phase::finished;
    out.push_back(finish{self.report()});
  }
};

controller::controller(const rank_map& map, controller_options options)
    : state_(std::make_unique<state>(map, options)) {}
controller::~controller() = default;
controller::controller(controller&&) noexcept = default;
controller& controller::operator=(controller&&) noexcept = default;

void controller::handle(job_time now, const event& e, std::vector<action>& out) {
  if (state_->ph == phase::finished) return;
  std::visit([&](const auto& ev) { state_->on(now, ev, out); }, e);
  state_->check_finish(out, *this);
}

bool controller::finished() const noexcept {
  return state_->ph == phase::finished;
}

job_report controller::report() const {
  const auto& s = *state_;
  job_report r;
  r.exit_code = s.exit_code;
  r.cause = s.cause;
  r.failed_rank = s.failed_rank;
  r.failed_host = s.failed_host;
  r.failed_status = s.failed_status;
  r.signal = s.signal;
  r.summary = s.summary;
  r.ranks_failed = s.ranks_failed;
  for (const auto& h : s.map->allocation().hosts) r.host_names.push_back(h.name);
  r.ranks.reserve(s.ranks.size());
  for (std::uint32_t i = 0; i < s.ranks.size(); ++i) {
    const auto& slot = s.ranks[i];
    rank_report rr;
    rr.rank = i;
    rr.host = s.map->at(i).host;
    rr.state = slot.state;
    if (is_terminal(slot.state) && slot.state != rank_state::lost) rr.status = slot.status;
    rr.pid = slot.pid;
    if (slot.started_at.count() >= 0) rr.started_at = slot.started_at;
    if (slot.ended_at.count() >= 0) rr.ended_at = slot.ended_at;
    if (auto it = s.reasons.find(i); it != s.reasons.end()) rr.reason = it->second;
    if (slot.state == rank_state::killed) ++r.ranks_killed;
    r.ranks.push_back(std::move(rr));
  }
  return r;
}

}  // namespace pm
