// The simulated world around the real controller and the real node agent (docs/simulator.md).
//
// What is simulated here: a launcher-side transport (agents started as a tree, one FIFO link per
// host with latency, jitter and partitions, heartbeats as a detection model), one pm::agent per
// host, processes that follow their scripts, timers, and faults. What is NOT here: any decision
// of the controller or the agent. The checks at the end compare what happened with the contract
// (docs/failure-semantics.md), never with a second implementation of it.
#include <signal.h>

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <unordered_map>

#include "agent/agent.hpp"
#include "pm/error.hpp"
#include "pm/sim/random.hpp"
#include "pm/sim/world.hpp"
#include "trace.hpp"

// GCC 12 sees std::variant moves as "maybe uninitialized" (see libpm/src/agent/agent.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace pm::sim {

const char* to_string(verdict v) noexcept {
  switch (v) {
    case verdict::ok:
      return "ok";
    case verdict::correctness:
      return "correctness failure";
    case verdict::liveness:
      return "liveness failure";
    case verdict::crash:
      return "crash";
  }
  return "?";
}

int exit_code(verdict v) noexcept {
  switch (v) {
    case verdict::ok:
      return 0;
    case verdict::crash:
      return 10;
    case verdict::liveness:
      return 11;
    case verdict::correctness:
      return 12;
  }
  return 12;
}

std::string hash_text(std::uint64_t hash) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

std::string run_result::explain() const {
  std::string out = std::string(to_string(outcome));
  for (const auto& p : problems) out += "\n  " + p;
  out += "\nreplay: " + replay;
  return out;
}

namespace {

constexpr std::int64_t pid_base = 1000;  // a rank's simulated pid is pid_base + rank

enum class ek : std::uint8_t {
  job_start,
  down,              // a batch of launcher->agent messages arrives (a: host, b: pool slot)
  up,                // a batch of host->launcher messages arrives (a: host, b: pool slot)
  spawned,           // a host's agent forked a batch of ranks (a: host, b: pool slot)
  reacted,           // a host's signalled ranks die (a: host, b: pool slot)
  script_step,       // a: rank, b: 0 close streams, 1 call abort
  proc_end,          // a: rank, b: encoded exit status
  ctl_timer,         // a, b: timer id (low, high)
  agent_timer,       // a: host, b: timer id
  host_crash,        // a: host
  partition_begin,   // a: host
  launcher_detects,  // a: host, b: reason
  agent_detects,     // a: host
  launcher_signal,   // a: signo
};

// key: the time in the high 48 bits, a random tie-break in the low 16, so that events due at
// the same moment come in a seed-chosen order ("simultaneous failures in any order").
struct sim_event {
  std::uint64_t key;
  std::uint32_t a;
  std::uint32_t b;
  ek kind;
  std::int64_t t() const noexcept { return static_cast<std::int64_t>(key >> 16); }
};
constexpr std::int64_t max_key_time = (std::int64_t{1} << 47);  // ~39 hours

// A radix heap: a monotone priority queue (no key below the last popped one may be pushed),
// which virtual time is. Each event moves between at most 64 buckets, and the events far in the
// future (the ranks' natural exits) stay untouched in the high buckets, so a pop touches little
// memory; a binary heap of a million events spent most of an 800,000-rank run in cache misses.
class event_queue {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::uint64_t last() const noexcept { return last_; }
  void push(const sim_event& e) {
    buckets_[bucket(e.key)].push_back(e);
    ++size_;
  }
  // The event with the smallest key (valid until the next push or pop).
  const sim_event& top() {
    if (buckets_[0].empty()) refill();
    return buckets_[0].back();
  }
  void pop() {
    if (buckets_[0].empty()) refill();
    buckets_[0].pop_back();
    --size_;
  }

 private:
  std::size_t bucket(std::uint64_t key) const noexcept {
    return key == last_ ? 0 : 64 - static_cast<std::size_t>(__builtin_clzll(key ^ last_));
  }
  void refill() {
    std::size_t i = 1;
    while (buckets_[i].empty()) ++i;
    auto& from = buckets_[i];
    std::uint64_t min = from.front().key;
    for (const auto& e : from) min = std::min(min, e.key);
    last_ = min;
    // Events with equal keys keep their order (stable), so ties are decided by the key alone.
    for (const auto& e : from) buckets_[bucket(e.key)].push_back(e);
    from.clear();
    std::reverse(buckets_[0].begin(), buckets_[0].end());
  }
  std::vector<sim_event> buckets_[65];
  std::uint64_t last_ = 0;
  std::size_t size_ = 0;
};

// Reusable vectors addressed by a slot number that fits an event: a batch travels as one event.
template <class T>
class batch_pool {
 public:
  std::uint32_t take() {
    if (!free_.empty()) {
      const auto slot = free_.back();
      free_.pop_back();
      return slot;
    }
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }
  std::vector<T>& operator[](std::uint32_t slot) { return slots_[slot]; }
  void give_back(std::uint32_t slot) {
    slots_[slot].clear();
    free_.push_back(slot);
  }

 private:
  std::vector<std::vector<T>> slots_;
  std::vector<std::uint32_t> free_;
};

// A rank in a batch: its fork time (spawns; -1: the exec failed) or its end (reactions).
struct batch_entry {
  std::uint32_t rank;
  std::int64_t value;
};

// A message from a host to the launcher: the agent's, or the host's output layer's.
struct up_msg {
  enum class kind : std::uint8_t { agent, stream, abort } k = kind::agent;
  std::uint8_t stream = 0;
  std::uint32_t rank = 0;
  std::uint64_t value = 0;  // bytes (stream), status (abort)
  link::message msg;
};

enum class pstate : std::uint8_t { none, spawning, running, dead, gone, failed };
enum pflag : std::uint8_t {
  spawn_seen = 1,      // the controller asked to spawn it
  end_known = 2,       // the controller was told it ended (exit, spawn failure, host lost)
  leftover_alive = 4,  // it ended, a child of it still holds its streams
  f_spawn_fail = 8,    // fault: it cannot be executed
  f_lost_exit = 16,    // fault: its exit is never noticed
  signalled = 32,      // the controller sent it a signal
};

// Per rank: 12 bytes, so that 800,000 ranks stay small.
struct proc_rec {
  pstate state = pstate::none;
  std::uint8_t streams = 0;  // open stream bits (bit 0 stdout, bit 1 stderr)
  std::uint8_t flags = 0;
  std::uint8_t seen_closed = 0;  // streams whose end the launcher reported to the controller
  std::uint32_t script = 0;      // index into world::scripts_
  std::uint32_t host = 0;        // cached from the rank map (rank_map::at touches five arrays)
};

struct host_rec {
  std::optional<agent::agent> agent;
  // The rank lists of spawn requests on their way to this host (FIFO, as the link): a request
  // travels as an empty marker and gets its rank_specs (120 bytes a rank) when it arrives.
  std::vector<std::vector<std::uint32_t>> spawns_in_flight;
  bool launched = false, agent_fails = false, crashed = false;
  bool launcher_closed = false, agent_closed = false, agent_done = false;
  std::int64_t agent_start = -1;            // when its agent runs (and sends its first heartbeat)
  std::int64_t down_last = 0, up_last = 0;  // FIFO links: the last arrival each way
  std::int64_t spawn_free = 0;              // when its agent can fork the next rank
  std::int64_t part_from = -1, part_until = -1;
  std::int64_t crash_at = -1;
  std::int64_t detect_bound = -1;     // the latest a scheduled loss detection may come
  std::int64_t agent_detect_at = -1;  // its agent gave up on the launcher
  std::int64_t last_death = -1;
};

std::uint32_t encode(exit_status s) {
  return s.is_signal() ? 0x10000u | static_cast<std::uint32_t>(s.signal())
                       : static_cast<std::uint32_t>(s.code());
}
exit_status decode(std::uint32_t v) {
  return (v & 0x10000u) != 0 ? exit_status::signaled(static_cast<int>(v & 0xffffu))
                             : exit_status::exited(static_cast<int>(v));
}

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};

// The first failure the controller was fed, as the contract defines failures.
struct failure_seen {
  cause_kind kind = cause_kind::none;
  std::uint32_t rank = 0;
  std::uint32_t host = 0;
  int code = 0;
  std::int64_t t = 0;
};

class world {
 public:
  world(const scenario& s, const run_options& o)
      : s_(s),
        o_(o),
        rng_(s.seed),
        map_(map_job(make_job(s), make_allocation(s))),
        ctl_(map_, s.control),
        procs_(map_.size()),
        hosts_(map_.allocation().hosts.size()) {
    const auto n = map_.size();
    for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
      const auto host = map_.host_of_node(node);
      for (auto rank : map_.ranks_on_host(host)) procs_[rank].host = host;
    }
    scripts_.push_back(s.default_script);
    // MPMD: an app's script for its ranks (a rank's own script, below, still wins).
    std::vector<std::uint32_t> app_script(s.apps.size(), 0);
    for (std::size_t i = 0; i < s.apps.size(); ++i) {
      if (!s.apps[i].script) continue;
      app_script[i] = static_cast<std::uint32_t>(scripts_.size());
      scripts_.push_back(*s.apps[i].script);
    }
    if (std::any_of(app_script.begin(), app_script.end(), [](auto i) { return i != 0; })) {
      for (std::uint32_t rank = 0; rank < n; ++rank)
        procs_[rank].script = app_script[map_.at(rank).app];
    }
    check_targets(s, static_cast<std::uint32_t>(hosts_.size()), n);
    for (const auto& [rank, script] : s.scripts) {
      procs_[rank].script = static_cast<std::uint32_t>(scripts_.size());
      scripts_.push_back(script);
    }
    for (const auto& f : s.faults) plan(f);
    max_events_ = o.max_events != 0 ? o.max_events : 64ull * n + 1'000'000;
    streams_bits_ = s.control.streams_per_rank >= 2 ? 3 : s.control.streams_per_rank == 1 ? 1 : 0;
  }

  run_result run() {
    result_.replay = s_.replay_command();
    try {
      at(0, ek::job_start, 0, 0);
      while (!queue_.empty()) {
        const sim_event e = queue_.top();
        if (e.t() > o_.max_time.count()) {
          liveness("the virtual time limit (" + format_duration(o_.max_time) +
                   ") was reached before the job finished");
          break;
        }
        if (result_.stats.events >= max_events_) {
          liveness("the event budget (" + std::to_string(max_events_) +
                   " events) was spent before the job finished");
          break;
        }
        queue_.pop();
        now_ = e.t();
        ++result_.stats.events;
        dispatch(e);
        run_sweeps();
        flush_up();
        // Settled: what is left in the queue is stale (natural ends of processes that were
        // killed, timers of a finished controller); nothing can change any more.
        if (finish_seen_ && live_procs_ == 0 && leftovers_alive_ == 0 && agents_pending_ == 0 &&
            !a_timer_is_racing())
          break;
      }
      result_.end_time = sim_time(now_);
      if (queue_.empty() || finish_seen_) final_checks();
    } catch (const std::bad_alloc&) {
      throw;  // the machine's limit, not a crash of what is simulated: the caller's to handle
    } catch (const std::exception& ex) {
      result_.outcome = verdict::crash;
      result_.problems.push_back("at " + format_duration(sim_time(now_)) + ": " + ex.what());
    }
    // Finished is what a driver sees: the finish action (the controller's own flag alone would
    // leave a real driver waiting).
    result_.finished = finish_seen_;
    if (!result_.finished) result_.report = ctl_.report();
    result_.trace_hash = hash_.value();
    return std::move(result_);
  }

 private:
  // ---- bookkeeping ----
  void at(std::int64_t t, ek kind, std::uint32_t a, std::uint32_t b) {
    t = std::clamp<std::int64_t>(t, 0, max_key_time);
    std::uint64_t key = (static_cast<std::uint64_t>(t) << 16) | (rng_.next() >> 48);
    key = std::max(key, queue_.last());  // due now: after the event being handled
    queue_.push(sim_event{key, a, b, kind});
  }
  std::int64_t jitter(sim_time max) { return rng_.between(0, max.count()); }

  void problem(verdict v, std::string text) {
    if (result_.outcome == verdict::ok || result_.outcome == verdict::correctness)
      result_.outcome = v;
    if (result_.problems.size() < 20)
      result_.problems.push_back("at " + format_duration(sim_time(now_)) + ": " + std::move(text));
  }
  void correctness(std::string text) { problem(verdict::correctness, std::move(text)); }
  void liveness(std::string text) { problem(verdict::liveness, std::move(text)); }

  bool tracing() const { return static_cast<bool>(o_.trace); }
  void line(const std::string& text) {
    if (tracing()) o_.trace(trace_time(now_) + " " + text);
  }
  const std::string& host_name(std::uint32_t host) const {
    return map_.allocation().hosts[host].name;
  }
  const process_script& script(std::uint32_t rank) const { return scripts_[procs_[rank].script]; }

  void plan(const fault& f) {
    // check_targets() has checked every target and partition.
    if (f.kind == fault_kind::launcher_signal) {
      // Never before job_start (events before it are ignored, by the controller's rules).
      at(std::max<std::int64_t>(f.at.count(), 1), ek::launcher_signal, f.target, 0);
      return;
    }
    switch (f.kind) {
      case fault_kind::host_crash: {
        auto& h = hosts_[f.target];
        if (h.crash_at < 0 || f.at.count() < h.crash_at) h.crash_at = f.at.count();
        at(f.at.count(), ek::host_crash, f.target, 0);
        break;
      }
      case fault_kind::partition: {
        auto& h = hosts_[f.target];
        h.part_from = f.at.count();
        h.part_until = f.until.count();
        at(f.at.count(), ek::partition_begin, f.target, 0);
        break;
      }
      case fault_kind::spawn_failure:
        procs_[f.target].flags |= f_spawn_fail;
        break;
      case fault_kind::agent_failure:
        hosts_[f.target].agent_fails = true;
        break;
      case fault_kind::lost_exit:
        procs_[f.target].flags |= f_lost_exit;
        break;
      case fault_kind::launcher_signal:
        break;
    }
  }

  // ---- links ----
  // When a message sent now on a host's link arrives: latency and jitter, delayed to the end of
  // a partition (TCP retransmits), never before an earlier message on the same link (FIFO).
  std::int64_t arrival(host_rec& h, std::int64_t& last, std::int64_t not_before) {
    std::int64_t t = now_;
    if (h.part_from >= 0 && t >= h.part_from && t < h.part_until) t = h.part_until;
    t = std::max(t, not_before);
    t += s_.latency.link.count() + jitter(s_.latency.link_jitter);
    t = std::max(t, last + 1);
    last = t;
    return t;
  }

  // Launcher -> host: messages are collected while one controller step runs, then sent as one
  // batch per host (the controller's actions for a host are adjacent).
  void send_down(std::uint32_t host, link::message m) {
    auto& h = hosts_[host];
    if (h.launcher_closed) return;  // the launcher closed that channel
    if (!pending_down_.empty() && pending_down_.back().first == host) {
      down_pool_[pending_down_.back().second].push_back(std::move(m));
      return;
    }
    const auto slot = down_pool_.take();
    down_pool_[slot].push_back(std::move(m));
    pending_down_.emplace_back(host, slot);
  }
  void flush_down() {
    for (const auto& [host, slot] : pending_down_) {
      auto& h = hosts_[host];
      at(arrival(h, h.down_last, h.agent_start), ek::down, host, slot);
    }
    pending_down_.clear();
  }

  // Host -> launcher: everything one world event makes a host send goes as one batch.
  void send_up(std::uint32_t host, up_msg m) {
    if (up_host_ != host) flush_up();
    up_host_ = host;
    up_batch_.push_back(std::move(m));
  }
  void flush_up() {
    if (up_batch_.empty()) return;
    auto& h = hosts_[up_host_];
    const auto slot = up_pool_.take();
    std::swap(up_pool_[slot], up_batch_);
    up_batch_.clear();
    at(arrival(h, h.up_last, 0), ek::up, up_host_, slot);
  }

  // ---- the controller ----
  void trace_event(const event& e) {
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x100 + e.index());
    std::visit(
        overloaded{
            [&](const job_start&) { line("<- job_start"); },
            [&](const rank_started& x) {
              hash_.add(x.rank);
              if (tracing())
                line("<- rank_started rank=" + std::to_string(x.rank) +
                     " pid=" + std::to_string(x.pid));
            },
            [&](const rank_spawn_failed& x) {
              hash_.add(x.rank);
              hash_.add(static_cast<std::uint64_t>(x.code));
              if (tracing())
                line("<- rank_spawn_failed rank=" + std::to_string(x.rank) +
                     " code=" + std::to_string(x.code) + " " + x.reason);
            },
            [&](const stream_closed& x) {
              hash_.add(x.rank);
              hash_.add(static_cast<std::uint64_t>(x.stream));
              hash_.add(x.bytes);
              if (tracing())
                line("<- stream_closed rank=" + std::to_string(x.rank) + " " +
                     std::string(pm::to_string(x.stream)) + " bytes=" + std::to_string(x.bytes));
            },
            [&](const rank_exited& x) {
              hash_.add(x.rank);
              hash_.add(encode(x.status));
              if (tracing())
                line("<- rank_exited rank=" + std::to_string(x.rank) + " " + x.status.describe());
            },
            [&](const host_lost& x) {
              hash_.add(x.host);
              if (tracing())
                line("<- host_lost host=" + std::to_string(x.host) + " (" + host_name(x.host) +
                     ") " + x.reason);
            },
            [&](const timer_fired& x) {
              hash_.add(x.timer);
              if (tracing()) line("<- timer_fired timer=" + std::to_string(x.timer));
            },
            [&](const signal_received& x) {
              hash_.add(static_cast<std::uint64_t>(x.signo));
              if (tracing()) line("<- signal_received " + signal_name(x.signo));
            },
            [&](const abort_requested& x) {
              hash_.add(x.rank.value_or(0xffffffffu));
              hash_.add(static_cast<std::uint64_t>(x.status));
              if (tracing())
                line("<- abort_requested rank=" +
                     (x.rank ? std::to_string(*x.rank) : std::string("none")) +
                     " status=" + std::to_string(x.status));
            },
        },
        e);
  }

  static std::string rank_list(const std::vector<std::uint32_t>& ranks) {
    if (ranks.empty()) return "[]";
    if (ranks.size() == 1) return "[" + std::to_string(ranks[0]) + "]";
    return "[" + std::to_string(ranks.front()) + ".." + std::to_string(ranks.back()) + "] (" +
           std::to_string(ranks.size()) + ")";
  }

  void trace_action(const action& a) {
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x200 + a.index());
    std::visit(
        overloaded{
            [&](const spawn& x) {
              hash_.add(x.host);
              hash_.add(x.ranks.size());
              if (!x.ranks.empty()) hash_.add(x.ranks.front());
              if (tracing())
                line("-> spawn host=" + std::to_string(x.host) + " ranks=" + rank_list(x.ranks));
            },
            [&](const signal_ranks& x) {
              hash_.add(x.host);
              hash_.add(static_cast<std::uint64_t>(x.signo));
              hash_.add(x.ranks.size());
              if (!x.ranks.empty()) hash_.add(x.ranks.front());
              if (tracing())
                line("-> signal_ranks host=" + std::to_string(x.host) + " " + signal_name(x.signo) +
                     " ranks=" + rank_list(x.ranks));
            },
            [&](const start_timer& x) {
              hash_.add(x.timer);
              hash_.add(static_cast<std::uint64_t>(x.after.count()));
              if (tracing())
                line("-> start_timer timer=" + std::to_string(x.timer) +
                     " after=" + format_duration(x.after));
            },
            [&](const cancel_timer& x) {
              hash_.add(x.timer);
              if (tracing()) line("-> cancel_timer timer=" + std::to_string(x.timer));
            },
            [&](const emit& x) {
              hash_.add(x.line);
              line("-> emit " + x.line);
            },
            [&](const clear_leftovers&) { line("-> clear_leftovers"); },
            [&](const finish& x) {
              hash_.add(static_cast<std::uint64_t>(x.report.exit_code));
              hash_.add(static_cast<std::uint64_t>(x.report.cause));
              if (tracing())
                line("-> finish exit_code=" + std::to_string(x.report.exit_code) +
                     " cause=" + pm::to_string(x.report.cause) + " " + x.report.summary);
            },
        },
        a);
  }

  // What the contract calls a failure, noted when the controller is fed it (the first decides).
  void note_failure(cause_kind kind, std::uint32_t rank, std::uint32_t host, int code) {
    if (first_failure_.kind != cause_kind::none) return;
    first_failure_ = failure_seen{kind, rank, host, code, now_};
  }

  void feed_ctl(const event& e) {
    ++result_.stats.controller_events;
    trace_event(e);
    const bool was_finished = ctl_.finished();
    ctl_out_.clear();
    ctl_.handle(job_time(now_), e, ctl_out_);
    if (o_.tamper_actions) o_.tamper_actions(ctl_out_);
    if (was_finished && !ctl_out_.empty())
      correctness("the controller acted after it finished (" + std::to_string(ctl_out_.size()) +
                  " actions)");
    for (std::size_t i = 0; i + 1 < ctl_out_.size(); ++i) {
      if (!std::holds_alternative<finish>(ctl_out_[i])) continue;
      correctness("the controller acted after it finished (" +
                  std::to_string(ctl_out_.size() - i - 1) + " actions after its finish)");
      break;
    }
    // Actions may refer to ctl_out_ while executing; keep them in a local buffer.
    std::vector<action> actions;
    actions.swap(ctl_out_);
    for (auto& a : actions) {
      ++result_.stats.actions;
      trace_action(a);
      execute(a);
    }
    flush_down();
    actions.clear();
    ctl_out_.swap(actions);
  }

  void execute(action& a) {
    std::visit(
        overloaded{
            [&](spawn& x) { do_spawn(x); },
            [&](signal_ranks& x) { do_signal(std::move(x)); },
            [&](start_timer& x) {
              if (x.after == s_.control.kill_grace && grace_started_at_ < 0)
                grace_started_at_ = now_;
              timers_[x.timer] = timer_state::armed;
              at(now_ + std::chrono::duration_cast<sim_time>(x.after).count(), ek::ctl_timer,
                 static_cast<std::uint32_t>(x.timer), static_cast<std::uint32_t>(x.timer >> 32));
            },
            [&](cancel_timer& x) {
              auto it = timers_.find(x.timer);
              if (it == timers_.end() || it->second != timer_state::armed) return;
              // The driver's race: the timer already expired and its handler is queued, so it
              // fires right after the cancel; the controller must ignore it.
              if (!rng_.chance(1, 4)) {
                it->second = timer_state::cancelled;
                return;
              }
              it->second = timer_state::racing;
              at(now_, ek::ctl_timer, static_cast<std::uint32_t>(x.timer),
                 static_cast<std::uint32_t>(x.timer >> 32));
            },
            [&](emit& x) { result_.lines.push_back(x.line); },
            [&](clear_leftovers&) {
              for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
                const auto host = map_.host_of_node(node);
                const auto ranks = map_.ranks_on_host(host);
                send_down(host,
                          link::signal_request{
                              std::vector<std::uint32_t>(ranks.begin(), ranks.end()), SIGKILL});
              }
            },
            [&](finish& x) { do_finish(std::move(x)); },
        },
        a);
  }

  void launch(std::uint32_t host) {
    auto& h = hosts_[host];
    h.launched = true;
    // Agents start as a tree (fan-out k): an agent of depth d starts after d hops.
    std::uint64_t index = map_.node_of_host(host).value_or(0);
    const std::uint64_t k = std::max<std::uint32_t>(1, s_.latency.fanout);
    std::uint64_t depth = 1, first = 0, width = k;
    while (index >= first + width && depth < 64) {
      first += width;
      width = width > (1ull << 40) ? width : width * k;
      ++depth;
    }
    const auto hop = s_.latency.agent_hop.count();
    std::int64_t start = now_ + static_cast<std::int64_t>(depth) * hop + jitter(sim_time(hop / 4));
    if (h.part_from >= 0 && start >= h.part_from && start < h.part_until) start = h.part_until;
    h.agent_start = start;
    h.down_last = start;
    h.up_last = start;
    h.spawn_free = start;
    if (!h.agent_fails && !h.crashed) ++agents_pending_;
    if (h.agent_fails) {
      ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::agent_failure)];
      at(start, ek::launcher_detects, host, 1);
    } else if (h.crash_at >= 0 && h.crash_at <= start) {
      at(std::max(start, h.crash_at) + s_.latency.heartbeat_timeout.count(), ek::launcher_detects,
         host, 2);
    }
  }

  void do_spawn(const spawn& x) {
    if (x.host >= hosts_.size()) {
      correctness("spawn on host " + std::to_string(x.host) + ", which does not exist");
      return;
    }
    std::vector<std::uint32_t> ranks;
    ranks.reserve(x.ranks.size());
    for (auto rank : x.ranks) {
      if (rank >= procs_.size()) {
        correctness("spawn of rank " + std::to_string(rank) + ", which does not exist");
        continue;
      }
      auto& p = procs_[rank];
      if ((p.flags & spawn_seen) != 0)
        correctness("rank " + std::to_string(rank) + " was spawned twice");
      p.flags |= spawn_seen;
      if (p.host != x.host)
        correctness("rank " + std::to_string(rank) + " was spawned on " + host_name(x.host) +
                    ", the map put it on " + host_name(p.host));
      ranks.push_back(rank);
    }
    auto& h = hosts_[x.host];
    if (!h.launched) {
      launch(x.host);
      send_down(x.host, setup_for(x.host));
    }
    if (h.launcher_closed) return;  // send_down drops what goes to a closed channel
    h.spawns_in_flight.push_back(std::move(ranks));
    send_down(x.host, link::spawn_request{});
  }

  // The spawn request that arrives at a host, with its rank_specs (and environments, when the
  // run asked for them) built now.
  link::spawn_request arriving_spawn(host_rec& h) {
    link::spawn_request req;
    if (h.spawns_in_flight.empty()) return req;
    const std::vector<std::uint32_t> ranks = std::move(h.spawns_in_flight.front());
    h.spawns_in_flight.erase(h.spawns_in_flight.begin());
    req.ranks.reserve(ranks.size());
    for (auto rank : ranks) {
      link::rank_spec spec;
      spec.rank = rank;
      spec.app = map_.at(rank).app;
      if (o_.env) {
        for (auto& v : profile_env(map_, rank, o_.env->profiles, o_.env->facts)) {
          spec.env.push_back(v.name + "=" + v.value);
        }
      }
      req.ranks.push_back(std::move(spec));
    }
    return req;
  }

  void do_signal(signal_ranks&& x) {
    if (x.signo == SIGKILL) {
      // SIGKILL only for ranks that outlive a whole grace: a grace timer must have run out.
      result_.stats.sigkills += static_cast<std::uint32_t>(x.ranks.size());
      const auto grace = std::chrono::duration_cast<sim_time>(s_.control.kill_grace).count();
      // A second SIGINT/SIGTERM/SIGHUP to the launcher escalates to SIGKILL at once.
      if (terminating_signals_ < 2 && (grace_started_at_ < 0 || now_ < grace_started_at_ + grace))
        correctness("SIGKILL to rank " + std::to_string(x.ranks.empty() ? 0 : x.ranks[0]) +
                    " before the kill grace (" + format_duration(sim_time(grace)) + ") expired");
    }
    for (auto rank : x.ranks) {
      if (rank < procs_.size()) procs_[rank].flags |= signalled;
      if (rank < procs_.size() && (procs_[rank].flags & end_known) != 0 && !finish_seen_)
        correctness(signal_name(x.signo) + " to rank " + std::to_string(rank) +
                    ", whose end the controller knew");
    }
    send_down(x.host, link::signal_request{std::move(x.ranks), x.signo});
  }

  void do_finish(finish&& x) {
    finish_seen_ = true;
    result_.finish_time = sim_time(now_);
    result_.report = std::move(x.report);  // 100 bytes a rank: not copied
    check_report(result_.report);
    // The driver's part of the end: shut every agent down (they clear what is left).
    for (std::uint32_t node = 0; node < map_.num_nodes(); ++node) {
      const auto host = map_.host_of_node(node);
      if (hosts_[host].launched) send_down(host, link::shutdown_request{});
    }
  }

  // ---- the agents ----
  void feed_agent(std::uint32_t host, agent::event e) {
    auto& h = hosts_[host];
    if (!h.agent || h.agent_done || h.crashed) return;
    agent_out_.clear();
    h.agent->handle(agent::agent_time(now_), std::move(e), agent_out_);
    std::vector<agent::action> actions;
    actions.swap(agent_out_);
    for (auto& a : actions) {
      std::visit(overloaded{
                     [&](agent::spawn_rank& x) { start_process(host, x.spec); },
                     [&](agent::signal_group& x) {
                       const auto rank = x.pgid - pid_base;
                       if (rank < 0 || rank >= static_cast<std::int64_t>(procs_.size()) ||
                           procs_[static_cast<std::uint32_t>(rank)].host != host) {
                         correctness("the agent on " + host_name(host) +
                                     " signalled a process group it does not own (" +
                                     std::to_string(x.pgid) + ")");
                         return;
                       }
                       deliver_signal(static_cast<std::uint32_t>(rank), x.signo);
                     },
                     [&](agent::send& x) {
                       send_up(host, up_msg{{}, 0, 0, 0, std::move(x.msg)});
                     },
                     [&](agent::start_timer& x) {
                       at(now_ + std::chrono::duration_cast<sim_time>(x.after).count(),
                          ek::agent_timer, host, static_cast<std::uint32_t>(x.timer));
                     },
                     [&](agent::reap_orphans&) {},
                     // pmd sweeps in the same turn of its loop; the result comes back as the
                     // next event (after this step, never nested).
                     [&](agent::sweep&) { sweeps_due_.push_back(host); },
                     [&](agent::exit_agent&) {
                       h.agent_done = true;
                       --agents_pending_;
                     },
                 },
                 a);
    }
    actions.clear();
    agent_out_.swap(actions);
    flush_host_batches(host);
  }

  // What one agent step started or signalled becomes one event per kind: pmd forks a spawn
  // request's ranks in one turn of its loop and reports them in one write, and the ranks that
  // one message signals react together (in a seed-chosen order) after one reaction time.
  void flush_host_batches(std::uint32_t host) {
    if (!spawn_batch_.empty()) {
      std::int64_t last = now_;
      for (const auto& e : spawn_batch_) last = std::max(last, e.value);
      const auto slot = batch_pool_.take();
      std::swap(batch_pool_[slot], spawn_batch_);
      at(last, ek::spawned, host, slot);
    }
    if (!kill_batch_.empty()) {
      const auto slot = batch_pool_.take();
      std::swap(batch_pool_[slot], kill_batch_);
      at(now_ + rng_.between(0, 10'000), ek::reacted, host, slot);
    }
    if (!term_batch_.empty()) {
      const auto slot = batch_pool_.take();
      std::swap(batch_pool_[slot], term_batch_);
      at(now_ + jitter(s_.latency.reaction), ek::reacted, host, slot);
    }
  }

  // ---- processes ----
  // The job's setup, as the launcher sends it to every agent before its first spawn: with
  // run_options::env, the environment the agents compose must be the contract's.
  link::job_setup setup_for(std::uint32_t host) const {
    link::job_setup j;
    j.host = host;
    j.grace_ms = static_cast<std::uint32_t>(s_.control.kill_grace.count());
    j.forward_output = false;
    j.streams = s_.control.streams_per_rank;
    const auto joined = [](const std::vector<env_var>& vars) {
      std::vector<std::string> out;
      out.reserve(vars.size());
      for (const auto& v : vars) out.push_back(v.name + "=" + v.value);
      return out;
    };
    const auto apps = std::max<std::size_t>(1, s_.apps.size());
    for (std::size_t a = 0; a < apps; ++a) {
      link::app_spec app;
      app.argv = {"app"};
      if (o_.env) app.env = joined(o_.env->app_variables(static_cast<std::uint32_t>(a)));
      j.apps.push_back(std::move(app));
    }
    if (o_.env) {
      j.base = joined(o_.env->base);
      j.overrides = joined(o_.env->overrides);
    }
    return j;
  }

  void start_process(std::uint32_t host, const agent::process_spec& spec) {
    const auto rank = spec.rank;
    if (rank >= procs_.size() || procs_[rank].host != host) {
      correctness("the agent on " + host_name(host) + " started rank " + std::to_string(rank) +
                  ", which is not its rank");
      return;
    }
    auto& p = procs_[rank];
    if (p.state != pstate::none) {
      correctness("rank " + std::to_string(rank) + " was started twice");
      return;
    }
    p.state = pstate::spawning;
    ++live_procs_;
    if (o_.on_spawn) o_.on_spawn(rank, host, spec.env);
    if ((p.flags & f_spawn_fail) != 0) {
      // exec failed at once: reported with the batch, as a later event, never a nested call.
      spawn_batch_.push_back(batch_entry{rank, -1});
      return;
    }
    auto& h = hosts_[host];
    const std::int64_t forked =
        std::max(now_, h.spawn_free) + s_.latency.spawn.count() + jitter(s_.latency.spawn_jitter);
    h.spawn_free = forked;
    spawn_batch_.push_back(batch_entry{rank, forked});
  }

  void on_spawned(std::uint32_t host, std::uint32_t slot) {
    // Taken out of the pool: the agent steps below may add batches (and grow the pool).
    std::vector<batch_entry> batch;
    batch.swap(batch_pool_[slot]);
    for (const auto& e : batch) {
      if (hosts_[host].crashed) break;
      if (e.value < 0) {
        spawn_failed(e.rank);
      } else {
        started(e.rank, e.value);
      }
    }
    batch.clear();
    batch_pool_[slot].swap(batch);
    batch_pool_.give_back(slot);
  }

  void spawn_failed(std::uint32_t rank) {
    auto& p = procs_[rank];
    if (p.state != pstate::spawning) return;
    p.state = pstate::failed;
    --live_procs_;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::spawn_failure)];
    line("!! rank " + std::to_string(rank) + " cannot be executed");
    feed_agent(p.host, agent::rank_spawn_failed{rank, 127,
                                                "cannot execute 'app': No such file or directory"});
  }

  // The rank was forked at `forked`; its script runs from forked + its slow start.
  void started(std::uint32_t rank, std::int64_t forked) {
    auto& p = procs_[rank];
    const auto host = p.host;
    if (p.state != pstate::spawning) return;
    p.state = pstate::running;
    p.streams = streams_bits_;
    feed_agent(host, agent::rank_spawned{rank, pid_base + rank});
    const auto& sc = script(rank);
    const std::int64_t begin = forked + sc.slow_start.count();
    const std::int64_t run =
        sc.at ? sc.at->count() : s_.latency.run_time.count() + jitter(s_.latency.run_jitter);
    if (sc.close_early) at(begin + run / 2, ek::script_step, rank, 0);
    switch (sc.end) {
      case process_script::ending::exit:
        at(begin + run, ek::proc_end, rank, encode(exit_status::exited(sc.value)));
        break;
      case process_script::ending::signal:
        at(begin + run, ek::proc_end, rank, encode(exit_status::signaled(sc.value)));
        break;
      case process_script::ending::abort:
        at(begin + run, ek::script_step, rank, 1);
        break;
      case process_script::ending::hang:
        break;
    }
  }

  void on_reacted(std::uint32_t slot) {
    std::vector<batch_entry> batch;
    batch.swap(batch_pool_[slot]);
    // Ranks that react together die in any order.
    for (std::size_t i = batch.size(); i > 1; --i)
      std::swap(batch[i - 1],
                batch[static_cast<std::size_t>(rng_.between(0, static_cast<std::int64_t>(i - 1)))]);
    for (const auto& e : batch) die(e.rank, decode(static_cast<std::uint32_t>(e.value)));
    batch.clear();
    batch_pool_[slot].swap(batch);
    batch_pool_.give_back(slot);
  }

  void close_streams(std::uint32_t rank) {
    auto& p = procs_[rank];
    const auto host = procs_[rank].host;
    for (std::uint8_t bit = 0; bit < 2; ++bit) {
      if ((p.streams & (1u << bit)) == 0) continue;
      up_msg m;
      m.k = up_msg::kind::stream;
      m.stream = bit;
      m.rank = rank;
      m.value = bit == 0 ? script(rank).out_bytes : 0;
      send_up(host, std::move(m));
    }
    p.streams = 0;
  }

  void die(std::uint32_t rank, exit_status status) {
    auto& p = procs_[rank];
    if (p.state != pstate::running) return;
    const auto host = procs_[rank].host;
    auto& h = hosts_[host];
    p.state = pstate::dead;
    --live_procs_;
    h.last_death = now_;
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x300);
    hash_.add(rank);
    hash_.add(encode(status));
    if (tracing())
      line("   rank " + std::to_string(rank) + " on " + host_name(host) + " " + status.describe());
    const bool has_streams = p.streams != 0 && !script(rank).leftover;
    // The output layer sees end-of-file and the agent sees the exit at about the same moment:
    // either may reach the launcher first.
    const bool streams_first = has_streams && rng_.chance(1, 2);
    if (has_streams) {
      if (streams_first)
        ++result_.stats.streams_before_exit;
      else
        ++result_.stats.exits_before_streams;
    }
    if (streams_first) close_streams(rank);
    if ((p.flags & f_lost_exit) != 0) {
      ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::lost_exit)];
      line("!! the agent on " + host_name(host) + " misses the exit of rank " +
           std::to_string(rank));
    } else {
      feed_agent(host, agent::rank_exited{rank, status});
    }
    if (script(rank).leftover && p.streams != 0) {
      p.flags |= leftover_alive;
      ++leftovers_alive_;
      ++result_.stats.leftovers;
    } else if (!streams_first) {
      close_streams(rank);
    }
  }

  void deliver_signal(std::uint32_t rank, int signo) {
    auto& p = procs_[rank];
    if (p.state == pstate::running) {
      const auto& sc = script(rank);
      switch (signo) {
        case SIGKILL:
          kill_batch_.push_back(batch_entry{rank, encode(exit_status::signaled(SIGKILL))});
          return;
        case SIGTERM:
        case SIGINT:
        case SIGHUP:
          if (sc.ignore_term) return;
          [[fallthrough]];
        case SIGUSR1:
        case SIGUSR2:
          term_batch_.push_back(batch_entry{rank, encode(exit_status::signaled(signo))});
          return;
        default:
          return;  // SIGCONT, SIGTSTP (not modelled: a stop is not an end)
      }
    }
    if (p.state == pstate::dead && (p.flags & leftover_alive) != 0 &&
        (signo == SIGKILL || signo == SIGTERM)) {
      p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
      --leftovers_alive_;
      close_streams(rank);
    }
  }

  // An agent's sweep: SIGKILL to everything of the job left on its host (leftovers too), then
  // swept{0} — as pmd's sweep, which kills and reaps every child, in one turn.
  void run_sweeps() {
    for (std::size_t i = 0; i < sweeps_due_.size(); ++i) {
      const auto host = sweeps_due_[i];
      auto& h = hosts_[host];
      if (h.crashed || !h.agent || h.agent_done) continue;
      for (auto rank : map_.ranks_on_host(host)) {
        die(rank, exit_status::signaled(SIGKILL));
        auto& p = procs_[rank];
        if ((p.flags & leftover_alive) != 0) {
          p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
          --leftovers_alive_;
          close_streams(rank);
        }
      }
      feed_agent(host, agent::swept{0});  // may ask for another sweep: appended, run below
    }
    sweeps_due_.clear();
  }

  // ---- faults and detection ----
  // When the launcher would notice silence that began at `from`: the last heartbeat sent before
  // it arrives one link latency later, and the timeout runs from there.
  std::int64_t detection_time(const host_rec& h, std::int64_t from) const {
    const auto interval = std::max<std::int64_t>(1, s_.latency.heartbeat_interval.count());
    std::int64_t last_sent = h.agent_start;
    if (from > h.agent_start) last_sent += (from - h.agent_start) / interval * interval;
    return std::max(last_sent + s_.latency.link.count(), from) +
           s_.latency.heartbeat_timeout.count();
  }

  // The model's promise: silence that begins at t is noticed by t + this.
  std::int64_t detection_promise() const {
    return s_.latency.link.count() + s_.latency.link_jitter.count() +
           s_.latency.heartbeat_timeout.count();
  }

  void on_crash(std::uint32_t host) {
    auto& h = hosts_[host];
    if (h.crashed) return;
    const bool used = map_.node_of_host(host).has_value();
    if (used) ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::host_crash)];
    if (h.launched && !h.agent_fails && !h.agent_done) --agents_pending_;
    h.crashed = true;
    line("!! " + host_name(host) + " crashes");
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x400 + std::uint64_t{host});
    for (auto rank : map_.ranks_on_host(host)) {
      auto& p = procs_[rank];
      if (p.state == pstate::running || p.state == pstate::spawning ||
          (p.flags & leftover_alive) != 0) {
        if (p.state == pstate::running || p.state == pstate::spawning) --live_procs_;
        if ((p.flags & leftover_alive) != 0) --leftovers_alive_;
        p.state = pstate::gone;
        p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
        h.last_death = now_;
      }
    }
    h.agent.reset();
    if (h.launched && !h.agent_fails && now_ >= h.agent_start) {
      h.detect_bound = std::max(h.detect_bound, now_ + detection_promise());
      at(detection_time(h, now_), ek::launcher_detects, host, 0);
    } else if (h.launched && !h.agent_fails)
      at(h.agent_start + s_.latency.heartbeat_timeout.count(), ek::launcher_detects, host, 2);
  }

  void on_partition(std::uint32_t host) {
    auto& h = hosts_[host];
    if (!h.launched || h.crashed || h.agent_fails) return;
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::partition)];
    line("!! " + host_name(host) + " is cut off until " + format_duration(sim_time(h.part_until)));
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x500 + std::uint64_t{host});
    const auto detect = detection_time(h, std::max(now_, h.agent_start));
    if (detect >= h.part_until) {
      ++result_.stats.partitions_healed;  // healed before anyone noticed: only delays
      return;
    }
    h.detect_bound = std::max(h.detect_bound, std::max(now_, h.agent_start) + detection_promise());
    at(detect, ek::launcher_detects, host, 0);
    // The agent misses the launcher's heartbeats as well (its own phase), or sees the reset
    // when the link comes back, whichever is first.
    const auto agent_detect = std::min(detect + jitter(s_.latency.heartbeat_interval),
                                       h.part_until + s_.latency.link.count());
    at(agent_detect, ek::agent_detects, host, 0);
  }

  void on_launcher_detects(std::uint32_t host, std::uint32_t reason) {
    auto& h = hosts_[host];
    if (h.launcher_closed) return;
    h.launcher_closed = true;
    std::string why = reason == 1 ? "its agent did not start"
                      : reason == 2
                          ? "no answer for " + format_duration(s_.latency.heartbeat_timeout)
                          : "no heartbeat for " + format_duration(s_.latency.heartbeat_timeout);
    line("!! the launcher gives up on " + host_name(host) + ": " + why);
    if (reason == 0 && h.detect_bound >= 0 && now_ > h.detect_bound)
      correctness(host_name(host) + " was declared lost at " + format_duration(sim_time(now_)) +
                  ", later than the model promises (" + format_duration(sim_time(h.detect_bound)) +
                  ")");
    bool any_live = false;
    std::uint32_t first = 0;
    for (auto rank : map_.ranks_on_host(host)) {
      auto& p = procs_[rank];
      if ((p.flags & end_known) == 0 && !any_live) {
        any_live = true;
        first = rank;
      }
      p.flags |= end_known;
    }
    if (any_live && !ctl_.finished())
      note_failure(cause_kind::host_lost, first, host, exit_codes::host_lost);
    feed_ctl(host_lost{host, std::move(why)});
    // The host's output came over the channel that just closed: the output layer sees the end
    // of every stream of it still open (also of ranks that had ended before the loss).
    for (auto rank : map_.ranks_on_host(host)) {
      auto& p = procs_[rank];
      if (p.state == pstate::none || p.state == pstate::failed) continue;
      for (std::uint8_t bit = 0; bit < 2; ++bit) {
        const auto mask = static_cast<std::uint8_t>(1u << bit);
        if ((streams_bits_ & mask) == 0 || (p.seen_closed & mask) != 0) continue;
        p.seen_closed |= mask;
        feed_ctl(stream_closed{rank, static_cast<stream_kind>(bit), 0});
      }
    }
  }

  void on_agent_detects(std::uint32_t host) {
    auto& h = hosts_[host];
    if (h.crashed || !h.agent || h.agent_done || h.agent_closed) return;
    h.agent_closed = true;
    h.agent_detect_at = now_;
    line("!! the agent on " + host_name(host) + " gives up on the launcher");
    feed_agent(host, agent::channel_lost{"no heartbeat from the launcher for " +
                                         format_duration(s_.latency.heartbeat_timeout)});
  }

  // The launcher (pmrun, or the embedding program) receives a signal.
  void on_launcher_signal(int signo) {
    line("!! the launcher receives " + signal_name(signo));
    hash_.add(static_cast<std::uint64_t>(now_));
    hash_.add(0x600 + static_cast<std::uint64_t>(signo));
    if (!ctl_.finished()) {
      ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::launcher_signal)];
      if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP) {
        ++terminating_signals_;
        note_failure(cause_kind::signal, 0, 0, 128 + signo);
      }
      // A forwarded SIGUSR1/2 ends ranks that do not handle it: they did not fail by themselves.
      if (signo != SIGTSTP && signo != SIGCONT) saw_launcher_signal_ = true;
    }
    feed_ctl(signal_received{signo});
  }

  // ---- deliveries ----
  void on_down(std::uint32_t host, std::uint32_t slot) {
    auto& h = hosts_[host];
    auto& batch = down_pool_[slot];
    const bool alive = !h.crashed && !h.agent_fails && !h.agent_closed && !h.agent_done;
    if (alive && !h.agent) {
      h.agent.emplace(agent::options{});
    }
    for (auto& m : batch) {
      if (std::holds_alternative<link::spawn_request>(m)) {
        if (!alive) {
          if (!h.spawns_in_flight.empty()) h.spawns_in_flight.erase(h.spawns_in_flight.begin());
          continue;
        }
        m = arriving_spawn(h);
      }
      if (alive) feed_agent(host, agent::received{std::move(m)});
    }
    down_pool_.give_back(slot);
  }

  void on_up(std::uint32_t host, std::uint32_t slot) {
    std::vector<up_msg> batch;
    batch.swap(up_pool_[slot]);
    if (!hosts_[host].launcher_closed) {
      for (auto& m : batch) receive(host, m);
    }
    batch.clear();
    up_pool_[slot].swap(batch);
    up_pool_.give_back(slot);
  }

  void receive(std::uint32_t host, up_msg& m) {
    if (hosts_[host].launcher_closed) return;  // a host_lost earlier in this batch
    switch (m.k) {
      case up_msg::kind::stream:
        procs_[m.rank].seen_closed |= static_cast<std::uint8_t>(1u << m.stream);
        feed_ctl(stream_closed{m.rank, static_cast<stream_kind>(m.stream), m.value});
        return;
      case up_msg::kind::abort:
        if ((procs_[m.rank].flags & end_known) == 0 && !ctl_.finished()) {
          note_failure(cause_kind::abort_requested, m.rank, host,
                       m.value == 0 ? 1 : static_cast<int>(m.value));
          saw_abort_ = true;
        }
        feed_ctl(abort_requested{m.rank, static_cast<int>(m.value), "simulated MPI_Abort"});
        return;
      case up_msg::kind::agent:
        break;
    }
    std::visit(overloaded{
                   [&](link::started& x) {
                     feed_ctl(rank_started{x.rank, x.pid});
                   },
                   [&](link::spawn_failed& x) {
                     if (x.rank < procs_.size()) {
                       if ((procs_[x.rank].flags & end_known) == 0 && !ctl_.finished())
                         note_failure(cause_kind::spawn_failed, x.rank, host, x.code);
                       procs_[x.rank].flags |= end_known;
                     }
                     feed_ctl(rank_spawn_failed{x.rank, x.code, x.reason});
                   },
                   [&](link::exited& x) {
                     if (x.rank < procs_.size()) {
                       if ((procs_[x.rank].flags & end_known) == 0 && !x.status.success() &&
                           !ctl_.finished())
                         note_failure(cause_kind::rank_failed, x.rank, host, x.status.shell_code());
                       procs_[x.rank].flags |= end_known;
                     }
                     feed_ctl(rank_exited{x.rank, x.status});
                   },
                   [&](link::agent_error& x) {
                     line("   the agent on " + host_name(host) + " reports: " + x.text);
                   },
                   [&](auto&) {},  // hello, shutdown_done
               },
               m.msg);
  }

  void dispatch(const sim_event& e) {
    switch (e.kind) {
      case ek::job_start:
        feed_ctl(job_start{});
        return;
      case ek::down:
        on_down(e.a, e.b);
        return;
      case ek::up:
        on_up(e.a, e.b);
        return;
      case ek::spawned:
        on_spawned(e.a, e.b);
        return;
      case ek::reacted:
        on_reacted(e.b);
        return;
      case ek::script_step: {
        auto& p = procs_[e.a];
        if (p.state != pstate::running) return;
        if (e.b == 0) {
          close_streams(e.a);
        } else {
          up_msg m;
          m.k = up_msg::kind::abort;
          m.rank = e.a;
          m.value = static_cast<std::uint64_t>(script(e.a).value);
          send_up(procs_[e.a].host, std::move(m));
        }
        return;
      }
      case ek::proc_end:
        die(e.a, decode(e.b));
        return;
      case ek::ctl_timer: {
        const std::uint64_t id = e.a | (std::uint64_t{e.b} << 32);
        auto it = timers_.find(id);
        if (it == timers_.end()) return;
        const auto state = it->second;
        timers_.erase(it);
        if (state == timer_state::cancelled) return;  // cancelled in time
        if (state == timer_state::racing) ++result_.stats.timers_after_cancel;
        feed_ctl(timer_fired{id});
        return;
      }
      case ek::agent_timer:
        feed_agent(e.a, agent::timer_fired{e.b});
        return;
      case ek::host_crash:
        on_crash(e.a);
        return;
      case ek::partition_begin:
        on_partition(e.a);
        return;
      case ek::launcher_detects:
        on_launcher_detects(e.a, e.b);
        return;
      case ek::agent_detects:
        on_agent_detects(e.a);
        return;
      case ek::launcher_signal:
        on_launcher_signal(static_cast<int>(e.a));
        return;
    }
  }

  // ---- the contract ----
  bool rank_hit(std::uint32_t rank) const {
    const auto& p = procs_[rank];
    const auto& h = hosts_[procs_[rank].host];
    return (p.flags & (f_spawn_fail | f_lost_exit)) != 0 || !script(rank).succeeds() || h.crashed ||
           h.launcher_closed || h.agent_fails;
  }

  void check_report(const job_report& r) {
    for (const auto& rr : r.ranks) {
      if (rr.state == rank_state::pending || rr.state == rank_state::running) {
        correctness("the job finished while rank " + std::to_string(rr.rank) + " was " +
                    pm::to_string(rr.state));
        break;
      }
    }
    const auto& f = first_failure_;
    const bool timeout_set = s_.control.timeout.count() > 0;
    if (r.cause == cause_kind::timeout) {
      if (!timeout_set) correctness("the job timed out without a timeout set");
      if (f.kind != cause_kind::none &&
          f.t < std::chrono::duration_cast<sim_time>(s_.control.timeout).count())
        correctness("the job reported a timeout, but " + std::string(pm::to_string(f.kind)) +
                    " (rank " + std::to_string(f.rank) + ") came first");
    } else if (f.kind == cause_kind::signal) {
      if (r.cause != cause_kind::signal || r.exit_code != f.code)
        correctness("the launcher's " + signal_name(f.code - 128) +
                    " came first, but the report says " + pm::to_string(r.cause) + " with code " +
                    std::to_string(r.exit_code) + ": " + r.summary);
    } else if (f.kind == cause_kind::none) {
      if (r.exit_code != 0 || r.cause != cause_kind::none)
        correctness("no rank failed, yet the job ended with code " + std::to_string(r.exit_code) +
                    " (" + r.summary + ")");
    } else {
      if (r.cause != f.kind || r.exit_code != f.code || r.failed_host != f.host ||
          (f.kind != cause_kind::host_lost && r.failed_rank != f.rank))
        correctness("the first failure was " + std::string(pm::to_string(f.kind)) + " of rank " +
                    std::to_string(f.rank) + " on " + host_name(f.host) + " (exit code " +
                    std::to_string(f.code) + "), but the report says " + pm::to_string(r.cause) +
                    " with code " + std::to_string(r.exit_code) + ": " + r.summary);
    }
    // An abort signals every rank that is still running: a rank whose end the controller learned
    // after the abort began must have been sent a signal (SIGTERM, or SIGKILL after the grace).
    const bool aborted = r.cause != cause_kind::none &&
                         (s_.control.abort_on_failure || r.cause == cause_kind::signal ||
                          r.cause == cause_kind::timeout);
    if (aborted) {
      const std::int64_t began =
          r.cause == cause_kind::timeout
              ? std::chrono::duration_cast<sim_time>(s_.control.timeout).count()
              : f.t;
      for (const auto& rr : r.ranks) {
        if (rr.state != rank_state::exited && rr.state != rank_state::killed) continue;
        if (f.kind != cause_kind::none && rr.rank == f.rank) continue;
        if (!rr.ended_at || rr.ended_at->count() <= began) continue;
        if ((procs_[rr.rank].flags & signalled) != 0) continue;
        correctness("rank " + std::to_string(rr.rank) + " ended at " +
                    format_duration(*rr.ended_at) + ", after the abort began at " +
                    format_duration(sim_time(began)) + ", and was never signalled");
        break;
      }
    }
    // Without abort, every rank that no fault touched runs to completion and succeeds.
    if (!s_.control.abort_on_failure && !saw_abort_ && !saw_launcher_signal_ && !timeout_set) {
      for (const auto& rr : r.ranks) {
        if (rank_hit(rr.rank)) continue;
        if (rr.state != rank_state::exited || !rr.status || !rr.status->success()) {
          correctness("with abort off, rank " + std::to_string(rr.rank) +
                      ", untouched by any fault, ended " + pm::to_string(rr.state) +
                      (rr.status ? " (" + rr.status->describe() + ")" : std::string()));
          break;
        }
      }
    }
  }

  void final_checks() {
    if (!finish_seen_ && ctl_.finished()) {
      liveness(
          "the controller considers the job finished but never told the driver (no finish "
          "action): a real launcher would wait forever");
      return;
    }
    if (!finish_seen_) {
      std::uint32_t not_ended = 0;
      std::optional<std::uint32_t> example;
      const auto report = ctl_.report();
      for (const auto& rr : report.ranks) {
        if (rr.state == rank_state::pending || rr.state == rank_state::running) {
          ++not_ended;
          if (!example) example = rr.rank;
        }
      }
      std::string text =
          "no events left, but the job is not finished: " + std::to_string(not_ended) +
          (not_ended == 1 ? " rank not ended" : " ranks not ended");
      if (example)
        text += " (e.g. rank " + std::to_string(*example) + ", " +
                pm::to_string(report.ranks[*example].state) + " as the controller sees it)";
      liveness(std::move(text));
      return;
    }
    std::uint32_t reported = 0;
    for (std::uint32_t rank = 0; rank < procs_.size() && reported < 3; ++rank) {
      const auto& p = procs_[rank];
      if (p.state == pstate::running || p.state == pstate::spawning ||
          (p.flags & leftover_alive) != 0) {
        correctness("rank " + std::to_string(rank) + " on " + host_name(procs_[rank].host) +
                    " still runs after the job ended");
        ++reported;
      }
    }
    for (std::uint32_t host = 0; host < hosts_.size(); ++host) {
      const auto& h = hosts_[host];
      if (h.agent && !h.agent_done && !h.crashed)
        liveness("the agent on " + host_name(host) + " never exited");
      if (h.agent_detect_at >= 0 && h.last_death >= 0) {
        const auto bound = h.agent_detect_at +
                           std::chrono::duration_cast<sim_time>(s_.control.kill_grace).count() +
                           1'000'000;
        if (h.last_death > bound)
          correctness("a process of the old job ran on " + host_name(host) + " until " +
                      format_duration(sim_time(h.last_death)) +
                      ", after its agent lost the launcher at " +
                      format_duration(sim_time(h.agent_detect_at)));
      }
    }
  }

  const scenario& s_;
  const run_options& o_;
  prng rng_;
  rank_map map_;
  controller ctl_;
  std::vector<process_script> scripts_;
  std::vector<proc_rec> procs_;
  std::vector<host_rec> hosts_;
  event_queue queue_;
  std::int64_t now_ = 0;
  std::uint64_t max_events_ = 0;
  std::uint8_t streams_bits_ = 3;

  std::vector<action> ctl_out_;
  std::vector<agent::action> agent_out_;
  batch_pool<link::message> down_pool_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pending_down_;
  batch_pool<up_msg> up_pool_;
  batch_pool<batch_entry> batch_pool_;                              // spawns and reactions
  std::vector<batch_entry> spawn_batch_, kill_batch_, term_batch_;  // of one agent step
  std::vector<std::uint32_t> sweeps_due_;  // hosts whose agent asked for a sweep in this event
  std::vector<up_msg> up_batch_;
  std::uint32_t up_host_ = 0;
  // The controller's timers, until they fire. `racing`: cancelled, but its handler was already
  // queued and runs anyway (the Asio race).
  enum class timer_state : std::uint8_t { armed, cancelled, racing };
  std::unordered_map<std::uint64_t, timer_state> timers_;
  bool a_timer_is_racing() const {
    return std::any_of(timers_.begin(), timers_.end(),
                       [](const auto& t) { return t.second == timer_state::racing; });
  }

  std::uint64_t live_procs_ = 0;       // spawning or running
  std::uint64_t leftovers_alive_ = 0;  // ended ranks whose child holds their streams
  std::uint64_t agents_pending_ = 0;   // launched agents that have not exited (or crashed)
  failure_seen first_failure_;
  bool saw_abort_ = false;
  bool saw_launcher_signal_ = false;       // one that ends or signals ranks
  std::uint32_t terminating_signals_ = 0;  // SIGINT/SIGTERM/SIGHUP fed before the finish
  bool finish_seen_ = false;
  std::int64_t grace_started_at_ = -1;  // the first timer as long as the kill grace
  trace_hash hash_;
  run_result result_;
};

}  // namespace

run_result run(const scenario& s, const run_options& options) {
  world w(s, options);
  return w.run();
}

}  // namespace pm::sim
