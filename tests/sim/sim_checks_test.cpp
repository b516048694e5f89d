// The simulator's checks catch a controller that breaks the contract. Each test plants one bug
// (run_options::tamper_actions edits the controller's actions before the world carries them
// out) and expects the verdict and the problem line that names it. Without these, a check that
// never fires would prove nothing.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <variant>

#include "pm/sim/world.hpp"

namespace {

using namespace std::chrono_literals;
using pm::sim::parse_script;
using pm::sim::scenario;
using pm::sim::verdict;

// 4 hosts x 2 slots; rank 3 exits 7 at 1 s, the others would run 10 s.
scenario failing_job() {
  scenario s;
  s.hosts = 4;
  s.slots = 2;
  s.seed = 3;
  s.set_script(3, parse_script("exit:7@1s"));
  return s;
}

pm::sim::run_result run_with(const scenario& s,
                             std::function<void(std::vector<pm::action>&)> tamper) {
  pm::sim::run_options o;
  o.tamper_actions = std::move(tamper);
  return pm::sim::run(s, o);
}

bool has_problem(const pm::sim::run_result& r, const std::string& text) {
  return std::any_of(r.problems.begin(), r.problems.end(),
                     [&](const std::string& p) { return p.find(text) != std::string::npos; });
}

template <class T>
T* first_of(std::vector<pm::action>& actions) {
  for (auto& a : actions)
    if (auto* x = std::get_if<T>(&a)) return x;
  return nullptr;
}

TEST(SimChecks, TheUntamperedJobPasses) {
  const auto r = run_with(failing_job(), [](std::vector<pm::action>&) {});
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 7);
}

TEST(SimChecks, ARankSpawnedTwiceIsCaught) {
  bool done = false;
  const auto r = run_with(failing_job(), [&](std::vector<pm::action>& actions) {
    if (done) return;
    if (auto* s = first_of<pm::spawn>(actions)) {
      actions.push_back(*s);
      done = true;
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "was spawned twice")) << r.explain();
  EXPECT_NE(r.explain().find("replay: build/bin/pmsim "), std::string::npos);
}

TEST(SimChecks, ARankSpawnedOnAnotherHostIsCaught) {
  const auto r = run_with(failing_job(), [&](std::vector<pm::action>& actions) {
    for (auto& a : actions)
      if (auto* s = std::get_if<pm::spawn>(&a); s != nullptr && s->host == 0) s->host = 1;
  });
  // Also a liveness failure: node1's agent refuses ranks that are not its own, so they never
  // start; liveness is the verdict that wins.
  EXPECT_NE(r.outcome, verdict::ok) << r.explain();
  EXPECT_TRUE(has_problem(r, "was spawned on node1")) << r.explain();
}

TEST(SimChecks, SigkillBeforeTheGraceIsCaught) {
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    for (auto& a : actions)
      if (auto* s = std::get_if<pm::signal_ranks>(&a); s != nullptr && s->signo == SIGTERM)
        s->signo = SIGKILL;
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "SIGKILL to rank")) << r.explain();
}

TEST(SimChecks, AWrongExitCodeInTheReportIsCaught) {
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) f->report.exit_code = 0;
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the first failure was rank_failed of rank 3")) << r.explain();
}

TEST(SimChecks, AFailureInAJobThatSucceededIsCaught) {
  scenario s = failing_job();
  s.scripts.clear();
  const auto r = run_with(s, [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) {
      f->report.exit_code = 1;
      f->report.cause = pm::cause_kind::rank_failed;
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "no rank failed, yet the job ended with code 1")) << r.explain();
}

TEST(SimChecks, FinishingWhileARankRunsIsCaught) {
  // The launcher's controller leaves the ranks out of its finish (finish_without_ranks); one that
  // lists them is held to what it lists.
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) {
      f->report.ranks.resize(8);
      for (std::uint32_t i = 0; i < 8; ++i) {
        f->report.ranks[i].rank = i;
        f->report.ranks[i].state = i == 5 ? pm::rank_state::running : pm::rank_state::killed;
      }
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the job finished while rank 5 was running")) << r.explain();
}

TEST(SimChecks, AnActionAfterTheFinishIsCaught) {
  const auto r = run_with(failing_job(), [&](std::vector<pm::action>& actions) {
    if (first_of<pm::finish>(actions) != nullptr) actions.push_back(pm::emit{"too late"});
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the controller acted after it finished (1 actions after its finish)"))
      << r.explain();
}

TEST(SimChecks, ALostFinishIsALivenessFailure) {
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    std::erase_if(actions,
                  [](const pm::action& a) { return std::holds_alternative<pm::finish>(a); });
  });
  EXPECT_EQ(r.outcome, verdict::liveness) << r.explain();
  EXPECT_FALSE(r.finished);
  EXPECT_TRUE(has_problem(r, "never told the driver")) << r.explain();
}

TEST(SimChecks, AnAbortThatSignalsNobodyIsCaught) {
  // The abort's SIGTERMs never leave: the other ranks run their 10 s and exit 0.
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    std::erase_if(actions,
                  [](const pm::action& a) { return std::holds_alternative<pm::signal_ranks>(a); });
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "after the abort began at 1")) << r.explain();
  EXPECT_TRUE(has_problem(r, "and was never signalled")) << r.explain();
}

TEST(SimChecks, AnAbortThatSkipsOneRankIsCaught) {
  // Rank 6 (on node3) is left out of the abort's SIGTERM.
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    for (auto& a : actions)
      if (auto* s = std::get_if<pm::signal_ranks>(&a)) std::erase(s->ranks, 6u);
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "rank 6 ended at")) << r.explain();
}

TEST(SimChecks, ATimeoutAbortThatSignalsNobodyIsCaught) {
  scenario s = failing_job();
  s.scripts.clear();
  s.control.timeout = std::chrono::seconds(2);
  const auto r = run_with(s, [](std::vector<pm::action>& actions) {
    std::erase_if(actions,
                  [](const pm::action& a) { return std::holds_alternative<pm::signal_ranks>(a); });
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "after the abort began at 2s")) << r.explain();
}

TEST(SimChecks, ASignalToARankWhoseEndWasKnownIsCaught) {
  // Rank 3 failed; the abort's SIGTERM to node1 also names rank 3, already ended.
  const auto r = run_with(failing_job(), [](std::vector<pm::action>& actions) {
    for (auto& a : actions)
      if (auto* s = std::get_if<pm::signal_ranks>(&a); s != nullptr && s->host == 1)
        s->ranks.push_back(3);
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "SIGTERM to rank 3, whose end the controller knew")) << r.explain();
}

TEST(SimChecks, WithAbortOffASignalToAnUntouchedRankIsCaught) {
  // Abort off: rank 3's failure must leave the others alone; the planted bug SIGTERMs rank 0.
  scenario s = failing_job();
  s.control.abort_on_failure = false;
  bool done = false;
  const auto r = run_with(s, [&](std::vector<pm::action>& actions) {
    if (done || first_of<pm::emit>(actions) == nullptr) return;
    actions.push_back(pm::signal_ranks{0, {0}, SIGTERM});
    done = true;
  });
  ASSERT_TRUE(done) << "no emit action to plant the bug at";
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r,
                          "with abort off, rank 0, untouched by any fault, ended exited (was "
                          "killed by SIGTERM)"))
      << r.explain();
}

TEST(SimChecks, ATimeoutWithoutATimeoutSetIsCaught) {
  scenario s = failing_job();
  s.scripts.clear();
  const auto r = run_with(s, [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) {
      f->report.cause = pm::cause_kind::timeout;
      f->report.exit_code = pm::exit_codes::timeout;
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the job timed out without a timeout set")) << r.explain();
}

TEST(SimChecks, ATimeoutReportedAfterAnEarlierFailureIsCaught) {
  scenario s = failing_job();
  s.control.timeout = std::chrono::seconds(5);
  const auto r = run_with(s, [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) {
      f->report.cause = pm::cause_kind::timeout;
      f->report.exit_code = pm::exit_codes::timeout;
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the job reported a timeout, but rank_failed (rank 3) came first"))
      << r.explain();
}

TEST(SimChecks, ALauncherSignalThatIsNotTheCauseIsCaught) {
  // SIGINT to the launcher at 1 s, nothing else fails; the report blames a rank instead.
  scenario s = failing_job();
  s.scripts.clear();
  s.faults.push_back(pm::sim::parse_fault("launcher-signal:INT@1s"));
  const auto r = run_with(s, [](std::vector<pm::action>& actions) {
    if (auto* f = first_of<pm::finish>(actions)) {
      f->report.cause = pm::cause_kind::rank_failed;
      f->report.exit_code = 1;
    }
  });
  EXPECT_EQ(r.outcome, verdict::correctness) << r.explain();
  EXPECT_TRUE(has_problem(r, "the launcher's SIGINT came first, but the report says rank_failed"))
      << r.explain();
}

}  // namespace
