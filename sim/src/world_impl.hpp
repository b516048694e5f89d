// The simulated world around the real controller, the real node agent and the real agent link
// (docs/simulator.md). One class, its member functions in a file per concept:
//
//   world.cpp           the run loop, events, bookkeeping, the public entry points
//   launcher_side.cpp   the driver of the controller: its actions, the launch plan, the
//                       launcher's end of every host's link (as job_runner drives them)
//   agent_side.cpp      per host: the agent's start, the agent machine and its end of the link
//                       (as pmd drives them)
//   links.cpp           the virtual streams between the two ends: latency, jitter, partitions,
//                       the endpoints' timers (heartbeats, silence, the hello deadline)
//   processes.cpp       simulated processes following their scripts, signals, sweeps
//   faults.cpp          crashes, partitions, launcher signals
//   checks.cpp          the contract, checked against what happened
//   tracing.cpp         the trace hash and the readable trace
//
// What is NOT here: any decision of the controller, the agent or the link endpoint. The checks
// compare what happened with the contract (docs/failure-semantics.md), never with a second
// implementation of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/agent.hpp"
#include "event_queue.hpp"
#include "link/endpoint.hpp"
#include "pm/sim/random.hpp"
#include "pm/sim/world.hpp"
#include "trace.hpp"
#include "transport/srun/caller_gate.hpp"
#include "virtual_stream.hpp"

// GCC 12 sees std::variant moves as "maybe uninitialized" (see libpm/src/agent/agent.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace pm::sim {

inline constexpr std::int64_t pid_base = 1000;       // a rank's simulated pid is pid_base + rank
inline constexpr std::int64_t agent_pid_base = 100;  // an agent's: agent_pid_base + host

// A rank in a batch: its fork time (spawns; -1: the exec failed) or its end (reactions).
struct batch_entry {
  std::uint32_t rank;
  std::int64_t value;
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

// One host: its agent, the two ends of its link and the streams between them.
struct host_rec {
  std::optional<agent::agent> agent;
  std::optional<link::endpoint> launcher_end;  // from the first spawn on
  std::optional<link::endpoint> agent_end;     // while its agent runs
  virtual_stream down;                         // launcher -> agent
  virtual_stream up;                           // agent -> launcher
  bool launched = false, agent_fails = false, crashed = false;
  bool launcher_down = false;  // the launcher's end went down (host lost, or its agent's end)
  bool agent_link_down = false;
  bool agent_done = false;
  bool shutdown_sent = false;
  bool touched = false;                     // in world::touched_ this event
  bool down_loud = false, up_loud = false;  // output other than heartbeats this event
  bool partition_fired = false;
  bool partition_noticed = false;  // a side of its link went down during its partition
  // Connect-back (scenario::connect_back): its agent's call, as the launcher's caller_gate saw it.
  bool called = false;        // the gate accepted its agent: the link's bytes flow
  bool call_refused = false;  // the gate refused its agent's call: the connection is closed
  bool lost_call = false;     // fault: the call never arrives
  bool dup_call = false;      // fault: the agent calls twice
  bool silent = false;        // fault: the host never answers (no agent, no byte)
  bool greeted = false;       // the launcher's end saw its agent's hello
  bool abandoned = false;     // the job ended before its hello: the launcher gave it up
  // Spawn requests the launcher holds until the launch facts are decided (rank 0's host's hello),
  // as job_runner holds them (decide_facts).
  std::vector<link::spawn_request> held;
  std::int64_t launcher_start = -1;  // when the launcher began reaching it (its end started)
  std::int64_t agent_start = -1;     // when its agent runs
  std::int64_t spawn_free = 0;       // when its agent can fork the next rank
  std::int64_t part_from = -1, part_until = -1;
  std::int64_t crash_at = -1;
  std::int64_t tick_at = -1;          // the link_tick event pending for its endpoints
  std::int64_t detect_bound = -1;     // the latest its loss may be noticed after a fault
  std::int64_t agent_detect_at = -1;  // its agent gave up on the launcher
  std::int64_t last_death = -1;
  std::int64_t late_call = -1;  // connect-back fault: the agent calls only then
};

std::uint32_t encode(exit_status s);
exit_status decode(std::uint32_t v);

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
// Clang 14 does not deduce aggregate template arguments yet (the asan build uses it).
template <class... F>
overloaded(F...) -> overloaded<F...>;

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
  world(const scenario& s, const run_options& o);
  run_result run();

 private:
  // ---- world.cpp: bookkeeping ----
  void at(std::int64_t t, ek kind, std::uint32_t a, std::uint32_t b);
  std::int64_t jitter(sim_time max) { return rng_.between(0, max.count()); }
  void dispatch(const sim_event& e);
  bool settled() const;
  bool idle_too_long() const;
  void problem(verdict v, std::string text);
  void correctness(std::string text) { problem(verdict::correctness, std::move(text)); }
  void liveness(std::string text) { problem(verdict::liveness, std::move(text)); }
  const std::string& host_name(std::uint32_t host) const {
    return map_.allocation().hosts[host].name;
  }
  const process_script& script(std::uint32_t rank) const { return scripts_[procs_[rank].script]; }

  // ---- tracing.cpp ----
  bool tracing() const { return static_cast<bool>(o_.trace); }
  void line(const std::string& text);
  void trace_event(const event& e);
  void trace_action(const action& a);

  // ---- launcher_side.cpp: the controller's driver and the launcher's ends ----
  void note_failure(cause_kind kind, std::uint32_t rank, std::uint32_t host, int code);
  void feed_ctl(const event& e);
  void execute(action& a);
  void launch(std::uint32_t host);
  std::int64_t agent_start_delay(std::uint32_t node);
  void do_spawn(const spawn& x);
  void do_signal(signal_ranks&& x);
  void do_finish(finish&& x);
  void send_down(std::uint32_t host, const link::message& m);
  link::job_setup setup_for(std::uint32_t host) const;
  link::endpoint_options launcher_link_options() const;
  void on_launcher_events(std::uint32_t host, std::vector<link::link_event>& events);
  void on_agent_message(std::uint32_t host, link::message& m);
  void on_launcher_link_down(std::uint32_t host, const std::string& reason);
  void on_greeted(std::uint32_t host);
  void give_up_setup();
  void abandon(std::uint32_t host);
  void on_abort_request(std::uint32_t host, std::uint32_t rank, int status);

  // ---- agent_side.cpp: the agents and their ends ----
  void on_agent_starts(std::uint32_t host);
  void feed_agent(std::uint32_t host, agent::event e);
  void step_agent(std::uint32_t host, agent::event e);
  void flush_host_batches(std::uint32_t host);
  void on_agent_events(std::uint32_t host, std::vector<link::link_event>& events);
  void agent_exits(std::uint32_t host);

  // ---- links.cpp: the virtual streams and the endpoints' timers ----
  std::int64_t arrival(host_rec& h, virtual_stream& s, std::int64_t not_before);
  void touch(std::uint32_t host);
  void flush_touched();
  void flush_end(std::uint32_t host, host_rec& h, bool launcher_side);
  void deliver(std::uint32_t host, bool to_launcher);
  void on_link_arrival(std::uint32_t host, bool to_launcher);
  void on_link_tick(std::uint32_t host);
  void arm_tick(std::uint32_t host, host_rec& h);
  std::int64_t detection_promise() const;

  // ---- processes.cpp ----
  void start_process(std::uint32_t host, const agent::process_spec& spec);
  void on_spawned(std::uint32_t host, std::uint32_t slot);
  void spawn_failed(std::uint32_t rank);
  void started(std::uint32_t rank, std::int64_t forked);
  void on_reacted(std::uint32_t slot);
  void on_script_step(std::uint32_t rank, std::uint32_t step);
  void close_streams(std::uint32_t rank);
  void die(std::uint32_t rank, exit_status status);
  void deliver_signal(std::uint32_t rank, int signo);
  void run_sweeps();

  // ---- faults.cpp ----
  void plan(const fault& f);
  void on_crash(std::uint32_t host);
  void on_partition(std::uint32_t host);
  void on_launcher_signal(int signo);
  void on_forged_call(std::uint32_t host);

  // ---- connect-back (links.cpp): the call, judged by the launcher's real caller_gate ----
  bool pass_call(std::uint32_t host, host_rec& h, const virtual_stream::piece& p,
                 std::span<const std::uint8_t>& bytes);
  void refuse_call(std::uint32_t host, host_rec& h, const std::string& why);

  // ---- checks.cpp ----
  bool rank_hit(std::uint32_t rank) const;
  void check_report(const job_report& r);
  void final_checks();

  const scenario& s_;
  const run_options& o_;
  prng rng_;
  rank_map map_;
  controller ctl_;
  std::uint64_t nonce_;
  std::string token_;                      // connect-back: the job's token, from the seed
  std::optional<srun::caller_gate> gate_;  // connect-back: the launcher's
  // Connect-back: per host, what arrived of its agent's greeting line (until the gate decided).
  std::unordered_map<std::uint32_t, std::string> greetings_;
  std::vector<process_script> scripts_;
  std::vector<proc_rec> procs_;
  std::vector<host_rec> hosts_;
  event_queue queue_;
  std::int64_t now_ = 0;
  std::uint64_t max_events_ = 0;
  std::uint8_t streams_bits_ = 3;

  std::vector<action> ctl_out_;
  std::vector<agent::action> agent_out_;
  std::vector<link::link_event> link_events_;
  batch_pool<batch_entry> batch_pool_;                              // spawns and reactions
  std::vector<batch_entry> spawn_batch_, kill_batch_, term_batch_;  // of one agent step
  std::vector<std::uint32_t> sweeps_due_;  // hosts whose agent asked for a sweep in this event
  std::vector<std::uint32_t> touched_;     // hosts whose link ends were used in this event
  // Agent events that actions produced, fed after the batch that produced them (pmd's pending_).
  std::vector<std::pair<std::uint32_t, agent::event>> agent_backlog_;
  bool in_agent_step_ = false;
  std::vector<std::pair<std::uint32_t, std::string>> agent_reasons_;  // why agents lost the link
  std::vector<link::link_event> tick_events_;
  // The controller's timers, until they fire. `racing`: cancelled, but its handler was already
  // queued and runs anyway (the Asio race).
  enum class timer_state : std::uint8_t { armed, cancelled, racing };
  std::unordered_map<std::uint64_t, timer_state> timers_;
  bool a_timer_is_racing() const;

  std::uint64_t live_procs_ = 0;       // spawning or running
  std::uint64_t leftovers_alive_ = 0;  // ended ranks whose child holds their streams
  std::uint64_t agents_pending_ = 0;   // launched agents that have not exited (or crashed)
  std::uint64_t pending_work_ = 0;     // queued events other than link ticks
  std::int64_t last_progress_ = 0;     // the last event that was more than heartbeats
  failure_seen first_failure_;
  bool saw_abort_ = false;
  bool saw_launcher_signal_ = false;       // one that ends or signals ranks
  std::uint32_t terminating_signals_ = 0;  // SIGINT/SIGTERM/SIGHUP fed before the finish
  bool finish_seen_ = false;
  // The launch facts (MASTER_ADDR, ...) are decided: spawns are no longer held.
  bool facts_ready_ = false;
  // The job began to end: what was still being set up was given up (give_up_setup).
  bool setup_given_up_ = false;
  // A host lost before its hello made the controller end the job although the abort policy is
  // off (a set-up failure ends a launch whatever the policy): from then on ranks are ended.
  std::int64_t forced_abort_at_ = -1;
  std::int64_t grace_started_at_ = -1;  // the first timer as long as the kill grace
  trace_hash hash_;
  run_result result_;
};

}  // namespace pm::sim
