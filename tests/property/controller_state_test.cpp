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
//
// The model is controller_state_model.hpp, the system under test controller_state_sut.hpp,
// the commands controller_state_commands.hpp.
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
#include "property/controller_state_commands.hpp"

namespace {

using namespace controller_state;

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
      case cause_kind::stalled:  // not generated here: job_stalled is the launcher's
        return "stalled";
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
