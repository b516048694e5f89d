// The controller against a model of the world, with rapidcheck's rc::state.
//
// A Model holds what a legal world knows (docs/failure-semantics.md is the spec): per rank, not
// started (spawn requested) / running / ended (exited, killed by the abort, could not start, lost)
// with its status, whether its start and exit were reported, which of its streams are still open,
// whether it called abort and what the abort sent it; the timers (armed, fired, cancelled); the
// first failure; whether the job aborts and finished. One rc::state::Command per kind of event a
// driver can legally deliver: its checkPreconditions keeps the interleaving legal, apply() moves
// the model, run() feeds the real controller and compares the actions it returned with what the
// model expects, action by action: who is signalled with what and in which order, timers started
// and cancelled, the exact lines, clear_leftovers, and the finish with its report. The generated
// commands are followed by a liveness phase without faults (every rank starts, ends, closes its
// streams), after which the job must have finished exactly once and nothing may follow. Finally the
// same events fed to a fresh controller must give the same actions.
//
// tests/property/controller_model_test.cpp drives the controller with a hand-written world instead;
// tests/unit/controller_test.cpp has the exact actions of single scenarios.
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
#include "support/describe_action.hpp"

namespace {

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

void showValue(story s, std::ostream& os) {
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

std::string sig_name(int signo) {
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

std::string describe_status(exit_status s) {
  return s.is_signal() ? "was killed by " + sig_name(s.signal())
                       : "exited with code " + std::to_string(s.code());
}

int shell_code(exit_status s) {
  return s.is_signal() ? 128 + s.signal() : s.code();
}

std::string ranks_text(std::uint32_t n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

// "1", "0.5", "2.5" (seconds, as the lines print them).
std::string seconds_text(std::chrono::milliseconds ms) {
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

bool is_interrupt(int signo) {
  return signo == SIGINT || signo == SIGTERM || signo == SIGHUP;
}

bool is_forwarded(int signo) {
  return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGTSTP || signo == SIGCONT;
}

// ---- the model ----------------------------------------------------------------------------------

enum class phase : std::uint8_t { pending, running, exited, killed, spawn_failed, lost };

bool ended(phase p) {
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

// ---- the system under test ----------------------------------------------------------------------

// Every detail of a finish's report, so that a replay differing anywhere shows.
std::string describe(const pm::action& a) {
  return pm::test::describe(a, pm::test::report_detail::full);
}

std::map<std::string, unsigned>& coverage() {
  static std::map<std::string, unsigned> counts;
  return counts;
}

struct Sut {
  explicit Sut(std::shared_ptr<const world> world_)
      : w(std::move(world_)), ctl(w->map, w->options), abort_hits(w->map.size(), 0) {}

  std::shared_ptr<const world> w;
  pm::controller ctl;
  pm::job_time now{0};
  std::uint64_t timeout_id = 0, grace_id = 0;
  std::set<std::uint64_t> issued, live;  // timer ids started; not yet fired or cancelled
  std::vector<pm::event> events;
  std::vector<std::string> actions;  // every action, described, for the replay
  int finishes = 0;
  bool cleared = false;
  std::optional<pm::job_report> report;
  std::vector<unsigned> abort_hits;  // per rank: how often the abort signalled it
  std::optional<Model> last;         // the model after the last command run
  bool counting = true;              // count command kinds (not in the liveness phase)

  std::uint64_t id_of(timer_role role) const {
    return role == timer_role::grace ? grace_id : timeout_id;
  }

  std::vector<pm::action> feed(const pm::event& e) {
    std::vector<pm::action> out;
    now += 1ms;
    events.push_back(e);
    ctl.handle(now, e, out);
    for (const auto& a : out) actions.push_back(describe(a));
    return out;
  }

  // Reports before job_start are not about this job: ignored. Then job_start: one spawn per host
  // that has ranks, in global rank order, and the timeout timer.
  void start(const Model& m) {
    for (const pm::event& e : std::initializer_list<pm::event>{
             pm::rank_started{0, 1}, pm::rank_exited{0, exit_status::exited(1)},
             pm::signal_received{SIGINT}, pm::host_lost{0, "early"}, pm::timer_fired{1},
             pm::abort_requested{std::nullopt, 1, "early"}}) {
      RC_ASSERT(feed(e).empty());
    }
    const auto out = feed(pm::job_start{});
    std::size_t i = 0;
    for (std::uint32_t h = 0; h < w->hosts; ++h) {
      const auto on_host = w->map.ranks_on_host(h);
      if (on_host.empty()) continue;
      RC_ASSERT(i < out.size());
      const auto* sp = std::get_if<pm::spawn>(&out[i++]);
      RC_ASSERT(sp != nullptr);
      RC_ASSERT(sp->host == h);
      RC_ASSERT(sp->ranks == std::vector<std::uint32_t>(on_host.begin(), on_host.end()));
    }
    if (m.timeout == timer_state::armed) {
      RC_ASSERT(i < out.size());
      const auto* t = std::get_if<pm::start_timer>(&out[i++]);
      RC_ASSERT(t != nullptr);
      RC_ASSERT(t->timer != 0u);
      RC_ASSERT(t->after == w->options.timeout);
      timeout_id = t->timer;
      issued.insert(t->timer);
      live.insert(t->timer);
    }
    RC_ASSERT(i == out.size());
    last = m;
  }

  void check_report(const Model& m, const pm::job_report& r) const;
  void check(const Model& s0, const Model& s1, const expect& ex, const pm::event& e,
             const std::vector<pm::action>& out);
};

void Sut::check_report(const Model& m, const pm::job_report& r) const {
  RC_ASSERT(r.exit_code == m.exit_code);
  RC_ASSERT(r.cause == m.cause);
  RC_ASSERT(r.signal == m.signal);
  RC_ASSERT(r.summary == m.summary);
  RC_ASSERT(r.failed_rank == m.failed_rank);
  RC_ASSERT(r.failed_host == m.failed_host);
  RC_ASSERT(r.failed_status == m.failed_status);
  RC_ASSERT(r.host_names.size() == w->hosts);
  RC_ASSERT(r.ranks.size() == m.np());
  std::uint32_t failed = 0, killed = 0;
  for (std::uint32_t i = 0; i < m.np(); ++i) {
    const auto& x = m.ranks[i];
    const auto& rr = r.ranks[i];
    RC_ASSERT(rr.rank == i);
    RC_ASSERT(rr.host == m.host_of(i));
    const auto want = x.ph == phase::pending        ? pm::rank_state::pending
                      : x.ph == phase::running      ? pm::rank_state::running
                      : x.ph == phase::exited       ? pm::rank_state::exited
                      : x.ph == phase::killed       ? pm::rank_state::killed
                      : x.ph == phase::spawn_failed ? pm::rank_state::spawn_failed
                                                    : pm::rank_state::lost;
    RC_ASSERT(rr.state == want);
    if (x.ph == phase::exited || x.ph == phase::killed || x.ph == phase::spawn_failed)
      RC_ASSERT(rr.status == x.status);
    else
      RC_ASSERT(!rr.status.has_value());
    RC_ASSERT(rr.pid == (x.start_reported ? static_cast<std::int64_t>(1000 + i) : 0));
    RC_ASSERT(rr.started_at.has_value() == x.ran);
    RC_ASSERT(rr.ended_at.has_value() == ended(x.ph));
    if (x.ph == phase::lost)
      RC_ASSERT(rr.reason == m.host_reason[rr.host]);
    else
      RC_ASSERT(rr.reason == x.reason);
    // A rank that called abort counts once it ended (mid-run, the report counts ranks by state).
    if (x.ph == phase::lost || x.ph == phase::spawn_failed ||
        (x.ph == phase::exited && (x.called_abort || !x.status->success())))
      ++failed;
    if (x.ph == phase::killed) ++killed;
  }
  RC_ASSERT(r.ranks_failed == failed);
  RC_ASSERT(r.ranks_killed == killed);
  // Success only if every rank succeeded.
  if (m.finished && r.exit_code == 0) {
    RC_ASSERT(r.cause == cause_kind::none);
    for (const auto& rr : r.ranks) {
      RC_ASSERT(rr.state == pm::rank_state::exited);
      RC_ASSERT(rr.status == exit_status::exited(0));
    }
  }
}

void Sut::check(const Model& s0, const Model& s1, const expect& ex, const pm::event& e,
                const std::vector<pm::action>& out) {
  if (const auto* t = std::get_if<pm::timer_fired>(&e)) live.erase(t->timer);

  std::map<std::uint32_t, std::vector<int>> signals;
  std::vector<timer_role> started, cancelled;
  std::vector<std::string> lines;
  bool clear = false, finish = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& act = out[i];
    RC_ASSERT(finishes == 0);  // nothing after the finish
    if (const auto* s = std::get_if<pm::signal_ranks>(&act)) {
      RC_ASSERT(!s->ranks.empty());
      std::set<std::uint32_t> seen;
      for (auto r : s->ranks) {
        RC_ASSERT(r < s1.np());
        RC_ASSERT(w->map.at(r).host == s->host);  // batched per host
        RC_ASSERT(seen.insert(r).second);
        RC_ASSERT(s1.ranks[r].ph == phase::running);      // only a process that runs
        if (s->signo == SIGKILL) RC_ASSERT(s1.kill_due);  // only after the grace (or escalation)
        if (is_interrupt(s->signo)) RC_ASSERT(s1.aborting);
        signals[r].push_back(s->signo);
      }
    } else if (const auto* t = std::get_if<pm::start_timer>(&act)) {
      RC_ASSERT(t->timer != 0u);
      RC_ASSERT(issued.insert(t->timer).second);  // ids are unique
      RC_ASSERT(t->after == w->options.kill_grace);
      RC_ASSERT(grace_id == 0u);  // one grace timer per job
      grace_id = t->timer;
      live.insert(t->timer);
      started.push_back(timer_role::grace);
    } else if (const auto* c = std::get_if<pm::cancel_timer>(&act)) {
      RC_ASSERT(live.erase(c->timer) == 1u);  // only a running timer is cancelled
      RC_ASSERT(c->timer == grace_id || c->timer == timeout_id);
      cancelled.push_back(c->timer == grace_id ? timer_role::grace : timer_role::timeout);
    } else if (const auto* m = std::get_if<pm::emit>(&act)) {
      lines.push_back(m->line);
    } else if (std::holds_alternative<pm::clear_leftovers>(act)) {
      RC_ASSERT(!cleared);  // once
      cleared = clear = true;
    } else if (const auto* f = std::get_if<pm::finish>(&act)) {
      RC_ASSERT(i + 1 == out.size());  // the last action
      ++finishes;
      finish = true;
      report = f->report;
      // Straight from the docs: every rank ended, every stream of a started rank closed, no timer
      // left running.
      for (const auto& x : s1.ranks) {
        RC_ASSERT(ended(x.ph));
        RC_ASSERT(!x.ran || x.open == 0);
      }
      RC_ASSERT(live.empty());
      check_report(s1, f->report);
    } else {
      RC_FAIL("unexpected action: " + describe(act));
    }
  }

  // The abort signals every rank at most once (a forwarded interrupt is not the abort).
  const bool forwarding = std::holds_alternative<pm::signal_received>(e) && s0.aborting;
  for (const auto& [r, sigs] : signals) {
    for (std::size_t k = 0; k + 1 < sigs.size(); ++k) {
      if (sigs[k] == SIGCONT && sigs[k + 1] == s1.abort_signo && s1.aborting && !forwarding) {
        ++abort_hits[r];
        RC_ASSERT(abort_hits[r] <= 1u);
      }
    }
  }
  // With abort off and no request to end the job, nobody is signalled but by forwarding.
  if (!s1.aborting) {
    for (const auto& [r, sigs] : signals) {
      for (int s : sigs) RC_ASSERT(is_forwarded(s));
    }
  }

  // Exactly what the model expects.
  RC_ASSERT(signals == ex.signals);
  RC_ASSERT(started == ex.started);
  std::sort(cancelled.begin(), cancelled.end());
  auto want_cancelled = ex.cancelled;
  std::sort(want_cancelled.begin(), want_cancelled.end());
  RC_ASSERT(cancelled == want_cancelled);
  RC_ASSERT(lines == ex.lines);
  RC_ASSERT(clear == ex.clear_leftovers);
  RC_ASSERT(finish == ex.finish);
  RC_ASSERT(ctl.finished() == s1.finished);
  // The report as of now.
  check_report(s1, ctl.report());
}

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

pm::stream_kind pick_open_stream(std::uint8_t open) {
  if (open == 3) return *rc::gen::element(pm::stream_kind::out, pm::stream_kind::err);
  return open == 1 ? pm::stream_kind::out : pm::stream_kind::err;
}

std::uint8_t bit(pm::stream_kind s) {
  return static_cast<std::uint8_t>(1u << static_cast<int>(s));
}

std::string stream_name(pm::stream_kind s) {
  return s == pm::stream_kind::out ? "stdout" : "stderr";
}

// How often a fault comes: as `base` in the mixed story; in its own story very often until the job
// has a cause, then a little more often than `base` (an interrupt again, another lost host); in
// the calm story never; in the other stories only once the story's fault decided the outcome, then
// as often (so that later faults meet a decided cause).
std::size_t fault(const Model& m, story kind, std::size_t base) {
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
        status(*rc::gen::inRange(0, 4)),
        message(*rc::gen::element(std::string(), std::string("bad input"))) {}
  void checkPreconditions(const Model& m) const override {
    RC_PRE(rank < m.np() && !ended(m.ranks[rank].ph));
  }
  void step(Model& m, expect& ex) const override {
    if (m.finished || m.aborting) return;  // the job is ending already
    const int st = status == 0 ? 1 : status;
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
    const int st = status == 0 ? 1 : status;
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
rc::Gen<std::shared_ptr<const Cmd>> next_command(const Model& m) {
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
void run_one(const command& c, Sut& sut) {
  const Model s0 = *sut.last;
  c.checkPreconditions(s0);
  c.run(s0, sut);
}

// ---- the property -------------------------------------------------------------------------------

void controller_follows_the_model() {
  auto w = std::make_shared<world>();
  w->plot = *rc::gen::element(story::mixed, story::calm, story::rank_failure, story::spawn_failure,
                              story::abort_call, story::cancel, story::host_loss, story::interrupt,
                              story::timeout);
  const auto np = *rc::gen::weightedOneOf<std::uint32_t>(
      {{1, rc::gen::inRange<std::uint32_t>(1, 9)}, {1, rc::gen::inRange<std::uint32_t>(9, 65)}});
  w->hosts = *rc::gen::inRange<std::uint32_t>(1, 9);
  const bool by_node = *rc::gen::arbitrary<bool>();
  const auto slots = (np + w->hosts - 1) / w->hosts + *rc::gen::inRange<std::uint32_t>(0, 3);
  w->options.abort_on_failure = *rc::gen::arbitrary<bool>();
  w->options.kill_grace = *rc::gen::element(500ms, 1000ms, 3000ms);
  w->options.timeout = w->plot == story::timeout ? *rc::gen::element(1500ms, 60000ms)
                                                 : *rc::gen::element(0ms, 0ms, 1500ms, 60000ms);
  w->options.streams_per_rank = *rc::gen::weightedElement<std::uint8_t>({{4, 2}, {1, 1}, {1, 0}});
  w->stream_bits = w->options.streams_per_rank >= 2 ? 3 : w->options.streams_per_rank == 1 ? 1 : 0;
  pm::allocation alloc;
  alloc.source = pm::allocation_source::host_list;
  for (std::uint32_t h = 0; h < w->hosts; ++h)
    alloc.hosts.push_back(pm::host{"node" + std::to_string(h), slots});
  pm::job_spec job;
  job.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  job.mapping.by = by_node ? pm::map_by::node : pm::map_by::slot;
  w->map = pm::map_job(job, alloc);
  RC_ASSERT(w->map.size() == np);

  Model initial;
  initial.w = w;
  initial.ranks.resize(np);
  for (auto& x : initial.ranks) x.open = w->stream_bits;
  initial.host_gone.assign(w->hosts, false);
  initial.host_reason.assign(w->hosts, std::string());
  if (w->options.timeout.count() > 0) initial.timeout = timer_state::armed;

  Sut sut(w);
  sut.start(initial);
  rc::state::check(initial, sut, next_command);

  // Liveness: no more faults; every rank starts, ends as the abort made it end (or with 0) and
  // closes its streams. The job must finish within that budget: "no events but not finished" is
  // a failure.
  sut.counting = false;
  for (std::uint32_t budget = 4 * np + 8; budget > 0 && !sut.last->finished; --budget) {
    const Model& m = *sut.last;
    std::optional<std::uint32_t> pending, running, open;
    for (std::uint32_t r = 0; r < np; ++r) {
      const auto& x = m.ranks[r];
      if (!pending && x.ph == phase::pending) pending = r;
      if (!running && x.ph == phase::running) running = r;
      if (!open && x.ran && x.open != 0) open = r;
    }
    if (pending) {
      run_one(rank_started_cmd(*pending), sut);
    } else if (running) {
      const auto& x = m.ranks[*running];
      const auto st = x.got_kill          ? exit_status::signaled(SIGKILL)
                      : x.abort_signalled ? exit_status::signaled(m.abort_signo)
                                          : exit_status::exited(0);
      run_one(rank_exited_cmd(*running, st), sut);
    } else if (open) {
      const auto s = (m.ranks[*open].open & 1) != 0 ? pm::stream_kind::out : pm::stream_kind::err;
      run_one(output_after_exit_cmd(*open, s), sut);
    } else {
      break;
    }
  }
  const Model& m = *sut.last;
  RC_ASSERT(m.finished);
  RC_ASSERT(sut.finishes == 1);
  RC_ASSERT(sut.ctl.finished());
  RC_ASSERT(sut.report.has_value());

  // Nothing follows the finish.
  const auto before = sut.actions.size();
  sut.feed(pm::signal_received{SIGINT});
  sut.feed(pm::signal_received{SIGINT});
  sut.feed(pm::abort_requested{std::nullopt, 3, "late"});
  sut.feed(pm::rank_exited{0, exit_status::exited(9)});
  sut.feed(pm::host_lost{0, "late"});
  for (auto id : sut.issued) sut.feed(pm::timer_fired{id});
  RC_ASSERT(sut.actions.size() == before);
  RC_ASSERT(pm::to_json(sut.ctl.report()) == pm::to_json(*sut.report));

  // The abort reached every rank it owed: with abort off and no request to end the job, no rank
  // was signalled or killed; otherwise each rank the abort found running (or that started
  // during it) got its signal once, unless the grace had already run out at its start.
  for (std::uint32_t r = 0; r < np; ++r) {
    RC_ASSERT(sut.abort_hits[r] == (m.ranks[r].abort_signalled ? 1u : 0u));
    if (!m.aborting) RC_ASSERT(m.ranks[r].ph != phase::killed);
  }
  if (!m.aborting) {
    RC_ASSERT(sut.report->ranks_killed == 0u);
    RC_ASSERT(!w->options.abort_on_failure || sut.report->cause == cause_kind::none);
  }

  // Determinism: the same events at the same times give the same actions.
  pm::controller again(w->map, w->options);
  std::vector<std::string> replay;
  pm::job_time t{0};
  for (const auto& e : sut.events) {
    std::vector<pm::action> out;
    t += 1ms;
    again.handle(t, e, out);
    for (const auto& a : out) replay.push_back(describe(a));
  }
  RC_ASSERT(replay == sut.actions);

  const auto* ending = [&] {
    switch (m.cause) {
      case cause_kind::none:
        return "success";
      case cause_kind::rank_failed:
        return "rank failed";
      case cause_kind::spawn_failed:
        return "spawn failed";
      case cause_kind::abort_requested:
        return m.failed_rank ? "abort called" : "cancelled";
      case cause_kind::host_lost:
        return "host lost";
      case cause_kind::signal:
        return "user interrupt";
      case cause_kind::timeout:
        return "timeout";
    }
    return "?";
  }();
  RC_TAG(std::string(ending), std::string(w->options.abort_on_failure ? "abort on" : "abort off"));
  ++coverage()[std::string("(job ended: ") + ending + ")"];
}

}  // namespace

// The whole contract under arbitrary legal interleavings; afterwards, the table of how often each
// command kind (and its interesting variants) ran, and a check that every kind and every ending
// was exercised.
TEST(ControllerState, FollowsTheModelUnderAnyLegalInterleaving) {
  coverage().clear();
  const bool ok = rc::check("the controller follows the model", controller_follows_the_model);
  EXPECT_TRUE(ok);
  std::cout << "commands run (including shrinking), by kind:\n";
  for (const auto& [name, count] : coverage()) std::cout << "  " << count << "\t" << name << "\n";
  if (!ok) return;
  for (const char* kind :
       {"rank_started", "rank_started after its exit", "rank_spawn_failed", "rank_exited",
        "stream_closed", "stream_closed after the exit", "timer_fired: grace",
        "timer_fired: timeout", "timer_fired after its cancel or fire",
        "signal_received: interrupt", "signal_received: other", "abort_requested by a rank",
        "abort_requested by the embedder", "host_lost", "duplicate or impossible event"}) {
    EXPECT_GT(coverage()[kind], 0u) << kind;
  }
  for (const char* ending : {"success", "rank failed", "spawn failed", "abort called", "cancelled",
                             "host lost", "user interrupt", "timeout"}) {
    EXPECT_GT((coverage()[std::string("(job ended: ") + ending + ")"]), 0u) << ending;
  }
}
