#include "agent/agent.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>

#include "agent/program_lookup.hpp"
#include "agent/rank_env.hpp"
#include "env/compose.hpp"
#include "model/overloaded.hpp"
#include "pm/exit_status.hpp"

// GCC 12 warns "may be used uninitialized" inside std::variant's move constructor when a vector
// of nested variants grows: a false positive (the moved-from alternative is always engaged).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace pm::agent {

namespace {

env_layers layers_of(const process_spec& p) {
  env_layers l;
  if (p.base != nullptr) l.base = *p.base;
  l.profile = p.profile;
  if (p.overrides != nullptr) l.exports = *p.overrides;
  if (p.app_env != nullptr) l.app = *p.app_env;
  l.host = p.pmix;
  return l;
}

enum class phase {
  running,      // serving the launcher
  restarting,   // a restart: the ranks got SIGKILL; sweeping until none is left (docs/agent.md)
  terminating,  // launcher lost: SIGTERM sent, waiting for the grace or the last rank
  clearing,     // SIGKILL sent to every group; sweeping until no child is left
  done,
};

struct rank_entry {
  std::uint32_t rank = 0;
  bool exited = false;
  bool held = false;     // stopped here at its start: the launcher was stopped (^Z)
  std::int64_t pid = 0;  // 0 while spawning
};

// The ranks of one host, sorted by rank: a host has few, they arrive mostly in order, and a flat
// table keeps a simulated 100,000-host cluster's agents small and cache-friendly.
class rank_table {
 public:
  rank_entry* find(std::uint32_t rank) {
    const auto it = lower(rank);
    return it != entries_.end() && it->rank == rank ? &*it : nullptr;
  }
  bool contains(std::uint32_t rank) { return find(rank) != nullptr; }
  void add(std::uint32_t rank) {
    ++running_;
    if (entries_.capacity() == 0) entries_.reserve(8);
    if (entries_.empty() || entries_.back().rank < rank) {
      entries_.push_back(rank_entry{rank, false, 0});
      return;
    }
    entries_.insert(lower(rank), rank_entry{rank, false, 0});
  }
  void erase(std::uint32_t rank) {
    const auto it = lower(rank);
    if (it == entries_.end() || it->rank != rank) return;
    if (!it->exited) --running_;
    entries_.erase(it);
  }
  void mark_exited(rank_entry& r) {
    r.exited = true;
    --running_;
  }
  bool all_exited() const noexcept { return running_ == 0; }
  bool empty() const noexcept { return entries_.empty(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }

 private:
  std::vector<rank_entry>::iterator lower(std::uint32_t rank) {
    return std::lower_bound(entries_.begin(), entries_.end(), rank,
                            [](const rank_entry& e, std::uint32_t r) { return e.rank < r; });
  }
  std::vector<rank_entry> entries_;
  std::size_t running_ = 0;  // entries not exited
};

// --stall-timeout (link::stall_watch): what the agent knows of each live rank's progress.
struct progress {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;
  std::uint64_t cpu_ms = 0;
  std::uint64_t written = 0;
  agent_time progressed{0};         // its last progress, or its start
  std::optional<agent_time> wrote;  // when its written bytes last grew
  char state = '?';
  std::string wchan;
};

struct stall_watch {
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds every{0};
  std::vector<progress> live;  // by rank
  bool looking = false;        // a look is due (its timer runs) or its answer is awaited
  bool quiet = false;          // as the launcher was last told

  std::vector<progress>::iterator lower(std::uint32_t rank) {
    return std::lower_bound(live.begin(), live.end(), rank,
                            [](const progress& p, std::uint32_t r) { return p.rank < r; });
  }
  progress* find(std::uint32_t rank) {
    const auto it = lower(rank);
    return it != live.end() && it->rank == rank ? &*it : nullptr;
  }
};

std::int64_t ms_since(agent_time now, agent_time then) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count();
}

}  // namespace

std::shared_ptr<const link::job_setup> setup_pool::share(link::job_setup&& s) {
  const auto own = s.host;
  for (const auto& held : latest_) {
    s.host = held->host;  // the one field that differs between hosts of the same job
    if (*held == s) return held;
  }
  s.host = own;
  auto made = std::make_shared<const link::job_setup>(std::move(s));
  if (latest_.size() < kept) {
    latest_.push_back(made);
  } else {
    latest_[next_] = made;
    next_ = (next_ + 1) % kept;
  }
  return made;
}

struct agent::state {
  options opts;
  phase ph = phase::running;
  bool channel_open = true;
  bool shutdown_asked = false;
  // The launcher said it is stopped (^Z: link::suspend, until link::resume). It forwards the
  // stop to the ranks it knows of; every rank here is stopped too (one whose start it had not
  // heard of yet, one that starts meanwhile), and continued at the resume (a job "suspended"
  // during its launch ran on).
  bool launcher_stopped = false;
  int exit_code = exit_after_launcher_lost;
  std::uint64_t timer = 0;  // the latest timer started; older ones are ignored
  agent_time now{0};        // of the event being handled
  // From the launcher's job message; shared with other agents where a setup_pool is given.
  std::shared_ptr<const link::job_setup> setup;
  // Spawned jobs' apps, numbered on from the first job's. Each on its own (specs point into
  // them); not a std::deque, which allocates 576 bytes before its first element, in every agent.
  std::vector<std::unique_ptr<link::app_spec>> spawned_apps;
  std::uint32_t jobs = 1;
  std::vector<std::string> base_env;  // the job's shared environment on this host
  rank_table ranks;
  // Restarts in place: the incarnation whose ranks run (0: the first), the one a restart is
  // getting ready for, whether the latest ranks sweep found nothing left (and its port), and
  // how many forwarded output streams of the ranks have not ended yet.
  std::uint32_t incarnation = 0;
  std::uint32_t next_incarnation = 0;
  bool swept_clean = false;
  std::uint16_t restart_port = 0;
  std::size_t streams_open = 0;
  std::unique_ptr<stall_watch> stall;  // with --stall-timeout only
  std::vector<action>* out = nullptr;

  void send_msg(link::message m) {
    if (channel_open) out->push_back(send{std::move(m)});
  }
  void arm(std::chrono::milliseconds after) { out->push_back(start_timer{++timer, after}); }
  std::chrono::milliseconds grace() const {
    return setup ? std::chrono::milliseconds(setup->grace_ms) : opts.lost_grace;
  }

  bool all_exited() const { return ranks.all_exited(); }

  // ---- --stall-timeout ----
  // The next look at the live ranks, unless one is due or there is nobody to look at. The sample
  // timer is the running phase's only timer (the grace and the sweep void it).
  void look_later() {
    if (!stall || stall->looking || stall->live.empty() || ph != phase::running) return;
    stall->looking = true;
    arm(stall->every);
  }
  void look_now() {
    stall->looking = !stall->live.empty();
    if (!stall->looking) return;
    sample_ranks s;
    s.ranks.reserve(stall->live.size());
    for (const auto& p : stall->live) s.ranks.emplace_back(p.rank, p.pid);
    out->push_back(std::move(s));
  }
  // Quiet: no live rank progressed for the timeout. The launcher hears each change only; with no
  // live rank left the host stays as it was (the launcher counts only hosts with live ranks).
  void judge() {
    if (!stall || stall->live.empty() || ph != phase::running) return;
    const bool quiet = std::all_of(stall->live.begin(), stall->live.end(), [&](const progress& p) {
      return now - p.progressed >= stall->timeout;
    });
    if (quiet == stall->quiet) return;
    stall->quiet = quiet;
    send_msg(link::host_quiet{quiet, static_cast<std::uint32_t>(stall->live.size())});
  }
  void sampled(const ranks_sampled& r) {
    stall->looking = false;
    for (const auto& x : r.ranks) {
      auto* p = stall->find(x.rank);
      if (p == nullptr || x.gone) continue;
      if (x.cpu_ms != p->cpu_ms || x.written != p->written) p->progressed = now;
      if (x.written != p->written) p->wrote = now;
      p->cpu_ms = x.cpu_ms;
      p->written = x.written;
      p->state = x.state;
      p->wchan = x.wchan;
    }
    judge();
    look_later();
  }
  // What the live ranks are doing, as last seen (ranks ascending).
  link::stall_report activity(std::uint64_t id) const {
    link::stall_report r{id, {}};
    if (stall) {
      for (const auto& p : stall->live) {
        r.ranks.push_back(link::rank_activity{p.rank, p.pid, std::string(1, p.state), p.wchan,
                                              p.cpu_ms, p.wrote ? ms_since(now, *p.wrote) : -1,
                                              ms_since(now, p.progressed)});
      }
      return r;
    }
    for (const auto& e : ranks) {
      if (e.pid <= 0 || e.exited) continue;
      link::rank_activity a;
      a.rank = e.rank;
      a.pid = e.pid;
      a.state = "?";
      r.ranks.push_back(std::move(a));
    }
    return r;
  }

  // The launcher is gone or misbehaved: SIGTERM to every group, SIGKILL after the grace (a
  // restart already sent SIGKILL: straight to the end).
  void lose_launcher() {
    if (ph == phase::restarting) {
      clear();
      return;
    }
    if (ph != phase::running) return;
    ph = phase::terminating;
    for (const auto& r : ranks) {
      if (r.pid > 0) out->push_back(signal_group{r.pid, SIGTERM});
    }
    if (all_exited()) {
      clear();
    } else {
      arm(grace());
    }
  }

  void clear() {
    if (ph == phase::clearing || ph == phase::done) return;
    ph = phase::clearing;
    ++timer;  // a pending grace timer is void now
    // Every leader is alive or an unreaped zombie here, so each pid is still its own group's id.
    for (const auto& r : ranks) {
      if (r.pid > 0) out->push_back(signal_group{r.pid, SIGKILL});
    }
    out->push_back(sweep{});
  }

  // link::restart_request: end every rank (SIGKILL to its group; a rank still spawning gets it
  // when its pid comes) and sweep until nothing of them is left (finish_restart).
  void restart(const link::restart_request& r) {
    if (ph == phase::restarting) {
      // The same restart again: the launcher placed the incarnation anew (a host was lost
      // meanwhile); its PMIx facts are the host machine's to take, one answer covers both.
      if (r.incarnation == next_incarnation) return;
      protocol_error("'restart' to incarnation " + std::to_string(r.incarnation) +
                     " before incarnation " + std::to_string(next_incarnation) + " was ready");
      return;
    }
    if (ph != phase::running) return;  // ending anyway
    if (r.incarnation == incarnation && incarnation > 0 && ranks.empty()) {
      // Placed anew after this host answered, before any of its ranks: answer again (with the
      // new facts registered and a fresh port), through the same sweep.
      ph = phase::restarting;
      next_incarnation = r.incarnation;
      swept_clean = false;
      restart_port = 0;
      out->push_back(sweep_ranks{});
      return;
    }
    if (r.incarnation <= incarnation) {
      protocol_error("'restart' to incarnation " + std::to_string(r.incarnation) +
                     ", which is not after incarnation " + std::to_string(incarnation));
      return;
    }
    ph = phase::restarting;
    next_incarnation = r.incarnation;
    swept_clean = false;
    restart_port = 0;
    // Every leader is alive or an unreaped zombie here, so each pid is still its own group's id.
    for (const auto& x : ranks) {
      if (x.pid > 0) out->push_back(signal_group{x.pid, SIGKILL});
    }
    out->push_back(sweep_ranks{});
  }

  // Nothing of the ranks is left and everything about them was said: `restarted`, then the
  // ranks are forgotten (the job's setup stays).
  void finish_restart() {
    if (ph != phase::restarting || !swept_clean || !all_exited() || streams_open > 0) return;
    send_msg(link::restarted{next_incarnation, restart_port});
    out->push_back(forget_ranks{});
    ranks = rank_table{};
    spawned_apps.clear();
    jobs = 1;
    incarnation = next_incarnation;
    ++timer;  // a pending sweep timer (or sample timer) is void now
    ph = phase::running;
    // --stall-timeout watches the next incarnation's ranks afresh (the launcher forgets which
    // hosts were quiet when it starts it).
    if (stall) {
      stall->live.clear();
      stall->looking = false;
      stall->quiet = false;
    }
  }

  void protocol_error(const std::string& text) {
    send_msg(link::agent_error{text});
    lose_launcher();
  }

  void start_rank(link::rank_spec& spec) {
    const std::size_t apps = setup->apps.size() + spawned_apps.size();
    if (spec.app >= apps) {
      send_msg(link::spawn_failed{spec.rank, 127,
                                  "rank " + std::to_string(spec.rank) + " names app " +
                                      std::to_string(spec.app) + ", the job has " +
                                      std::to_string(apps)});
      return;
    }
    const auto& app = spec.app < setup->apps.size() ? setup->apps[spec.app]
                                                    : *spawned_apps[spec.app - setup->apps.size()];
    process_spec p;
    p.rank = spec.rank;
    p.argv = app.argv;
    // Composed only when the driver starts the rank (process_spec::environment).
    p.profile = std::move(spec.env);
    p.base = &base_env;
    p.overrides = &setup->overrides;
    p.app_env = &app.env;
    p.wdir = app.wdir.empty() ? setup->cwd : app.wdir;
    p.stdin_from_launcher = spec.stdin_from_launcher;
    if (spec.binding) p.cpus = std::move(spec.binding->cpus);
    p.streams = setup->streams;
    p.forward_output = setup->forward_output;
    if (opts.files != nullptr && !place(p, app.wdir.empty())) return;
    ranks.add(spec.rank);
    out->push_back(spawn_rank{std::move(p)});
  }

  // Where the rank starts and what it executes, found on this host in its own PATH and working
  // directory; false (and the launcher told) when it cannot run.
  // `launcher_dir`: the app named no directory, so wdir is the launcher's, which may not exist
  // here: the rank's home then.
  bool place(process_spec& p, bool launcher_dir) {
    p.wdir =
        working_directory_of(p.wdir, launcher_dir, p.variable("HOME").value_or(""), *opts.files);
    auto found = find_program(p.argv.empty() ? std::string_view() : p.argv.front(),
                              p.variable("PATH").value_or(""), p.wdir, *opts.files);
    if (auto* refusal = std::get_if<program_refusal>(&found)) {
      send_msg(link::spawn_failed{p.rank, refusal->code, std::move(refusal->reason)});
      return false;
    }
    p.program = std::move(std::get<std::string>(found));
    return true;
  }

  void on_message(link::message& m) {
    if (!setup && !std::holds_alternative<link::job_setup>(m) &&
        !std::holds_alternative<link::shutdown_request>(m)) {
      protocol_error("'" + std::string(link::type_name(m)) + "' message before 'job'");
      return;
    }
    std::visit(
        overloaded{
            [&](link::job_setup& j) {
              if (setup) {
                protocol_error("second 'job' message");
                return;
              }
              base_env = base_environment(opts.environment, j.base);
              // Before any spawn: the launcher plans the ranks from it.
              if (j.topology) {
                send_msg(opts.read_topology ? opts.read_topology()
                                            : link::host_shape{"", "this agent has no topology"});
              }
              if (j.stall && j.stall->timeout_ms > 0) {
                stall = std::make_unique<stall_watch>();
                stall->timeout = std::chrono::milliseconds(j.stall->timeout_ms);
                stall->every = j.stall->sample_ms > 0
                                   ? std::chrono::milliseconds(j.stall->sample_ms)
                                   : link::stall_sample_period(stall->timeout);
              }
              setup = opts.shared_setups != nullptr
                          ? opts.shared_setups->share(std::move(j))
                          : std::make_shared<const link::job_setup>(std::move(j));
            },
            [&](const link::stall_query& q) { send_msg(activity(q.id)); },
            [&](link::spawn_request& s) {
              if (ph == phase::restarting) {
                protocol_error("'spawn' before incarnation " + std::to_string(next_incarnation) +
                               " was ready");
                return;
              }
              for (auto& spec : s.ranks) {
                if (ph != phase::running) {
                  send_msg(link::spawn_failed{spec.rank, 127, "the agent is shutting down"});
                } else if (auto* old = ranks.find(spec.rank); old != nullptr && old->exited) {
                  // --enable-recovery: the rank starts again once its process ended. Its leader
                  // is an unreaped zombie, so its pid still names its group: SIGKILL to what it
                  // left, then the driver reaps it and forgets it.
                  if (old->pid > 0) out->push_back(signal_group{old->pid, SIGKILL});
                  out->push_back(forget_rank{spec.rank});
                  ranks.erase(spec.rank);
                  start_rank(spec);
                } else if (ranks.contains(spec.rank)) {
                  send_msg(link::spawn_failed{
                      spec.rank, 127,
                      "rank " + std::to_string(spec.rank) + " was already started by this agent"});
                } else {
                  start_rank(spec);
                }
              }
            },
            [&](const link::suspend&) {
              // Every rank here stops, also one whose start the launcher had not heard of yet
              // (its spawn was on its way when ^Z came), and each that starts meanwhile.
              launcher_stopped = true;
              if (ph != phase::running) return;
              for (auto& r : ranks) {
                if (r.exited || r.pid <= 0 || r.held) continue;
                r.held = true;
                out->push_back(signal_group{r.pid, SIGTSTP});
              }
            },
            [&](const link::resume&) {
              launcher_stopped = false;
              for (auto& r : ranks) {
                if (!r.held) continue;
                r.held = false;
                if (!r.exited && r.pid > 0) out->push_back(signal_group{r.pid, SIGCONT});
              }
            },
            [&](const link::signal_request& s) {
              if (ph != phase::running) return;  // the agent's own kill sequence rules now
              for (std::uint32_t rank : s.ranks) {
                const auto* r = ranks.find(rank);
                if (r != nullptr && r->pid > 0) {
                  out->push_back(signal_group{r->pid, s.signo});
                }
              }
            },
            [&](const link::restart_request& r) { restart(r); },
            [&](const link::shutdown_request&) {
              shutdown_asked = true;
              exit_code = exit_after_shutdown;
              clear();
            },
            [&](link::job_add& j) {
              // Jobs and apps come in order: anything else is the launcher's mistake.
              if (j.job != jobs || j.first_app != setup->apps.size() + spawned_apps.size()) {
                protocol_error("'job_add' of job " + std::to_string(j.job) + " out of order");
                return;
              }
              ++jobs;
              for (auto& a : j.apps) {
                spawned_apps.push_back(std::make_unique<link::app_spec>(std::move(a)));
              }
            },
            [&](const link::input_closed&) {},     // the driver closes the rank's stdin pipe
            [&](const link::output_unwanted&) {},  // ... and that output pipe
            // The driver's PMIx server takes these.
            [&](const link::fence_result&) {},
            [&](const link::modex_request&) {},
            [&](const link::modex_reply&) {},
            [&](const link::proc_table_reply&) {},
            [&](const link::pmix_notify&) {},
            [&](const link::pmix_spawn_reply&) {},
            [&](const link::pmix_data_reply&) {},
            [&](const auto& other) {
              protocol_error("unexpected '" + std::string(link::type_name(other)) +
                             "' message from the launcher");
            },
        },
        m);
  }

  void on(event& e) {
    std::visit(overloaded{
                   [&](received& r) { on_message(r.msg); },
                   [&](const rank_spawned& s) {
                     auto* r = ranks.find(s.rank);
                     if (r == nullptr) return;  // not asked for: the driver's mistake
                     r->pid = s.pid;
                     if (setup && setup->forward_output) streams_open += setup->streams;
                     send_msg(link::started{{{s.rank, s.pid}}});
                     if (stall && ph == phase::running && stall->find(s.rank) == nullptr) {
                       progress p;
                       p.rank = s.rank;
                       p.pid = s.pid;
                       p.progressed = now;
                       stall->live.insert(stall->lower(s.rank), std::move(p));
                       judge();  // a host that was quiet is not any more
                       look_later();
                     }
                     if (launcher_stopped && ph == phase::running) {
                       out->push_back(signal_group{s.pid, SIGTSTP});
                       r->held = true;
                     }
                     // Spawned while the end had begun: it gets what the others got.
                     if (ph == phase::terminating) out->push_back(signal_group{s.pid, SIGTERM});
                     if (ph == phase::clearing) out->push_back(signal_group{s.pid, SIGKILL});
                     if (ph == phase::restarting) {
                       out->push_back(signal_group{s.pid, SIGKILL});
                       swept_clean = false;
                       out->push_back(sweep_ranks{});
                     }
                   },
                   [&](const rank_spawn_failed& f) {
                     ranks.erase(f.rank);
                     send_msg(link::spawn_failed{f.rank, f.code, f.reason});
                     if (ph == phase::terminating && all_exited()) clear();
                     finish_restart();
                   },
                   [&](const output_ended& x) {
                     if (streams_open > 0) --streams_open;
                     send_msg(link::stream_closed{{{x.rank, x.stream, x.bytes}}});
                     finish_restart();
                   },
                   [&](const rank_exited& x) {
                     auto* r = ranks.find(x.rank);
                     if (r == nullptr || r->exited) return;
                     ranks.mark_exited(*r);
                     send_msg(link::exited{{{x.rank, x.status}}});
                     if (stall) {
                       if (stall->find(x.rank) != nullptr) {
                         stall->live.erase(stall->lower(x.rank));
                         judge();  // the ranks left may all be quiet
                       }
                     }
                     if (ph == phase::terminating && all_exited()) clear();
                     finish_restart();
                   },
                   [&](const channel_lost&) {
                     channel_open = false;
                     lose_launcher();
                   },
                   [&](const bad_message& b) { protocol_error(b.reason); },
                   [&](const terminate_requested& t) {
                     // Told to end from outside (Slurm's scancel or time limit, an admin's
                     // kill): a line, not the agent's failure. Its ranks end by the signal, and
                     // the first of their ends is the job's (docs/slurm.md); an agent_error
                     // would have made it a lost host (213).
                     send_msg(link::agent_notice{"the agent received " + signal_name(t.signo) +
                                                 "; it ends its ranks"});
                     lose_launcher();
                   },
                   [&](const timer_fired& t) {
                     if (t.timer != timer) return;
                     if (ph == phase::running) {
                       if (stall) look_now();  // the sample timer
                     } else if (ph == phase::terminating) {
                       clear();
                     } else if (ph == phase::clearing) {
                       out->push_back(sweep{});
                     } else if (ph == phase::restarting) {
                       out->push_back(sweep_ranks{});
                     }
                   },
                   [&](const child_changed&) {
                     if (ph == phase::clearing) {
                       out->push_back(sweep{});
                     } else if (ph == phase::restarting) {
                       out->push_back(sweep_ranks{});  // it reaps what ended too
                     } else if (ph != phase::done) {
                       out->push_back(reap_orphans{});
                     }
                   },
                   [&](const ranks_sampled& r) {
                     if (stall && ph == phase::running) sampled(r);
                   },
                   [&](const swept& s) {
                     if (ph != phase::clearing) return;
                     if (s.children_left > 0) {
                       arm(opts.sweep_interval);
                       return;
                     }
                     ph = phase::done;
                     if (shutdown_asked) send_msg(link::shutdown_done{});
                     out->push_back(exit_agent{exit_code});
                   },
                   [&](const ranks_swept& s) {
                     if (ph != phase::restarting) return;
                     swept_clean = s.children_left == 0;
                     if (!swept_clean) {
                       arm(opts.sweep_interval);
                       return;
                     }
                     restart_port = s.port;
                     finish_restart();
                   },
               },
               e);
  }
};

agent::agent(options opts) : state_(std::make_unique<state>()) {
  state_->opts = opts;
}
agent::~agent() = default;
agent::agent(agent&&) noexcept = default;
agent& agent::operator=(agent&&) noexcept = default;

void agent::handle(agent_time now, event e, std::vector<action>& out) {
  if (state_->ph == phase::done) return;
  state_->now = now;
  state_->out = &out;
  state_->on(e);
  state_->out = nullptr;
}

bool agent::done() const noexcept {
  return state_->ph == phase::done;
}

const link::job_setup* agent::setup() const noexcept {
  return state_->setup.get();
}

bool agent::any_live_rank(const std::function<bool(std::uint32_t rank)>& pred) const {
  for (const auto& r : state_->ranks) {
    if (!r.exited && pred(r.rank)) return true;
  }
  return false;
}

// Its layers for the one composer (env/compose.hpp): its precedence decides both.
std::vector<std::string> process_spec::environment() const {
  return compose_environment(layers_of(*this));
}

std::optional<std::string_view> process_spec::variable(std::string_view name) const {
  return composed_value(layers_of(*this), name);
}

}  // namespace pm::agent
