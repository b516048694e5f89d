// The commands of tests/property/controller_state_test.cpp: one rc::state::Command per kind of
// event a driver can legally deliver (its preconditions keep the interleaving legal, its step
// moves the model and says what the controller must answer), and how the next one is picked.
#pragma once

#include <signal.h>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pm/controller.hpp"
#include "property/controller_state_model.hpp"
#include "property/controller_state_sut.hpp"

namespace controller_state {

// ---- commands -----------------------------------------------------------------------------------

using Cmd = rc::state::Command<Model, Sut>;

// Every command: how it moves the model and what it expects (step), the event it feeds.
struct command : Cmd {
  virtual pm::event make_event(const Sut& sut) const = 0;
  virtual void step(Model& m, expect& ex) const = 0;
  virtual std::string kind() const = 0;
  // A finer name for the coverage table (e.g. "rank_exited: before its start").
  virtual std::string detail(const Model&) const { return {}; }

  void apply(Model& m) const override {
    expect ex;
    step(m, ex);
  }

  void run(const Model& s0, Sut& sut) const override {
    Model s1 = s0;
    expect ex;
    step(s1, ex);
    if (sut.counting) {
      ++coverage()[kind()];
      if (s0.finished) {
        ++coverage()["(any event after the finish)"];
      } else if (auto d = detail(s0); !d.empty()) {
        ++coverage()[kind() + ": " + d];
      }
    }
    const auto e = make_event(sut);
    const auto out = sut.feed(e);
    if (s0.finished) {
      RC_ASSERT(ex.empty());
      RC_ASSERT(out.empty());
    }
    sut.check(s0, s1, ex, e, out);
    if (ex.clear_leftovers) ++coverage()["(clear_leftovers)"];
    if (ex.finish) {
      ++coverage()[sut.counting ? "(finished by the generated commands)"
                                : "(finished in the liveness phase)"];
    }
    sut.last = s1;
  }
};

template <typename Pred>
std::uint32_t pick_rank(const Model& m, Pred pred) {
  std::vector<std::uint32_t> candidates;
  for (std::uint32_t r = 0; r < m.np(); ++r) {
    if (pred(r, m.ranks[r])) candidates.push_back(r);
  }
  RC_PRE(!candidates.empty());
  return *rc::gen::elementOf(candidates);
}

// A rank that `pred` accepts, one of those `rare` accepts only now and then (one in five), so that
// the unusual orders (an exit before the start, output before it) stay unusual.
template <typename Pred, typename Rare>
std::uint32_t pick_rank(const Model& m, Pred pred, Rare rare) {
  std::vector<std::uint32_t> usual, unusual;
  for (std::uint32_t r = 0; r < m.np(); ++r) {
    if (!pred(r, m.ranks[r])) continue;
    (rare(m.ranks[r]) ? unusual : usual).push_back(r);
  }
  RC_PRE(!usual.empty() || !unusual.empty());
  const bool take_rare = unusual.size() > 0 && (usual.empty() || *rc::gen::inRange(0, 5) == 0);
  return *rc::gen::elementOf(take_rare ? unusual : usual);
}

inline pm::stream_kind pick_open_stream(std::uint8_t open) {
  if (open == 3) return *rc::gen::element(pm::stream_kind::out, pm::stream_kind::err);
  return open == 1 ? pm::stream_kind::out : pm::stream_kind::err;
}

inline std::uint8_t bit(pm::stream_kind s) {
  return static_cast<std::uint8_t>(1u << static_cast<int>(s));
}

inline std::string stream_name(pm::stream_kind s) {
  return s == pm::stream_kind::out ? "stdout" : "stderr";
}

// How often a fault comes: as `base` in the mixed story; in its own story very often until the job
// has a cause, then a little more often than `base` (an interrupt again, another lost host); in
// the calm story never; in the other stories only once the story's fault decided the outcome, then
// as often (so that later faults meet a decided cause).
inline std::size_t fault(const Model& m, story kind, std::size_t base) {
  if (m.w->plot == story::mixed) return base;
  if (m.w->plot == kind) return m.cause == cause_kind::none ? 150 : 4 * base;
  if (m.w->plot == story::calm || m.cause == cause_kind::none) return 0;
  return 4 * base;
}

// A rank's process runs (its spawn was requested at job_start).
struct rank_started_cmd final : command {
  std::uint32_t rank;
  explicit rank_started_cmd(const Model& m)
      : rank(pick_rank(m, [](auto, const rank_model& x) { return x.ph == phase::pending; })) {}
  explicit rank_started_cmd(std::uint32_t r) : rank(r) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && m.ranks[rank].ph == phase::pending);
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    auto& x = m.ranks[rank];
    x.ph = phase::running;
    x.ran = x.start_reported = true;
    if (m.aborting) {  // it started after the abort began: it gets what the others got
      if (m.kill_due) {
        ex.signals[rank] = {SIGKILL};
        x.got_kill = true;
      } else {
        ex.signals[rank] = {SIGCONT, m.abort_signo};
        x.abort_signalled = true;
      }
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::rank_started{rank, 1000 + rank}; }
  std::string kind() const override { return "rank_started"; }
  std::string detail(const Model& m) const override {
    return m.aborting ? (m.kill_due ? "after the grace" : "during the abort") : "";
  }
  void show(std::ostream& os) const override { os << "rank_started " << rank; }
};

// The start report of a rank whose exit overtook it: only its pid is recorded.
struct start_after_exit_cmd final : command {
  std::uint32_t rank;
  explicit start_after_exit_cmd(const Model& m)
      : rank(pick_rank(m, [&](std::uint32_t r, const rank_model& x) {
          return (x.ph == phase::exited || x.ph == phase::killed) && !x.start_reported &&
                 !m.host_gone[m.host_of(r)];
        })) {}
  void checkPreconditions(const Model& m) const override {
    const auto& x = m.ranks.at(rank);
    RC_PRE((x.ph == phase::exited || x.ph == phase::killed) && !x.start_reported &&
           !m.host_gone[m.host_of(rank)]);
  }
  void step(Model& m, expect&) const override {
    if (m.finished) return;
    m.ranks[rank].start_reported = true;
  }
  pm::event make_event(const Sut&) const override { return pm::rank_started{rank, 1000 + rank}; }
  std::string kind() const override { return "rank_started after its exit"; }
  void show(std::ostream& os) const override { os << "rank_started " << rank << " (late)"; }
};

// exec failed: 127 not found, 126 not executable.
struct spawn_failed_cmd final : command {
  std::uint32_t rank;
  int code;
  explicit spawn_failed_cmd(const Model& m)
      : rank(pick_rank(m, [](auto, const rank_model& x) { return x.ph == phase::pending; })),
        code(*rc::gen::element(127, 126)) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && m.ranks[rank].ph == phase::pending);
  }
  std::string reason() const {
    return code == 127 ? "'app' not found" : "cannot execute '/x/app': Permission denied";
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    auto& x = m.ranks[rank];
    x.ph = phase::spawn_failed;
    x.status = exit_status::exited(code);
    x.reason = reason();
    if (!m.aborting) {  // during the abort: not a cause, no line
      m.failure(cause_kind::spawn_failed, rank, m.host_of(rank), exit_status::exited(code), code,
                m.where(rank) + " could not start: " + reason(), false, ex);
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override {
    return pm::rank_spawn_failed{rank, code, reason()};
  }
  std::string kind() const override { return "rank_spawn_failed"; }
  std::string detail(const Model& m) const override { return m.aborting ? "during the abort" : ""; }
  void show(std::ostream& os) const override { os << "rank_spawn_failed " << rank << " " << code; }
};

// A rank's process ended, with a code or by a signal; also before its start was reported.
struct rank_exited_cmd final : command {
  std::uint32_t rank;
  exit_status status;
  explicit rank_exited_cmd(const Model& m)
      : rank(pick_rank(
            m, [](auto, const rank_model& x) { return !ended(x.ph); },
            [](const rank_model& x) { return x.ph == phase::pending; })) {
    const auto& x = m.ranks[rank];
    // What the abort sent it is the likely end, but a rank may end any way (its handler, a race).
    const bool failing = m.w->plot == story::rank_failure && m.cause == cause_kind::none;
    const std::size_t ok = failing ? 6 : 12;
    const std::size_t code = failing ? 4 : fault(m, story::rank_failure, 2);
    const std::size_t sig = failing ? 2 : fault(m, story::rank_failure, 1);
    auto any = rc::gen::weightedOneOf<exit_status>(
        {{ok, rc::gen::just(exit_status::exited(0))},
         {code,
          rc::gen::map(rc::gen::inRange(1, 256), [](int c) { return exit_status::exited(c); })},
         {sig, rc::gen::map(rc::gen::element(SIGSEGV, SIGABRT, SIGKILL, SIGTERM),
                            [](int s) { return exit_status::signaled(s); })}});
    if (x.got_kill && *rc::gen::inRange(0, 4) != 0)
      status = exit_status::signaled(SIGKILL);
    else if (x.abort_signalled && *rc::gen::inRange(0, 4) != 0)
      status = exit_status::signaled(m.abort_signo);
    else
      status = *any;
  }
  rank_exited_cmd(std::uint32_t r, exit_status s) : rank(r), status(s) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && !ended(m.ranks[rank].ph));
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    auto& x = m.ranks[rank];
    x.ran = true;  // its streams count now, also when its start was never reported
    x.status = status;
    if (x.called_abort) {
      x.ph = phase::exited;  // it failed already, when it called abort
    } else if (m.aborting) {
      x.ph = phase::killed;  // a victim, whatever its status
    } else {
      x.ph = phase::exited;
      if (!status.success()) {
        m.failure(cause_kind::rank_failed, rank, m.host_of(rank), status, shell_code(status),
                  m.where(rank) + " " + describe_status(status), false, ex);
      }
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::rank_exited{rank, status}; }
  std::string kind() const override { return "rank_exited"; }
  std::string detail(const Model& m) const override {
    if (m.ranks[rank].ph == phase::pending) return "before its start";
    if (m.aborting) return "during the abort";
    return status.success() ? "" : (status.is_signal() ? "by a signal" : "non-zero");
  }
  void show(std::ostream& os) const override {
    os << "rank_exited " << rank << " " << describe_status(status);
  }
};

// End-of-stream of a rank that has not ended (also before its start is reported).
struct stream_closed_cmd final : command {
  std::uint32_t rank;
  pm::stream_kind stream;
  explicit stream_closed_cmd(const Model& m)
      : rank(pick_rank(
            m,
            [&](std::uint32_t r, const rank_model& x) {
              return !ended(x.ph) && x.open != 0 && !m.host_gone[m.host_of(r)];
            },
            [](const rank_model& x) { return x.ph == phase::pending; })),
        stream(pick_open_stream(m.ranks[rank].open)) {}
  stream_closed_cmd(std::uint32_t r, pm::stream_kind s) : rank(r), stream(s) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && !ended(m.ranks[rank].ph) && (m.ranks[rank].open & bit(stream)) != 0);
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    m.ranks[rank].open &= static_cast<std::uint8_t>(~bit(stream));
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::stream_closed{rank, stream, 42}; }
  std::string kind() const override { return "stream_closed"; }
  std::string detail(const Model& m) const override {
    return m.ranks[rank].ph == phase::pending ? "before its start" : "";
  }
  void show(std::ostream& os) const override {
    os << "stream_closed " << rank << " " << stream_name(stream);
  }
};

// The last output of a rank that ended (the exit overtook it), or of a failed exec's pipes.
struct output_after_exit_cmd final : command {
  std::uint32_t rank;
  pm::stream_kind stream;
  explicit output_after_exit_cmd(const Model& m)
      : rank(pick_rank(m,
                       [&](std::uint32_t r, const rank_model& x) {
                         return (x.ph == phase::exited || x.ph == phase::killed ||
                                 x.ph == phase::spawn_failed) &&
                                x.open != 0 && !m.host_gone[m.host_of(r)];
                       })),
        stream(pick_open_stream(m.ranks[rank].open)) {}
  output_after_exit_cmd(std::uint32_t r, pm::stream_kind s) : rank(r), stream(s) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np());
    const auto& x = m.ranks[rank];
    RC_PRE((x.ph == phase::exited || x.ph == phase::killed || x.ph == phase::spawn_failed) &&
           (x.open & bit(stream)) != 0 && !m.host_gone[m.host_of(rank)]);
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    m.ranks[rank].open &= static_cast<std::uint8_t>(~bit(stream));
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::stream_closed{rank, stream, 7}; }
  std::string kind() const override { return "stream_closed after the exit"; }
  std::string detail(const Model& m) const override {
    if (m.ranks[rank].ph == phase::spawn_failed) return "of a failed exec";
    return m.leftovers_cleared ? "after clear_leftovers" : "";
  }
  void show(std::ostream& os) const override {
    os << "stream_closed " << rank << " " << stream_name(stream) << " (after the exit)";
  }
};

// The grace timer expires: SIGKILL to every rank still running.
struct grace_fired_cmd final : command {
  void checkPreconditions(const Model& m) const override { RC_PRE(m.grace == timer_state::armed); }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    m.grace = timer_state::fired;
    m.kill_due = true;
    const auto n = m.signal_running({SIGKILL}, ex);
    for (auto& x : m.ranks) {
      if (x.ph == phase::running) x.got_kill = true;
    }
    if (n > 0) {
      ex.lines.push_back(ranks_text(n) + " still running after the " +
                         seconds_text(m.w->options.kill_grace) + " s grace; sending SIGKILL");
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut& sut) const override { return pm::timer_fired{sut.grace_id}; }
  std::string kind() const override { return "timer_fired: grace"; }
  std::string detail(const Model& m) const override {
    return m.not_ended() > 0 && std::any_of(m.ranks.begin(), m.ranks.end(),
                                            [](auto& x) { return x.ph == phase::running; })
               ? "ranks outlived it"
               : "";
  }
  void show(std::ostream& os) const override { os << "timer_fired grace"; }
};

// --timeout expires.
struct timeout_fired_cmd final : command {
  void checkPreconditions(const Model& m) const override {
    RC_PRE(m.timeout == timer_state::armed);
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    m.timeout = timer_state::fired;
    // During an abort, or once every rank ended (only output is pending): nothing changes.
    if (m.aborting || m.not_ended() == 0) return m.check_finish(ex);
    const auto line = "job timed out after " + seconds_text(m.w->options.timeout) + " s";
    m.decide(cause_kind::timeout, pm::exit_codes::timeout, line);
    ex.lines.push_back(line + m.tail(m.begin_abort(SIGTERM, ex)));
    m.check_finish(ex);
  }
  pm::event make_event(const Sut& sut) const override { return pm::timer_fired{sut.timeout_id}; }
  std::string kind() const override { return "timer_fired: timeout"; }
  std::string detail(const Model& m) const override {
    if (m.aborting) return "during the abort";
    return m.not_ended() == 0 ? "only output pending" : "";
  }
  void show(std::ostream& os) const override { os << "timer_fired timeout"; }
};

// A timer that fired already or was cancelled fires (the driver lost the race): ignored.
struct late_timer_cmd final : command {
  timer_role role = timer_role::timeout;
  explicit late_timer_cmd(const Model& m) {
    std::vector<timer_role> dead;
    for (auto r : {timer_role::timeout, timer_role::grace}) {
      const auto st = m.timer(r);
      if (st == timer_state::fired || st == timer_state::cancelled) dead.push_back(r);
    }
    RC_PRE(!dead.empty());
    role = *rc::gen::elementOf(dead);
  }
  void checkPreconditions(const Model& m) const override {
    RC_PRE(m.timer(role) == timer_state::fired || m.timer(role) == timer_state::cancelled);
  }
  void step(Model&, expect&) const override {}
  pm::event make_event(const Sut& sut) const override { return pm::timer_fired{sut.id_of(role)}; }
  std::string kind() const override { return "timer_fired after its cancel or fire"; }
  std::string detail(const Model& m) const override {
    return std::string(role == timer_role::grace ? "grace" : "timeout") +
           (m.timer(role) == timer_state::cancelled ? " after its cancel" : " fired twice");
  }
  void show(std::ostream& os) const override {
    os << "timer_fired " << (role == timer_role::grace ? "grace" : "timeout") << " (late)";
  }
};

// SIGINT/SIGTERM/SIGHUP to the launcher: abort; during an abort forward; again: SIGKILL.
struct interrupt_cmd final : command {
  int signo;
  explicit interrupt_cmd(const Model&) : signo(*rc::gen::element(SIGINT, SIGTERM, SIGHUP)) {}
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    ++m.interrupts;
    const auto name = sig_name(signo);
    if (m.aborting && m.interrupts >= 2) {  // asked again while ending: no more grace
      if (m.grace == timer_state::armed) {
        m.grace = timer_state::cancelled;
        ex.cancelled.push_back(timer_role::grace);
      }
      m.kill_due = true;
      const auto n = m.signal_running({SIGKILL}, ex);
      for (auto& x : m.ranks) {
        if (x.ph == phase::running) x.got_kill = true;
      }
      if (n > 0)
        ex.lines.push_back("received " + name + " again; sending SIGKILL to " + ranks_text(n));
    } else if (m.aborting) {  // a failure, timeout or cancel began the abort: forward it
      const auto n = m.signal_running({SIGCONT, signo}, ex);
      if (n > 0) {
        ex.lines.push_back("received " + name + " while aborting; sent it to " + ranks_text(n) +
                           " (send it again to kill them at once)");
      }
    } else {
      const auto line = "interrupted by " + name;
      if (m.cause == cause_kind::none) {
        m.signal = signo;
        m.decide(cause_kind::signal, 128 + signo, line);
      }
      ex.lines.push_back(line + m.tail(m.begin_abort(signo, ex)));
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::signal_received{signo}; }
  std::string kind() const override { return "signal_received: interrupt"; }
  std::string detail(const Model& m) const override {
    if (!m.aborting) return "first";
    return m.interrupts >= 1 ? "again (escalates)" : "while a failure aborts";
  }
  void show(std::ostream& os) const override { os << "signal_received " << sig_name(signo); }
};

// Other signals: USR1/USR2/TSTP/CONT are forwarded to running ranks; the rest are not ours.
struct other_signal_cmd final : command {
  int signo;
  explicit other_signal_cmd(const Model&)
      : signo(*rc::gen::element(SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT, SIGWINCH, SIGQUIT)) {}
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    if (is_forwarded(signo)) m.signal_running({signo}, ex);
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::signal_received{signo}; }
  std::string kind() const override { return "signal_received: other"; }
  std::string detail(const Model&) const override {
    return is_forwarded(signo) ? "forwarded" : "not forwarded";
  }
  void show(std::ostream& os) const override { os << "signal_received " << signo; }
};

// A rank calls PMIx_Abort/MPI_Abort: ends the job also with abort off.
struct abort_call_cmd final : command {
  std::uint32_t rank;
  int status;
  std::string message;
  explicit abort_call_cmd(const Model& m)
      : rank(pick_rank(m, [](auto, const rank_model& x) { return !ended(x.ph); })),
        status(*rc::gen::element(0, 1, 2, 3, 256)),
        message(*rc::gen::element(std::string(), std::string("bad input"))) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && !ended(m.ranks[rank].ph));
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished || m.aborting) return;                      // the job is ending already
    const int st = status >= 1 && status <= 255 ? status : 1;  // 8 bits, never 0
    auto& x = m.ranks[rank];
    x.called_abort = true;
    if (!message.empty()) x.reason = message;
    m.failure(cause_kind::abort_requested, rank, m.host_of(rank), exit_status::exited(st), st,
              m.where(rank) + " called abort with status " + std::to_string(status) +
                  (message.empty() ? "" : ": " + message),
              true, ex);
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override {
    return pm::abort_requested{rank, status, message};
  }
  std::string kind() const override { return "abort_requested by a rank"; }
  std::string detail(const Model& m) const override {
    if (m.aborting) return "ignored: already aborting";
    return m.ranks[rank].ph == phase::pending ? "before its start" : "";
  }
  void show(std::ostream& os) const override {
    os << "abort_requested rank " << rank << " status " << status << " '" << message << "'";
  }
};

// The embedder cancels the job (abort_requested without a rank).
struct cancel_cmd final : command {
  int status;
  std::string message;
  explicit cancel_cmd(const Model&)
      : status(*rc::gen::inRange(0, 3)),
        message(*rc::gen::element(std::string(), std::string("preempted"))) {}
  void step(Model& m, expect& ex) const override {
    if (m.finished || m.aborting) return;
    const int st = status >= 1 && status <= 255 ? status : 1;  // 8 bits, never 0
    const auto line = "the job was cancelled" + (message.empty() ? "" : ": " + message);
    m.decide(cause_kind::abort_requested, st, line);
    ex.lines.push_back(line + m.tail(m.begin_abort(SIGTERM, ex)));
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override {
    return pm::abort_requested{std::nullopt, status, message};
  }
  std::string kind() const override { return "abort_requested by the embedder"; }
  std::string detail(const Model& m) const override { return m.aborting ? "ignored" : ""; }
  void show(std::ostream& os) const override {
    os << "cancel status " << status << " '" << message << "'";
  }
};

// A host (its agent) is gone: its ranks that had not ended failed; its pending output is lost.
struct host_lost_cmd final : command {
  std::uint32_t host;
  std::string reason;
  explicit host_lost_cmd(const Model& m)
      : host(*rc::gen::inRange<std::uint32_t>(0, m.w->hosts)),
        reason(*rc::gen::element(std::string("agent channel closed"),
                                 std::string("no heartbeat for 1.0 s"))) {}
  void checkPreconditions(const Model& m) const override { RC_PRE(host < m.w->hosts); }
  void step(Model& m, expect& ex) const override {
    if (m.finished) return;
    std::uint32_t lost = 0;
    std::optional<std::uint32_t> first;
    for (auto r : m.w->map.ranks_on_host(host)) {
      auto& x = m.ranks[r];
      x.open = 0;  // also for ranks that had ended
      if (ended(x.ph)) continue;
      x.ph = phase::lost;
      if (!first) first = r;
      ++lost;
    }
    m.host_gone[host] = true;
    if (lost > 0) {
      m.host_reason[host] = reason;
      if (!m.aborting) {
        m.failure(cause_kind::host_lost, first, host, std::nullopt, pm::exit_codes::host_lost,
                  "host " + m.host_name(host) + " was lost (" + reason + "); its " +
                      ranks_text(lost) + " failed",
                  false, ex);
      }
    }
    m.check_finish(ex);
  }
  pm::event make_event(const Sut&) const override { return pm::host_lost{host, reason}; }
  std::string kind() const override { return "host_lost"; }
  std::string detail(const Model& m) const override {
    const auto on = m.w->map.ranks_on_host(host);
    if (on.empty()) return "a host without ranks";
    if (std::all_of(on.begin(), on.end(), [&](auto r) { return ended(m.ranks[r].ph); }))
      return "every rank had ended";
    return m.aborting ? "during the abort" : "";
  }
  void show(std::ostream& os) const override {
    os << "host_lost " << host << " (" << reason << ")";
  }
};

// Repeated and impossible reports: no action, no change.
struct duplicate_cmd final : command {
  enum class what : std::uint8_t {
    start_again,
    exit_again,
    spawn_failed_late,
    stream_again,
    host_again,
    abort_from_ended,
    unknown_rank,
    unknown_host,
    unknown_timer,
    job_start_again,
  };
  what kind_ = what::unknown_rank;
  std::uint32_t index = 0;  // rank or host
  pm::stream_kind stream = pm::stream_kind::out;
  std::uint32_t offset = 0;

  explicit duplicate_cmd(const Model& m) {
    kind_ = *rc::gen::element(what::start_again, what::exit_again, what::spawn_failed_late,
                              what::stream_again, what::host_again, what::abort_from_ended,
                              what::unknown_rank, what::unknown_host, what::unknown_timer,
                              what::job_start_again);
    offset = *rc::gen::inRange<std::uint32_t>(0, 3);
    switch (kind_) {
      case what::start_again:
        index = pick_rank(m, [](auto, const rank_model& x) { return x.start_reported; });
        break;
      case what::exit_again:
      case what::abort_from_ended:
        index = pick_rank(m, [](auto, const rank_model& x) { return ended(x.ph); });
        break;
      case what::spawn_failed_late:
        index = pick_rank(m, [](auto, const rank_model& x) { return x.ph != phase::pending; });
        break;
      case what::stream_again:
        index = pick_rank(m, [](auto, const rank_model& x) { return x.open != 3; });
        stream = pick_open_stream(static_cast<std::uint8_t>(~m.ranks[index].open & 3));
        break;
      case what::host_again: {
        std::vector<std::uint32_t> gone;
        for (std::uint32_t h = 0; h < m.w->hosts; ++h) {
          if (m.host_gone[h]) gone.push_back(h);
        }
        RC_PRE(!gone.empty());
        index = *rc::gen::elementOf(gone);
        break;
      }
      default:
        break;
    }
  }
  void checkPreconditions(const Model& m) const override {
    switch (kind_) {
      case what::start_again:
        RC_PRE(index < m.np() && m.ranks[index].start_reported);
        break;
      case what::exit_again:
      case what::abort_from_ended:
        RC_PRE(index < m.np() && ended(m.ranks[index].ph));
        break;
      case what::spawn_failed_late:
        RC_PRE(index < m.np() && m.ranks[index].ph != phase::pending);
        break;
      case what::stream_again:
        RC_PRE(index < m.np() && (m.ranks[index].open & bit(stream)) == 0);
        break;
      case what::host_again:
        RC_PRE(index < m.w->hosts && m.host_gone[index]);
        break;
      default:
        break;
    }
  }
  void step(Model&, expect&) const override {}
  pm::event make_event(const Sut& sut) const override {
    const auto np = sut.w->map.size();
    switch (kind_) {
      case what::start_again:
        return pm::rank_started{index, 1000 + index};
      case what::exit_again:
        return pm::rank_exited{index, exit_status::exited(static_cast<int>(offset) + 1)};
      case what::spawn_failed_late:
        return pm::rank_spawn_failed{index, 127, "late"};
      case what::stream_again:
        return pm::stream_closed{index, stream, 1};
      case what::host_again:
        return pm::host_lost{index, "again"};
      case what::abort_from_ended:
        return pm::abort_requested{index, 5, "from the grave"};
      case what::unknown_rank:
        switch (offset) {
          case 0:
            return pm::rank_exited{np + offset, exit_status::exited(3)};
          case 1:
            return pm::rank_started{np + offset, 1};
          default:
            return pm::stream_closed{np + offset, pm::stream_kind::err, 1};
        }
      case what::unknown_host:
        return pm::host_lost{sut.w->hosts + offset, "nowhere"};
      case what::unknown_timer:
        return pm::timer_fired{
            offset == 0 ? 0 : (sut.issued.empty() ? 0 : *sut.issued.rbegin()) + 100 + offset};
      case what::job_start_again:
        break;
    }
    return pm::job_start{};
  }
  std::string kind() const override { return "duplicate or impossible event"; }
  std::string detail(const Model&) const override {
    static const char* const names[] = {
        "rank_started again",  "rank_exited again", "rank_spawn_failed after the start",
        "stream_closed again", "host_lost again",   "abort_requested by an ended rank",
        "an unknown rank",     "an unknown host",   "an unknown timer",
        "job_start again"};
    return names[static_cast<int>(kind_)];
  }
  void show(std::ostream& os) const override {
    os << "duplicate " << detail(Model{}) << " " << index << " " << offset;
  }
};

// What the world may deliver next, weighted so that jobs progress and failures stay rare enough
// that every ending shows up; the timeout fires more often once only output is pending (a narrow
// window otherwise).
inline rc::Gen<std::shared_ptr<const Cmd>> next_command(const Model& m) {
  using rc::state::gen::execOneOfWithArgs;
  // Once every rank ended the timeout changes nothing, in any story.
  const std::size_t timeout_weight = m.not_ended() == 0 ? 20 : fault(m, story::timeout, 2);
  return rc::gen::weightedOneOf<std::shared_ptr<const Cmd>>({
      {40, execOneOfWithArgs<rank_started_cmd>()(m)},
      {4, execOneOfWithArgs<start_after_exit_cmd>()(m)},
      {fault(m, story::spawn_failure, 2), execOneOfWithArgs<spawn_failed_cmd>()(m)},
      {30, execOneOfWithArgs<rank_exited_cmd>()(m)},
      {20, execOneOfWithArgs<stream_closed_cmd>()(m)},
      {12, execOneOfWithArgs<output_after_exit_cmd>()(m)},
      {12, execOneOfWithArgs<grace_fired_cmd>()(m)},
      {timeout_weight, execOneOfWithArgs<timeout_fired_cmd>()(m)},
      {3, execOneOfWithArgs<late_timer_cmd>()(m)},
      {fault(m, story::interrupt, 2), execOneOfWithArgs<interrupt_cmd>()(m)},
      {2, execOneOfWithArgs<other_signal_cmd>()(m)},
      {fault(m, story::abort_call, 2), execOneOfWithArgs<abort_call_cmd>()(m)},
      {fault(m, story::cancel, 2), execOneOfWithArgs<cancel_cmd>()(m)},
      {fault(m, story::host_loss, 2), execOneOfWithArgs<host_lost_cmd>()(m)},
      {4, execOneOfWithArgs<duplicate_cmd>()(m)},
  });
}

// Runs one command outside the generated sequence (the liveness phase).
inline void run_one(const command& c, Sut& sut) {
  const Model s0 = *sut.last;
  c.checkPreconditions(s0);
  c.run(s0, sut);
}

}  // namespace controller_state
