// The model of tests/property/controller_state_test.cpp: the world a test case runs in, the
// texts docs/failure-semantics.md prescribes, and what a legal world knows (Model) with what the
// controller must answer to an event (expect).
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

namespace controller_state {

using namespace std::chrono_literals;
using pm::cause_kind;
using pm::exit_status;

// ---- the world a test case runs in (fixed for the case) -----------------------------------------

// Which fault the world favours in a test case, so that every way a job can end shows up in every
// run; "mixed" weighs them all alike, "calm" has none.
enum class story : std::uint8_t {
  mixed,
  calm,
  rank_failure,
  spawn_failure,
  abort_call,
  cancel,
  host_loss,
  interrupt,
  timeout,
};

inline void showValue(story s, std::ostream& os) {
  static const char* const names[] = {"mixed",         "calm",       "rank_failure",
                                      "spawn_failure", "abort_call", "cancel",
                                      "host_loss",     "interrupt",  "timeout"};
  os << names[static_cast<int>(s)];
}

struct world {
  story plot = story::mixed;
  pm::rank_map map;
  pm::controller_options options;
  std::uint32_t hosts = 0;
  std::uint8_t stream_bits = 0;  // bit 0 stdout, bit 1 stderr: the streams each rank has
};

// ---- texts the docs prescribe (written here from docs/failure-semantics.md) ---------------------

inline std::string sig_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal " + std::to_string(signo);
  }
}

inline std::string describe_status(exit_status s) {
  return s.is_signal() ? "was killed by " + sig_name(s.signal())
                       : "exited with code " + std::to_string(s.code());
}

inline int shell_code(exit_status s) {
  return s.is_signal() ? 128 + s.signal() : s.code();
}

inline std::string ranks_text(std::uint32_t n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

// "1", "0.5", "2.5" (seconds, as the lines print them).
inline std::string seconds_text(std::chrono::milliseconds ms) {
  std::string s = std::to_string(ms.count() / 1000);
  if (const auto frac = ms.count() % 1000; frac != 0) {
    char buf[8];
    std::snprintf(buf, sizeof buf, ".%03d", static_cast<int>(frac));
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    s += f;
  }
  return s;
}

inline bool is_interrupt(int signo) {
  return signo == SIGINT || signo == SIGTERM || signo == SIGHUP;
}

inline bool is_forwarded(int signo) {
  return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGTSTP || signo == SIGCONT;
}

// ---- the model ----------------------------------------------------------------------------------

enum class phase : std::uint8_t { pending, running, exited, killed, spawn_failed, lost };

inline bool ended(phase p) {
  return p != phase::pending && p != phase::running;
}

struct rank_model {
  phase ph = phase::pending;
  bool start_reported = false;   // rank_started delivered (before the finish)
  bool ran = false;              // its start or its exit was reported: its streams count
  bool called_abort = false;     // an abort call the controller accepted (a failure)
  bool abort_signalled = false;  // got SIGCONT + the abort's signal
  bool got_kill = false;
  std::uint8_t open = 0;  // stream bits not yet at end-of-stream (cleared when its host is lost)
  std::optional<exit_status> status;
  std::string reason;  // why it could not start / its abort message
};

enum class timer_role : std::uint8_t { timeout, grace };
enum class timer_state : std::uint8_t { off, armed, fired, cancelled };

// What one event must produce, according to the model.
struct expect {
  std::map<std::uint32_t, std::vector<int>> signals;  // per rank, in order
  std::vector<timer_role> started, cancelled;
  std::vector<std::string> lines;
  bool clear_leftovers = false;
  bool finish = false;

  bool empty() const {
    return signals.empty() && started.empty() && cancelled.empty() && lines.empty() &&
           !clear_leftovers && !finish;
  }
};

struct Model {
  std::shared_ptr<const world> w;
  std::vector<rank_model> ranks;
  std::vector<bool> host_gone;
  std::vector<std::string> host_reason;
  bool aborting = false;
  int abort_signo = 0;
  bool kill_due = false;  // the grace ran out, or a second interrupt
  std::uint32_t interrupts = 0;
  timer_state timeout = timer_state::off, grace = timer_state::off;
  bool leftovers_cleared = false;
  bool finished = false;
  // The first failure (or interrupt, timeout, cancel).
  cause_kind cause = cause_kind::none;
  int exit_code = 0;
  int signal = 0;
  std::optional<std::uint32_t> failed_rank, failed_host;
  std::optional<exit_status> failed_status;
  std::string summary;

  std::uint32_t np() const { return static_cast<std::uint32_t>(ranks.size()); }
  std::uint32_t host_of(std::uint32_t r) const { return w->map.at(r).host; }
  const std::string& host_name(std::uint32_t h) const { return w->map.allocation().hosts[h].name; }
  std::string where(std::uint32_t r) const {
    return "rank " + std::to_string(r) + " on " + host_name(host_of(r));
  }
  std::uint32_t not_ended() const {
    return static_cast<std::uint32_t>(
        std::count_if(ranks.begin(), ranks.end(), [](const auto& x) { return !ended(x.ph); }));
  }
  bool streams_open() const {
    return std::any_of(ranks.begin(), ranks.end(),
                       [](const auto& x) { return x.ran && x.open != 0; });
  }
  timer_state& timer(timer_role role) { return role == timer_role::grace ? grace : timeout; }
  timer_state timer(timer_role role) const { return role == timer_role::grace ? grace : timeout; }

  std::uint32_t signal_running(std::initializer_list<int> signos, expect& ex) {
    std::uint32_t n = 0;
    for (std::uint32_t r = 0; r < np(); ++r) {
      if (ranks[r].ph != phase::running) continue;
      ++n;
      for (int s : signos) ex.signals[r].push_back(s);
    }
    return n;
  }

  // SIGCONT and `signo` to every running rank, the grace timer (while any rank has not ended);
  // the count is the ranks signalled now (a pending rank gets the signal at its start).
  std::uint32_t begin_abort(int signo, expect& ex) {
    aborting = true;
    abort_signo = signo;
    if (not_ended() == 0) return 0;
    for (std::uint32_t r = 0; r < np(); ++r) {
      if (ranks[r].ph != phase::running) continue;
      RC_ASSERT(!ranks[r].abort_signalled);  // the model's own consistency: one abort per job
      ranks[r].abort_signalled = true;
    }
    const auto n = signal_running({SIGCONT, signo}, ex);
    RC_ASSERT(grace == timer_state::off);
    grace = timer_state::armed;
    ex.started.push_back(timer_role::grace);
    return n;
  }

  std::string tail(std::uint32_t n) const {
    if (n == 0) return {};
    return "; aborting the job (" + sig_name(abort_signo) + " to " + ranks_text(n) + ")";
  }

  void decide(cause_kind kind, int code, const std::string& line) {
    if (cause != cause_kind::none) return;
    cause = kind;
    exit_code = code;
    summary = line;
  }

  void failure(cause_kind kind, std::optional<std::uint32_t> rank, std::uint32_t host,
               std::optional<exit_status> status, int code, std::string line, bool force,
               expect& ex) {
    if (cause == cause_kind::none) {
      failed_rank = rank;
      failed_host = host;
      failed_status = status;
      decide(kind, code, line);
    }
    if (w->options.abort_on_failure || force) line += tail(begin_abort(SIGTERM, ex));
    ex.lines.push_back(std::move(line));
  }

  // "The job finishes when every rank ended and every stream of every rank that started reached
  // end-of-stream"; the grace timer goes when every rank ended; clear_leftovers once if streams
  // stay open; the timers still running are cancelled at the finish.
  void check_finish(expect& ex) {
    if (finished || not_ended() != 0) return;
    if (grace == timer_state::armed) {
      grace = timer_state::cancelled;
      ex.cancelled.push_back(timer_role::grace);
    }
    if (streams_open()) {
      if (!leftovers_cleared) {
        leftovers_cleared = true;
        ex.clear_leftovers = true;
      }
      return;
    }
    if (timeout == timer_state::armed) {
      timeout = timer_state::cancelled;
      ex.cancelled.push_back(timer_role::timeout);
    }
    finished = true;
    ex.finish = true;
  }
};

}  // namespace controller_state
