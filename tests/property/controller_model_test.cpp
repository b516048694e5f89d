// The controller under arbitrary legal interleavings. A hand-written driver model plays the world:
// ranks start, write, close their streams, exit with generated statuses (also before their start
// is reported or before their last output), fail to spawn, call abort, obey or ignore SIGTERM;
// hosts are lost; timers fire, also late and twice; the launcher is interrupted; ranks leave
// without finalizing; ranks spawn new jobs (job_spawned: accepted, or refused when ending, empty,
// or naming a bad or lost host), whose ranks then live the same lives; events are duplicated. Which
// move comes next is drawn from a generated list of choices, so that a failure shrinks to a short
// story. The model keeps its own account of the failure rules (what the first failure was, when the
// job aborts, what each rank is owed) and checks every action batch and the final report against
// it; a replay of the same events must give the same actions.
#include <signal.h>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <set>
#include <sstream>

#include "pm/controller.hpp"
#include "support/describe_action.hpp"

namespace {

using namespace std::chrono_literals;

enum class behaviour : std::uint8_t { succeed, fail, crash, spawn_fail, call_abort, unfinalized };

// Ranks of spawned jobs live the same lives, drawn with the same weights.
behaviour behaviour_of(std::uint32_t x) {
  static constexpr behaviour table[] = {
      behaviour::succeed,    behaviour::succeed,    behaviour::succeed, behaviour::succeed,
      behaviour::succeed,    behaviour::succeed,    behaviour::succeed, behaviour::succeed,
      behaviour::succeed,    behaviour::succeed,    behaviour::succeed, behaviour::succeed,
      behaviour::fail,       behaviour::fail,       behaviour::crash,   behaviour::spawn_fail,
      behaviour::call_abort, behaviour::unfinalized};
  return table[x % std::size(table)];
}

// Every detail of a finish's report, so that a replay differing anywhere shows.
std::string describe(const pm::action& a) {
  return pm::test::describe(a, pm::test::report_detail::full);
}

std::string describe_event(const pm::event& e) {
  std::ostringstream o;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, pm::job_start>)
          o << "job_start";
        else if constexpr (std::is_same_v<T, pm::rank_started>)
          o << "rank_started " << x.rank;
        else if constexpr (std::is_same_v<T, pm::rank_spawn_failed>)
          o << "rank_spawn_failed " << x.rank;
        else if constexpr (std::is_same_v<T, pm::stream_closed>)
          o << "stream_closed " << x.rank << " " << static_cast<int>(x.stream);
        else if constexpr (std::is_same_v<T, pm::rank_exited>)
          o << "rank_exited " << x.rank << " " << x.status.describe();
        else if constexpr (std::is_same_v<T, pm::host_lost>)
          o << "host_lost " << x.host;
        else if constexpr (std::is_same_v<T, pm::timer_fired>)
          o << "timer_fired " << x.timer;
        else if constexpr (std::is_same_v<T, pm::signal_received>)
          o << "signal_received " << x.signo;
        else if constexpr (std::is_same_v<T, pm::rank_unfinalized>)
          o << "rank_unfinalized " << x.rank << " " << x.status.describe();
        else if constexpr (std::is_same_v<T, pm::job_spawned>)
          o << "job_spawned " << pm::test::ranks_text(x.hosts);
        else if constexpr (std::is_same_v<T, pm::spawn_withdrawn>)
          o << "spawn_withdrawn " << pm::test::ranks_text(x.ranks);
        else if constexpr (std::is_same_v<T, pm::job_stalled>)
          o << "job_stalled";
        else
          o << "abort_requested " << (x.rank ? static_cast<std::int64_t>(*x.rank) : -1) << " "
            << x.status;
      },
      e);
  return o.str();
}

// The world's view of one rank, and what the controller owes it.
struct rank_model {
  enum { pending, running, ended } state = pending;  // as reported to the controller
  behaviour does = behaviour::succeed;
  bool ignores_term = false;
  std::uint8_t open = 0;    // stream bits not yet reported closed
  bool late_start = false;  // its exit was reported first; the start report is still due
  bool called_abort = false;
  bool abort_accepted = false;
  std::uint32_t host = 0;               // allocation host
  std::uint32_t job = 0, job_rank = 0;  // 0: the first job; k: the k-th spawned one
  std::optional<pm::exit_status> exit;  // its own exit, as reported (not lost, not spawn-failed)
  bool unfinalized_sent = false;
  bool exit_report_due = false;  // its notice came first (the agent's order); its exit follows
  bool failed_by_notice = false;
  bool got_term = false, got_kill = false;
  int term_signo = 0;
  std::uint64_t pid = 0;
};

// Choices first, then a fixed PRNG (splitmix64) once they run out, so that every run ends.
struct chooser {
  std::vector<std::uint32_t> choices;
  std::uint64_t seed;
  std::size_t next = 0;
  std::uint32_t pick(std::uint32_t n) {
    if (n <= 1) return 0;
    if (next < choices.size()) return choices[next++] % n;
    seed += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<std::uint32_t>((z ^ (z >> 31)) % n);
  }
};

}  // namespace

RC_GTEST_PROP(ControllerModel, ContractHoldsUnderAnyInterleaving, ()) {
  const auto hosts = *rc::gen::inRange<std::uint32_t>(1, 7);
  const auto slots = *rc::gen::inRange<std::uint32_t>(1, 5);
  const auto np = *rc::gen::inRange<std::uint32_t>(1, hosts * slots + 1);
  const auto by = *rc::gen::element(pm::map_by::slot, pm::map_by::node);
  pm::controller_options options;
  options.abort_on_failure = *rc::gen::arbitrary<bool>();
  options.notify_failures = *rc::gen::arbitrary<bool>();
  // Survivors are told of failures and of the job's end only where the abort policy is off.
  const bool notifying = options.notify_failures && !options.abort_on_failure;
  options.streams_per_rank = *rc::gen::inRange<std::uint8_t>(0, 3);
  options.kill_grace = 1000ms;
  options.timeout = *rc::gen::element(0ms, 5000ms);
  const auto behaviours = *rc::gen::container<std::vector<behaviour>>(
      np, rc::gen::weightedElement<behaviour>({{12, behaviour::succeed},
                                               {2, behaviour::fail},
                                               {1, behaviour::crash},
                                               {1, behaviour::spawn_fail},
                                               {1, behaviour::call_abort},
                                               {1, behaviour::unfinalized}}));
  const auto ignores = *rc::gen::container<std::vector<bool>>(
      np, rc::gen::map(rc::gen::inRange(0, 4), [](int x) { return x == 0; }));
  chooser w{*rc::gen::container<std::vector<std::uint32_t>>(rc::gen::arbitrary<std::uint32_t>()),
            *rc::gen::arbitrary<std::uint64_t>()};

  pm::allocation alloc;
  alloc.source = pm::allocation_source::host_list;
  for (std::uint32_t h = 0; h < hosts; ++h)
    alloc.hosts.push_back(pm::host{"h" + std::to_string(h), slots});
  pm::job_spec job;
  job.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  job.mapping.by = by;
  const auto map = pm::map_job(job, alloc);
  RC_ASSERT(map.size() == np);
  const std::uint8_t expected_streams = options.streams_per_rank >= 2   ? 3
                                        : options.streams_per_rank == 1 ? 1
                                                                        : 0;

  std::vector<rank_model> ranks(np);
  for (std::uint32_t r = 0; r < np; ++r) {
    ranks[r].does = behaviours[r];
    ranks[r].ignores_term = ignores[r];
    ranks[r].host = map.at(r).host;
    ranks[r].job_rank = r;
  }
  std::uint32_t jobs = 1;
  auto size = [&] { return static_cast<std::uint32_t>(ranks.size()); };
  std::vector<bool> host_lost(hosts, false);

  // The model's account of the rules.
  bool aborting = false, kill_allowed = false, ever_signalled_to_abort = false;
  int abort_signo = 0;
  std::uint32_t interrupts = 0;
  pm::cause_kind cause = pm::cause_kind::none;
  int exit_code = 0, cause_signal = 0;
  std::optional<std::uint32_t> cause_rank, cause_host;
  std::uint32_t failed = 0, killed = 0;
  std::uint64_t timeout_timer = 0;
  std::set<std::uint64_t> timers_started, timers_done;  // done: fired or cancelled
  bool saw_late_timer = false, saw_duplicate = false, saw_exit_first = false,
       saw_output_after_exit = false, saw_host_lost = false, saw_grace = false,
       saw_unfinalized = false, saw_notice_first = false, saw_spawned_job = false,
       saw_refused_spawn = false;

  auto not_ended = [&] {
    std::uint32_t n = 0;
    for (const auto& r : ranks) n += r.state != rank_model::ended;
    return n;
  };
  auto decide = [&](pm::cause_kind k, int code, std::optional<std::uint32_t> rank,
                    std::optional<std::uint32_t> host) {
    if (cause != pm::cause_kind::none) return;
    cause = k;
    exit_code = code;
    cause_rank = rank;
    cause_host = host;
  };
  // Expectations for the batch of the event being fed.
  bool began_now = false, kill_now = false, forward_now = false, notify_now = false;
  int forward_signo = 0;
  std::optional<std::uint32_t> started_now;
  std::optional<std::vector<std::string>> spawns_now;  // a job_spawned's batch, exactly
  bool late_timer_now = false;
  auto begin_abort = [&](int signo) {
    aborting = true;
    abort_signo = signo;
    began_now = true;
    if (notifying) notify_now = true;
  };
  auto failure = [&](pm::cause_kind k, int code, std::optional<std::uint32_t> rank,
                     std::uint32_t host, bool force) {
    decide(k, code, rank, host);
    if (notifying) notify_now = true;
    if (options.abort_on_failure || force) begin_abort(SIGTERM);
  };

  pm::controller ctl(map, options);
  std::vector<pm::event> events;
  std::vector<std::string> described;
  std::vector<std::string> lines;
  int finishes = 0;
  std::optional<pm::job_report> report;
  pm::job_time now{0};
  std::set<std::uint32_t> spawned;
  std::vector<std::string> trace;

  auto feed = [&](const pm::event& e) {
    std::vector<pm::action> out;
    now += 1ms;
    events.push_back(e);
    trace.push_back("<- " + describe_event(e));
    ctl.handle(now, e, out);
    std::set<std::pair<std::uint32_t, int>> got;  // (rank, signal) in this batch
    std::set<std::uint32_t> told;                 // hosts notified in this batch
    bool signalled = false;
    if (late_timer_now) RC_ASSERT(out.empty());
    for (const auto& act : out) {
      described.push_back(describe(act));
      trace.push_back("   -> " + described.back().substr(0, 200));
      RC_ASSERT(finishes == 0);  // nothing after the finish
      if (const auto* sp = std::get_if<pm::spawn>(&act)) {
        RC_ASSERT(std::holds_alternative<pm::job_start>(e) ||
                  std::holds_alternative<pm::job_spawned>(e));
        RC_ASSERT(!sp->ranks.empty());
        for (auto r : sp->ranks) {
          RC_ASSERT(r < size());
          RC_ASSERT(ranks[r].host == sp->host);
          RC_ASSERT(spawned.insert(r).second);  // each rank once
        }
      } else if (const auto* n = std::get_if<pm::notify_ranks>(&act)) {
        RC_ASSERT(notify_now);  // only a failure or the job's end, only with the policy off
        RC_ASSERT(!signalled);  // before the stop sequence
        RC_ASSERT(told.insert(n->host).second);  // once per host
        RC_ASSERT(!n->line.empty());
      } else if (const auto* s = std::get_if<pm::signal_ranks>(&act)) {
        signalled = true;
        RC_ASSERT(!s->ranks.empty());
        if (s->signo != SIGUSR1) RC_ASSERT(aborting);  // only an abort signals, besides forwarding
        for (auto r : s->ranks) {
          RC_ASSERT(r < size());
          RC_ASSERT(ranks[r].host == s->host);
          RC_ASSERT(ranks[r].state == rank_model::running);  // started and not known to be over
          if (s->signo == SIGKILL) {
            RC_ASSERT(kill_allowed);  // only after the grace or a second interrupt
            ranks[r].got_kill = true;
          } else if (s->signo == SIGTERM || s->signo == SIGINT) {
            RC_ASSERT(got.count({r, SIGCONT}) == 1u);  // SIGCONT first, so stopped ranks see it
            ranks[r].got_term = true;
            ranks[r].term_signo = s->signo;
            ever_signalled_to_abort = true;
          }
          got.insert({r, s->signo});
        }
      } else if (const auto* t = std::get_if<pm::start_timer>(&act)) {
        RC_ASSERT(timers_started.insert(t->timer).second);  // ids are unique
        RC_ASSERT(t->timer != 0u);
        if (std::holds_alternative<pm::job_start>(e)) {
          RC_ASSERT(t->after == options.timeout);
          timeout_timer = t->timer;
        } else {
          RC_ASSERT(t->after == options.kill_grace);
          RC_ASSERT(aborting);
        }
      } else if (const auto* c = std::get_if<pm::cancel_timer>(&act)) {
        RC_ASSERT(timers_started.count(c->timer) == 1u);
        RC_ASSERT(timers_done.insert(c->timer).second);  // only a running timer is cancelled
      } else if (const auto* m = std::get_if<pm::emit>(&act)) {
        lines.push_back(m->line);
      } else if (const auto* f = std::get_if<pm::finish>(&act)) {
        ++finishes;
        report = f->report;
        // Every timer fired or was cancelled before the finish.
        RC_ASSERT(timers_done == timers_started);
      }
    }
    if (std::holds_alternative<pm::job_spawned>(e)) {
      // Accepted: exactly one spawn per host of the new job, in first-appearance order, ranks
      // ascending, and nothing else; refused: nothing at all.
      std::vector<std::string> got_text;
      for (const auto& act : out) got_text.push_back(pm::test::describe(act));
      RC_ASSERT(got_text == spawns_now.value_or(std::vector<std::string>{}));
      RC_ASSERT(ctl.size() == size());
      RC_ASSERT(ctl.jobs() == jobs);
    }
    spawns_now.reset();
    for (std::uint32_t r = 0; r < size(); ++r) {
      if (ranks[r].state != rank_model::running) continue;
      // The event that begins the abort signals every running rank: SIGCONT, then the signal.
      if (began_now) {
        RC_ASSERT(got.count({r, SIGCONT}) == 1u);
        RC_ASSERT(got.count({r, abort_signo}) == 1u);
      }
      if (forward_now) RC_ASSERT(got.count({r, forward_signo}) == 1u);
      if (kill_now) RC_ASSERT(got.count({r, SIGKILL}) == 1u);
    }
    // A rank that starts during the abort gets what the others got, at once.
    if (started_now && aborting) {
      if (kill_allowed)
        RC_ASSERT(got.count({*started_now, SIGKILL}) == 1u);
      else
        RC_ASSERT(got.count({*started_now, abort_signo}) == 1u);
    }
    if (began_now) RC_ASSERT(!lines.empty());
    if (notify_now) {
      // Exactly the hosts with ranks not ended (as reported to the controller).
      std::set<std::uint32_t> alive;
      for (std::uint32_t r = 0; r < size(); ++r) {
        if (ranks[r].state != rank_model::ended) alive.insert(ranks[r].host);
      }
      RC_ASSERT(told == alive);
    }
    RC_ASSERT(notify_now || told.empty());
    began_now = kill_now = forward_now = late_timer_now = notify_now = false;
    started_now.reset();
  };

  feed(pm::job_start{});
  RC_ASSERT(spawned.size() == np);

  std::vector<std::function<void()>> moves;
  for (int step = 0; step < 20000 && finishes == 0; ++step) {
    moves.clear();
    for (std::uint32_t r = 0; r < size(); ++r) {
      auto& m = ranks[r];
      auto close_move = [&, r] {
        auto& x = ranks[r];
        const bool err = (x.open & 2) != 0 && ((x.open & 1) == 0 || w.pick(2) == 1);
        x.open = static_cast<std::uint8_t>(x.open & ~(err ? 2 : 1));
        if (x.state == rank_model::ended) saw_output_after_exit = true;
        feed(pm::stream_closed{r, err ? pm::stream_kind::err : pm::stream_kind::out, 1});
      };
      switch (m.state) {
        case rank_model::pending:
          if (m.does == behaviour::spawn_fail) {
            moves.push_back([&, r] {
              ranks[r].state = rank_model::ended;
              ++failed;
              if (!aborting) failure(pm::cause_kind::spawn_failed, 127, r, ranks[r].host, false);
              feed(pm::rank_spawn_failed{r, 127, "not found"});
            });
            break;
          }
          moves.push_back([&, r] {
            auto& x = ranks[r];
            x.state = rank_model::running;
            x.open = expected_streams;
            x.pid = 100 + r;
            started_now = r;
            feed(pm::rank_started{r, static_cast<std::int64_t>(x.pid)});
          });
          if ((m.does == behaviour::succeed || m.does == behaviour::fail) && w.pick(4) == 0) {
            // It ran and ended before its start was reported.
            moves.push_back([&, r] {
              auto& x = ranks[r];
              x.state = rank_model::ended;
              x.open = expected_streams;
              x.late_start = true;
              saw_exit_first = true;
              const auto st = x.does == behaviour::fail ? pm::exit_status::exited(3)
                                                        : pm::exit_status::exited(0);
              x.exit = st;
              if (aborting) {
                ++killed;
              } else if (!st.success()) {
                ++failed;
                failure(pm::cause_kind::rank_failed, st.shell_code(), r, ranks[r].host, false);
              }
              feed(pm::rank_exited{r, st});
            });
          }
          break;
        case rank_model::running: {
          if (m.open != 0) moves.push_back(close_move);
          if (m.does == behaviour::call_abort && !m.called_abort) {
            moves.push_back([&, r] {
              auto& x = ranks[r];
              x.called_abort = true;
              const int status = static_cast<int>(w.pick(3));  // 0 becomes 1
              if (!aborting) {
                x.abort_accepted = true;
                ++failed;
                failure(pm::cause_kind::abort_requested, status >= 1 && status <= 255 ? status : 1,
                        r, ranks[r].host, true);
              }
              feed(pm::abort_requested{r, status, "model"});
            });
          }
          if (m.does == behaviour::unfinalized && !m.got_term && !m.got_kill) {
            // The agent's order: the notice comes with the process's own end, its exit report
            // after it. The notice ends the rank as failed; the report adds nothing.
            moves.push_back([&, r] {
              auto& x = ranks[r];
              const auto st = w.pick(2) == 0 ? pm::exit_status::exited(0)
                                             : pm::exit_status::exited(1 + w.pick(100));
              x.state = rank_model::ended;
              x.exit = st;
              x.unfinalized_sent = true;
              x.exit_report_due = true;
              saw_unfinalized = saw_notice_first = true;
              if (!aborting) {
                ++failed;
                x.failed_by_notice = true;
                const int code = st.shell_code();
                failure(pm::cause_kind::rank_failed, code != 0 ? code : 1, r, x.host, true);
              }
              feed(pm::rank_unfinalized{r, st});
            });
          }
          // After calling abort a rank waits to be killed; a rank ignoring SIGTERM may still
          // end by itself.
          const bool waits = m.called_abort && !m.got_kill && (!m.got_term || m.ignores_term);
          if (!waits) {
            moves.push_back([&, r] {
              auto& x = ranks[r];
              pm::exit_status st =
                  x.got_kill                      ? pm::exit_status::signaled(SIGKILL)
                  : x.got_term && !x.ignores_term ? pm::exit_status::signaled(x.term_signo)
                  : x.does == behaviour::fail     ? pm::exit_status::exited(1 + w.pick(100))
                  : x.does == behaviour::crash    ? pm::exit_status::signaled(SIGSEGV)
                                                  : pm::exit_status::exited(0);
              x.state = rank_model::ended;
              x.exit = st;
              if (x.abort_accepted) {
                // failed already, when it called abort
              } else if (aborting) {
                ++killed;
              } else if (!st.success()) {
                ++failed;
                failure(pm::cause_kind::rank_failed, st.shell_code(), r, ranks[r].host, false);
              }
              feed(pm::rank_exited{r, st});
            });
          }
          break;
        }
        case rank_model::ended:
          if (m.open != 0) moves.push_back(close_move);
          if (m.does == behaviour::unfinalized && m.exit && !m.unfinalized_sent) {
            // It had called PMIx_Init and ended without PMIx_Finalize: the job ends, whatever the
            // policy, unless it is ending already.
            moves.push_back([&, r] {
              auto& x = ranks[r];
              x.unfinalized_sent = true;
              saw_unfinalized = true;
              const int code = x.exit->shell_code();
              if (!aborting) {
                if (x.exit->success()) ++failed;  // a failed exit was counted already
                failure(pm::cause_kind::rank_failed, code != 0 ? code : 1, r, x.host, true);
              }
              feed(pm::rank_unfinalized{r, *x.exit});
            });
          }
          if (m.exit_report_due) {
            moves.push_back([&, r] {
              auto& x = ranks[r];
              x.exit_report_due = false;
              // A notice that came while the job was ending already was not heard: the exit is
              // one of the abort's ends, as any other.
              if (!x.failed_by_notice && aborting) ++killed;
              feed(pm::rank_exited{r, *x.exit});
            });
          }
          if (m.late_start) {
            moves.push_back([&, r] {
              ranks[r].late_start = false;
              feed(pm::rank_started{r, 100 + r});  // ignored, but for the pid
            });
          }
          break;
      }
    }
    // Timers, live ones at any time, also cancelled and fired ones now and then.
    const bool late_fires = w.pick(3) == 0;
    for (auto t : timers_started) {
      // The timeout fires rarely, so that most jobs end otherwise; the grace timer any time.
      if (t == timeout_timer && timers_done.count(t) == 0 && w.pick(6) != 0) continue;
      if (late_fires || timers_done.count(t) == 0) {
        moves.push_back([&, t] {
          if (timers_done.count(t)) {
            saw_late_timer = late_timer_now = true;
          } else {
            timers_done.insert(t);
            if (t == timeout_timer) {
              if (!aborting && not_ended() > 0) {
                decide(pm::cause_kind::timeout, pm::exit_codes::timeout, std::nullopt,
                       std::nullopt);
                begin_abort(SIGTERM);
              }
            } else {
              saw_grace = true;
              kill_allowed = kill_now = true;
            }
          }
          feed(pm::timer_fired{t});
        });
      }
    }
    if (w.pick(15) == 0) {
      const auto h = w.pick(hosts);
      bool used = false;
      for (const auto& x : ranks) used = used || x.host == h;
      if (!host_lost[h] && used) {
        moves.push_back([&, h] {
          host_lost[h] = true;
          saw_host_lost = true;
          std::uint32_t lost = 0;
          std::optional<std::uint32_t> first;           // the report names its lowest lost rank
          for (std::uint32_t r = 0; r < size(); ++r) {  // ascending: the report's order too
            auto& x = ranks[r];
            if (x.host != h) continue;
            x.open = 0;
            if (x.state != rank_model::ended) {
              x.state = rank_model::ended;
              if (!first) first = r;
              ++lost;
              if (!x.abort_accepted) ++failed;  // a rank counts once
            }
          }
          if (lost > 0 && !aborting)
            failure(pm::cause_kind::host_lost, pm::exit_codes::host_lost, first, h, false);
          feed(pm::host_lost{h, "model"});
        });
      }
    }
    if (w.pick(25) == 0) {
      moves.push_back([&] {
        ++interrupts;
        if (aborting && interrupts >= 2) {
          kill_allowed = kill_now = true;
        } else if (aborting) {
          forward_now = true;
          forward_signo = SIGINT;
        } else {
          if (cause == pm::cause_kind::none) cause_signal = SIGINT;
          decide(pm::cause_kind::signal, 128 + SIGINT, std::nullopt, std::nullopt);
          begin_abort(SIGINT);
        }
        feed(pm::signal_received{SIGINT});
      });
    }
    // A rank spawns a job: mostly on good hosts, now and then an empty list or a bad host. The
    // model stays small: at most 4 spawned jobs of at most 3 ranks.
    if (w.pick(5) == 0 && jobs <= 4) {
      moves.push_back([&] {
        std::vector<std::uint32_t> on(w.pick(4));
        for (auto& h : on) h = w.pick(hosts * 8 + 1) / 8;  // == hosts: outside the allocation
        bool accepted = !aborting && not_ended() > 0 && !on.empty();
        for (auto h : on) accepted = accepted && h < hosts && !host_lost[h];
        if (accepted) {
          saw_spawned_job = true;
          std::vector<std::string> expect;
          std::vector<std::uint32_t> order;
          std::vector<std::vector<std::uint32_t>> batch(hosts);
          for (std::uint32_t i = 0; i < on.size(); ++i) {
            rank_model x;
            x.does = behaviour_of(w.pick(1000));
            x.ignores_term = w.pick(4) == 0;
            x.host = on[i];
            x.job = jobs;
            x.job_rank = i;
            if (batch[on[i]].empty()) order.push_back(on[i]);
            batch[on[i]].push_back(size());
            ranks.push_back(x);
          }
          for (auto h : order)
            expect.push_back("spawn " + std::to_string(h) + " " + pm::test::ranks_text(batch[h]));
          spawns_now = expect;
          ++jobs;
        } else {
          saw_refused_spawn = true;
        }
        feed(pm::job_spawned{on});
      });
    }
    if (w.pick(60) == 0) {
      moves.push_back([&] {
        forward_now = true;
        forward_signo = SIGUSR1;
        feed(pm::signal_received{SIGUSR1});
      });
    }
    // Duplicates of earlier reports, and reports about ranks that do not exist: no effect.
    if (w.pick(5) == 0 && events.size() > 1) {
      moves.push_back([&] {
        const auto& old = events[w.pick(static_cast<std::uint32_t>(events.size()))];
        if (std::holds_alternative<pm::signal_received>(old) ||
            std::holds_alternative<pm::abort_requested>(old) ||
            std::holds_alternative<pm::timer_fired>(old) ||
            std::holds_alternative<pm::job_spawned>(old))
          return;  // those are not duplicates but new requests
        saw_duplicate = true;
        const auto copy = old;
        const auto before = described.size();
        feed(copy);
        RC_ASSERT(described.size() == before);
      });
      moves.push_back([&] {
        const auto before = described.size();
        // Far beyond any process a spawn could add, so that a later duplicate stays unknown.
        feed(pm::rank_exited{1000000 + w.pick(3), pm::exit_status::exited(1)});
        feed(pm::stream_closed{1000000, pm::stream_kind::out, 0});
        feed(pm::rank_unfinalized{1000000, pm::exit_status::exited(0)});
        feed(pm::host_lost{hosts + 1, "nowhere"});
        RC_ASSERT(described.size() == before);
      });
    }
    if (moves.empty()) break;
    moves[w.pick(static_cast<std::uint32_t>(moves.size()))]();
  }

  RC_CLASSIFY(cause == pm::cause_kind::none, "all succeeded");
  RC_CLASSIFY(options.abort_on_failure, "abort on");
  RC_CLASSIFY(notifying, "survivors told");
  RC_CLASSIFY(cause == pm::cause_kind::rank_failed, "rank failed");
  RC_CLASSIFY(cause == pm::cause_kind::spawn_failed, "spawn failed");
  RC_CLASSIFY(cause == pm::cause_kind::abort_requested, "abort called");
  RC_CLASSIFY(cause == pm::cause_kind::host_lost, "host lost first");
  RC_CLASSIFY(cause == pm::cause_kind::signal, "interrupted");
  RC_CLASSIFY(cause == pm::cause_kind::timeout, "timed out");
  RC_CLASSIFY(saw_grace, "grace expired");
  RC_CLASSIFY(saw_late_timer, "late timer");
  RC_CLASSIFY(saw_duplicate, "duplicate event");
  RC_CLASSIFY(saw_exit_first, "exit before start");
  RC_CLASSIFY(saw_output_after_exit, "output after exit");
  RC_CLASSIFY(saw_host_lost, "host lost");
  RC_CLASSIFY(saw_unfinalized, "unfinalized");
  RC_CLASSIFY(saw_notice_first, "unfinalized notice before the exit");
  RC_CLASSIFY(saw_spawned_job, "spawned job");
  RC_CLASSIFY(saw_refused_spawn, "refused spawn");

  // Liveness: the job finishes exactly once; nothing follows.
  for (const auto& l : trace) RC_LOG() << l << "\n";  // shown when the property fails
  RC_ASSERT(finishes == 1);
  RC_ASSERT(ctl.finished());
  {
    const auto before = described.size();
    feed(pm::signal_received{SIGINT});
    feed(pm::rank_exited{0, pm::exit_status::exited(9)});
    RC_ASSERT(described.size() == before);
  }

  // Every rank ended; the outcome follows the first-failure rule.
  RC_ASSERT(report->ranks.size() == size());
  for (std::uint32_t p = 0; p < size(); ++p) {
    const auto& r = report->ranks[p];
    RC_ASSERT(r.state != pm::rank_state::pending && r.state != pm::rank_state::running);
    RC_ASSERT(r.rank == p);
    RC_ASSERT(r.job == ranks[p].job);
    RC_ASSERT(r.job_rank == ranks[p].job_rank);
    RC_ASSERT(r.host == ranks[p].host);
  }
  RC_ASSERT(ctl.jobs() == jobs);
  RC_ASSERT(report->cause == cause);
  RC_ASSERT(report->exit_code == exit_code);
  RC_ASSERT(report->signal == (cause == pm::cause_kind::signal ? cause_signal : 0));
  if (cause == pm::cause_kind::rank_failed || cause == pm::cause_kind::spawn_failed ||
      cause == pm::cause_kind::abort_requested || cause == pm::cause_kind::host_lost) {
    RC_ASSERT(report->failed_rank == cause_rank);
    RC_ASSERT(report->failed_host == cause_host);
  }
  RC_ASSERT(report->ranks_failed == failed);
  RC_ASSERT(report->ranks_killed == killed);
  if (cause != pm::cause_kind::none) {
    RC_ASSERT(!lines.empty());
    RC_ASSERT(lines.front().rfind(report->summary, 0) == 0u);
  } else {
    RC_ASSERT(report->exit_code == 0);
  }

  // Without an abort, nobody was signalled to end, and every rank no fault touched succeeded.
  if (!aborting) {
    RC_ASSERT(!ever_signalled_to_abort);
    for (std::uint32_t r = 0; r < size(); ++r) {
      if (ranks[r].does != behaviour::succeed || host_lost[ranks[r].host]) continue;
      RC_ASSERT(report->ranks[r].state == pm::rank_state::exited);
      RC_ASSERT(report->ranks[r].status == pm::exit_status::exited(0));
    }
  }

  // Determinism: the same events give the same actions.
  pm::controller again(map, options);
  std::vector<std::string> replay;
  pm::job_time t{0};
  for (const auto& e : events) {
    std::vector<pm::action> out;
    t += 1ms;
    again.handle(t, e, out);
    for (const auto& act : out) replay.push_back(describe(act));
  }
  RC_ASSERT(replay == described);
}

// The same contract at the simulator's scale: one failure among 100,000 ranks aborts the rest with
// one batch per host, and each event stays cheap.
TEST(ControllerScale, HundredThousandRanksAbortInOneBatchPerHost) {
  pm::allocation alloc;
  alloc.source = pm::allocation_source::host_list;
  for (std::uint32_t h = 0; h < 12500; ++h)
    alloc.hosts.push_back(pm::host{"n" + std::to_string(h), 8});
  pm::job_spec job;
  job.apps.push_back(pm::app_context{{"app"}, std::nullopt, {}, {}});
  const auto map = pm::map_job(job, alloc);
  pm::controller_options o;
  o.streams_per_rank = 0;
  pm::controller ctl(map, o);
  std::vector<pm::action> out;
  ctl.handle(0ms, pm::job_start{}, out);
  EXPECT_EQ(out.size(), 12500u);
  for (std::uint32_t r = 0; r < map.size(); ++r) ctl.handle(1ms, pm::rank_started{r, r + 1}, out);
  out.clear();
  ctl.handle(2ms, pm::rank_exited{5, pm::exit_status::exited(7)}, out);
  ASSERT_EQ(out.size(), 2u * 12500u + 2u);  // CONT+TERM per host, grace timer, the line
  EXPECT_EQ(std::get<pm::emit>(out.back()).line,
            "rank 5 on n0 exited with code 7; aborting the job (SIGTERM to 99999 ranks)");
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    if (r != 5) ctl.handle(3ms, pm::rank_exited{r, pm::exit_status::signaled(SIGTERM)}, out);
  }
  ASSERT_TRUE(ctl.finished());
  const auto report = std::get<pm::finish>(out.back()).report;
  EXPECT_EQ(report.exit_code, 7);
  EXPECT_EQ(report.ranks_killed, 99999u);
}
