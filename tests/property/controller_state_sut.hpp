// The system under test of tests/property/controller_state_test.cpp: the real controller fed
// the commands' events, and the checks of the actions it returns against the model's
// expectations, finish and report included.
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
#include "support/describe_action.hpp"

namespace controller_state {

// ---- the system under test ----------------------------------------------------------------------

// Every detail of a finish's report, so that a replay differing anywhere shows.
inline std::string describe(const pm::action& a) {
  return pm::test::describe(a, pm::test::report_detail::full);
}

inline std::map<std::string, unsigned>& coverage() {
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

inline void Sut::check_report(const Model& m, const pm::job_report& r) const {
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

inline void Sut::check(const Model& s0, const Model& s1, const expect& ex, const pm::event& e,
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

}  // namespace controller_state
