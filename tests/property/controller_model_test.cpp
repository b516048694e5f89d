// The controller under arbitrary legal interleavings: a driver model feeds events chosen by a
// generated list of choices (so failures shrink), carries out the controller's actions as a real
// world would (ranks obey SIGTERM unless they ignore it, SIGKILL always works), and checks the
// contract after every run.
#include <signal.h>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "pm/controller.hpp"

namespace {

using namespace std::chrono_literals;

struct world {
  pm::rank_map map;
  std::vector<int> choices;
  std::size_t next = 0;
  int pick(int n) { return n <= 1 ? 0 : (next < choices.size() ? choices[next++] : 0) % n; }
};

struct rank_model {
  enum { pending, running, ended } state = pending;
  int streams = 0;
  bool ignores_term = false;
  bool termed = false, killed = false;
};

std::string describe(const pm::action& a) {
  std::ostringstream o;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, pm::spawn>)
          o << "spawn " << x.host << " n=" << x.ranks.size();
        else if constexpr (std::is_same_v<T, pm::signal_ranks>) {
          o << "signal " << x.signo << " host " << x.host << ":";
          for (auto r : x.ranks) o << " " << r;
        } else if constexpr (std::is_same_v<T, pm::start_timer>)
          o << "timer " << x.timer;
        else if constexpr (std::is_same_v<T, pm::cancel_timer>)
          o << "cancel " << x.timer;
        else if constexpr (std::is_same_v<T, pm::emit>)
          o << "emit " << x.line;
        else if constexpr (std::is_same_v<T, pm::clear_leftovers>)
          o << "clear leftovers";
        else
          o << "finish " << x.report.exit_code;
      },
      a);
  return o.str();
}

struct run_result {
  std::vector<pm::event> events;
  std::vector<std::string> actions;  // described, in order, with "|" between events
  int finishes = 0;
  bool actions_after_finish = false;
  std::optional<pm::job_report> report;
};

}  // namespace

RC_GTEST_PROP(ControllerModel, ContractHoldsUnderAnyInterleaving, ()) {
  const auto hosts = *rc::gen::inRange<std::uint32_t>(1, 5);
  const auto slots = *rc::gen::inRange<std::uint32_t>(1, 4);
  pm::controller_options options;
  options.abort_on_failure = *rc::gen::arbitrary<bool>();
  options.streams_per_rank = *rc::gen::inRange<std::uint8_t>(0, 3);
  options.kill_grace = 1000ms;
  options.timeout = *rc::gen::element(0ms, 5000ms);
  const auto choices = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 1000));

  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  for (std::uint32_t h = 0; h < hosts; ++h)
    a.hosts.push_back(pm::host{"h" + std::to_string(h), slots});
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, hosts * slots, {}, {}});
  world w{pm::map_job(j, a), choices};
  const auto n = w.map.size();

  std::vector<rank_model> ranks(n);
  for (auto& r : ranks) r.ignores_term = w.pick(4) == 0;
  std::set<std::uint64_t> timers_started, timers_cancelled;
  pm::controller ctl(w.map, options);
  run_result run;
  pm::job_time now{0};
  std::optional<int> first_failure_code;  // as the model sees the first failure
  bool signalled_launcher = false, kill_allowed = false, any_signal = false;

  auto feed = [&](pm::event e) {
    std::vector<pm::action> out;
    now += 1ms;
    run.events.push_back(e);
    ctl.handle(now, e, out);
    for (auto& act : out) {
      run.actions.push_back(describe(act));
      if (run.finishes > 0) run.actions_after_finish = true;
      if (auto* f = std::get_if<pm::finish>(&act)) {
        ++run.finishes;
        run.report = f->report;
      } else if (auto* t = std::get_if<pm::start_timer>(&act)) {
        timers_started.insert(t->timer);
      } else if (auto* c = std::get_if<pm::cancel_timer>(&act)) {
        timers_cancelled.insert(c->timer);
      } else if (auto* s = std::get_if<pm::signal_ranks>(&act)) {
        any_signal = true;
        for (auto r : s->ranks) {
          RC_ASSERT(r < n);
          if (s->signo == SIGTERM || s->signo == SIGINT) ranks[r].termed = true;
          if (s->signo == SIGKILL) {
            RC_ASSERT(kill_allowed);  // SIGKILL only after the grace (or a second interrupt)
            ranks[r].killed = true;
          }
        }
      }
    }
    run.actions.push_back("|");
  };

  feed(pm::job_start{});
  for (int step = 0; step < 4000 && run.finishes == 0; ++step) {
    // Candidate events in this state.
    std::vector<std::function<void()>> moves;
    for (std::uint32_t r = 0; r < n; ++r) {
      auto& m = ranks[r];
      if (m.state == rank_model::pending) {
        moves.push_back([&, r] {
          ranks[r].state = rank_model::running;
          ranks[r].streams = options.streams_per_rank;
          feed(pm::rank_started{r, 100 + r});
        });
        if (w.pick(8) == 0) {
          moves.push_back([&, r] {
            ranks[r].state = rank_model::ended;
            if (!first_failure_code) first_failure_code = 127;
            feed(pm::rank_spawn_failed{r, 127, "not found"});
          });
        }
      } else if (m.state == rank_model::running) {
        if (m.streams > 0) {
          moves.push_back([&, r] {
            --ranks[r].streams;
            feed(pm::stream_closed{
                r, ranks[r].streams % 2 ? pm::stream_kind::err : pm::stream_kind::out, 1});
          });
        }
        const bool must_die = m.killed || (m.termed && !m.ignores_term);
        moves.push_back([&, r, must_die] {
          ranks[r].state = rank_model::ended;
          pm::exit_status st = ranks[r].killed   ? pm::exit_status::signaled(SIGKILL)
                               : must_die        ? pm::exit_status::signaled(SIGTERM)
                               : w.pick(5) == 0  ? pm::exit_status::exited(1 + w.pick(100))
                               : w.pick(20) == 0 ? pm::exit_status::signaled(SIGSEGV)
                                                 : pm::exit_status::exited(0);
          const bool aborting = options.abort_on_failure
                                    ? first_failure_code.has_value() || signalled_launcher
                                    : signalled_launcher;
          if (!st.success() && !aborting && !first_failure_code)
            first_failure_code = st.shell_code();
          feed(pm::rank_exited{r, st});
        });
      } else if (m.streams > 0) {  // output closing after the exit
        moves.push_back([&, r] {
          --ranks[r].streams;
          feed(pm::stream_closed{
              r, ranks[r].streams % 2 ? pm::stream_kind::err : pm::stream_kind::out, 0});
        });
      }
    }
    // Timers: any started one may fire, also cancelled or already fired ones.
    for (auto t : timers_started) {
      moves.push_back([&, t] {
        if (!timers_cancelled.count(t)) kill_allowed = true;  // the grace (or timeout) ran out
        feed(pm::timer_fired{t});
      });
    }
    if (w.pick(50) == 0) {
      moves.push_back([&] {
        // An interrupt while the job is already aborting escalates to SIGKILL.
        if (signalled_launcher || (options.abort_on_failure && first_failure_code))
          kill_allowed = true;
        signalled_launcher = true;
        feed(pm::signal_received{SIGINT});
      });
    }
    if (moves.empty()) break;
    moves[static_cast<std::size_t>(w.pick(static_cast<int>(moves.size())))]();
  }

  RC_CLASSIFY(options.abort_on_failure, "abort on");
  RC_CLASSIFY(first_failure_code.has_value(), "a rank failed");
  RC_CLASSIFY(signalled_launcher, "launcher interrupted");
  RC_CLASSIFY(kill_allowed, "grace expired");

  // Liveness: the job always finishes, exactly once, and nothing follows.
  RC_ASSERT(run.finishes == 1);
  RC_ASSERT(!run.actions_after_finish);
  RC_ASSERT(ctl.finished());
  for (const auto& r : run.report->ranks)
    RC_ASSERT(r.state != pm::rank_state::pending && r.state != pm::rank_state::running);

  // The exit code follows the rule.
  if (!first_failure_code && !signalled_launcher) {
    RC_ASSERT(run.report->exit_code == 0 || run.report->cause == pm::cause_kind::timeout);
  }
  if (first_failure_code && run.report->cause != pm::cause_kind::signal &&
      run.report->cause != pm::cause_kind::timeout) {
    RC_ASSERT(run.report->exit_code == *first_failure_code);
  }
  // Without abort and without interruption, nobody is signalled.
  // (kill_allowed: a live timer fired, which in this mode can only be the timeout.)
  if (!options.abort_on_failure && !signalled_launcher && !kill_allowed) {
    RC_ASSERT(!any_signal);
  }

  // Determinism: the same events give the same actions.
  pm::controller again(w.map, options);
  std::vector<std::string> replay;
  pm::job_time t{0};
  for (const auto& e : run.events) {
    std::vector<pm::action> out;
    t += 1ms;
    again.handle(t, e, out);
    for (auto& act : out) replay.push_back(describe(act));
    replay.push_back("|");
  }
  RC_ASSERT(replay == run.actions);
}
