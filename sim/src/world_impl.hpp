// The simulated world around the real launcher machine (which owns the real controller and one
// real link endpoint per host), the real node agent and the agents' real link ends
// (docs/simulator.md). One class, its member functions in a file per concept:
//
//   world.cpp             the run loop, events, bookkeeping, the public entry points
//   launcher_driver.cpp   the launcher machine's driver: its inputs, its actions carried out
//   controller_watch.cpp  the controller's events and actions as the launcher feeds them
//                         (launch_config::watch_controller): trace, tamper, the action checks
//   virtual_transport.cpp open_host/close_host as ssh or srun would: agent starts, set-up slots,
//                         carriers' ends, the connect-back caller gate
//   agent_side.cpp        per host: the agent's start, the host machine (agent, PMIx relay, child
//                         relay) and its end of the link, driven as pmd drives them
//   relay.cpp             per host: the child agents' carriers, as pmd's child_agents carries
//                         out the host machine's child actions
//   pmix_clients.cpp      the modelled PMIx server and clients of the simulated ranks (fences,
//                         aborts, spawns), answering the host machine's PMIx actions
//   links.cpp             the virtual streams: latency, jitter, partitions, quiet pieces, ticks
//   processes.cpp         simulated processes following their scripts, signals, sweeps
//   faults.cpp            crashes, partitions, launcher signals
//   checks.cpp            the contract, checked against what happened
//   tracing.cpp           the trace hash and the readable trace
//
// What is NOT here: any decision of the launcher, the controller, the agent or the link
// endpoint. The checks compare what happened with the contract (docs/failure-semantics.md),
// never with a second implementation of it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/host_machine.hpp"
#include "event_queue.hpp"
#include "launch/launcher.hpp"
#include "link/endpoint.hpp"
#include "model/overloaded.hpp"
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
inline constexpr std::int64_t carrier_pid_base = 1'000'000'000;  // ssh of a host, on its starter
inline constexpr std::uint32_t no_host = 0xffffffffu;

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
  std::uint8_t gen = 0;      // how often it was started (a restart starts it again), mod 128
  std::uint32_t script = 0;  // index into world::scripts_
  std::uint32_t host = 0;    // cached from the rank map (rank_map::at touches five arrays)
};

// What carries a host's stream on the launcher's side (ssh, or srun's step and a caller).
enum class carrier : std::uint8_t {
  none,     // never opened, or ended
  waiting,  // ssh waits for one of the set-up slots
  running,  // started; the agent is on its way or runs
  closing,  // the launcher closed the stream: ssh ends with the agent, or is killed
};

// One host: its agent, its end of the link and the streams to whoever started it (the launcher,
// or the agent of its tree parent, which relays its bytes).
struct host_rec {
  std::optional<agent::host_machine> agent;  // pmd's machine, while it runs (agent_done: ran)
  std::optional<link::endpoint> agent_end;   // while its agent runs
  virtual_stream down;                       // starter -> agent
  virtual_stream up;                         // agent -> starter
  std::vector<std::uint32_t> children;       // the carriers its agent runs (start_child)
  std::uint32_t parent = no_host;            // the agent that started it; no_host: the launcher
  std::uint32_t plan_parent = no_host;       // the agent the launch plan has start it
  std::uint32_t starts = 0;                  // agent starts asked for (retries start another)
  carrier ssh = carrier::none;
  bool slot_held : 1 = false;    // holds one of the launcher's set-up slots (ssh's cap)
  bool up_ended : 1 = false;     // the starter read the end of `up` (the agent's side is over)
  bool established : 1 = false;  // its agent said hello to the launcher (host_established)
  bool agent_fails : 1 = false;
  bool crashed : 1 = false;
  bool agent_link_down : 1 = false;
  bool agent_done : 1 = false;
  bool touched : 1 = false;    // in world::touched_ this event
  bool write_due : 1 = false;  // the launcher asked for its output to be written (write_host)
  bool up_loud : 1 = false;    // its agent wrote more than heartbeats this event
  bool partition_fired : 1 = false;
  bool partition_noticed : 1 = false;  // a side of its link went down during its partition
  bool lost : 1 = false;               // the controller was told it is lost
  bool shutdown_seen : 1 = false;      // its agent received the job's shutdown
  // Connect-back (scenario::connect_back): its agent's call, as the launcher's caller_gate saw it.
  bool called : 1 = false;        // the gate accepted its agent: the link's bytes flow
  bool call_refused : 1 = false;  // the gate refused its agent's call: the connection is closed
  bool lost_call : 1 = false;     // fault: the call never arrives
  bool dup_call : 1 = false;      // fault: the agent calls twice
  bool silent : 1 = false;        // fault: the host never answers (no agent, no byte)
  bool ssh_failed : 1 = false;    // its latest ssh ended with 255 before the agent ran
  std::uint8_t ssh_failures = 0;  // fault: its next ssh attempts that end with 255
  int exit_code = 0;              // its agent's exit status (what ssh exits with)
  std::int64_t open_at = -1;      // when the launcher first asked for it (open_host/child_open)
  std::int64_t agent_start = -1;  // when its (latest) agent runs
  std::int64_t spawn_free = 0;    // when its agent can fork the next rank
  std::int64_t part_from = -1, part_until = -1;
  std::int64_t crash_at = -1;
  std::int64_t tick_at = -1;          // the link_tick event pending for its two ends
  std::int64_t launcher_due = -1;     // the launcher's link_deadline for it
  std::int64_t detect_bound = -1;     // the latest its loss may be noticed after a fault
  std::int64_t agent_detect_at = -1;  // its agent gave up on the launcher
  std::int64_t last_death = -1;
  std::int64_t late_call = -1;  // connect-back fault: the agent calls only then
};

// The last stderr line of the carrier of a host whose agent never ran (ssh_end and child_closed
// name it): sshd's drop in the key exchange (a retryable 255), the remote shell's complaint
// when there is no agent, else nothing.
inline std::string_view carrier_said(const host_rec& h) {
  if (h.ssh_failed) return "kex_exchange_identification: read: Connection reset by peer";
  if (h.agent_fails) return "bash: pmd: command not found";
  return {};
}

std::uint32_t encode(exit_status s);
exit_status decode(std::uint32_t v);

// The first failure the controller was fed, as the contract defines failures.
struct failure_seen {
  cause_kind kind = cause_kind::none;
  std::uint32_t rank = 0;
  std::uint32_t host = 0;
  int code = 0;
  std::int64_t t = 0;
};

// An input for the launcher that answers one of its actions: fed after the batch, never nested.
struct launcher_answer {
  enum class kind : std::uint8_t {
    stream_opened,
    carrier_ended,
    output_ended,
    output_taken,
    output_drained,
  };
  kind what;
  std::uint32_t host = 0;  // stream_opened, carrier_ended; output_ended: the rank
  std::uint8_t stream = 0;
  std::uint64_t value = 0;  // stream_opened: the carrier's pid; output_ended: bytes
  agent_end end;
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
    return map_->allocation().hosts[host].name;
  }
  const process_script& script(std::uint32_t rank) const { return scripts_[procs_[rank].script]; }
  const controller& ctl() const { return launcher_->control(); }

  // ---- tracing.cpp ----
  bool tracing() const { return static_cast<bool>(o_.trace); }
  void line(const std::string& text);
  void trace_event(const event& e);
  void trace_action(const action& a);

  // ---- topologies.cpp: what each host's agent answers for its shape ----
  agent::options agent_options(std::uint32_t host) const;

  // ---- launcher_driver.cpp: the launcher machine's driver ----
  launch::launch_config launch_config_for();
  // One input of the launcher (`input` calls it with launcher_out_), then its actions and the
  // answers they ask for.
  template <class F>
  void feed_launcher(F&& input) {
    begin_input();
    input(launcher_out_);
    carry_out_all();
  }
  void begin_input();
  void carry_out_all();
  void carry_out(launch::launch_action& a);
  void answer_later(launcher_answer a) { answers_.push_back(std::move(a)); }
  void new_incarnation(incarnation_report ended);
  void rank_restarted(rank_restart_report r);
  void forget_rank(std::uint32_t host, std::uint32_t rank);
  void next_incarnation();
  void on_finished(job_report&& report);

  // ---- controller_watch.cpp: the controller's steps, as the launcher runs them ----
  void watch_controller(const event& in, std::vector<action>& actions);
  void note_failure(cause_kind kind, std::uint32_t rank, std::uint32_t host, int code);
  void note_event(const event& e);
  void check_action(const action& a);
  void note_host_lost(const host_lost& x);
  bool struck(std::uint32_t host) const;

  // ---- virtual_transport.cpp: open_host, close_host, carriers ----
  void open_host(std::uint32_t host);
  void start_ssh(std::uint32_t host);
  void release_slot(std::uint32_t host);
  void schedule_agent(std::uint32_t host, std::int64_t start);
  void close_host(std::uint32_t host);
  void on_carrier_end(std::uint32_t host, std::uint32_t start);
  void carrier_done(std::uint32_t host, int code, int signo);
  bool pass_call(std::uint32_t host, host_rec& h, std::span<const std::uint8_t>& bytes);
  void refuse_call(std::uint32_t host, host_rec& h, const std::string& why);

  // ---- agent_side.cpp: the agents and their ends ----
  void on_agent_starts(std::uint32_t host, std::uint32_t start);
  void feed_agent(std::uint32_t host, agent::host_event e);
  void step_agent(std::uint32_t host, agent::host_event e);
  void carry_out_agent(std::uint32_t host, agent::action& a);
  void flush_host_batches(std::uint32_t host);
  void on_agent_events(std::uint32_t host, std::vector<link::link_event>& events);
  void agent_send(std::uint32_t host, const link::message& m);
  void agent_exits(std::uint32_t host, int code);

  // ---- relay.cpp: the child agents' carriers (the host machine's child actions) ----
  void carry_out_child(std::uint32_t parent, agent::child_action& a);
  void start_child(std::uint32_t parent, const agent::start_child& x);
  void write_child(std::uint32_t parent, agent::write_child& x);
  void close_child_input(std::uint32_t parent, std::uint32_t child, std::int64_t from);
  void child_carrier_gone(std::uint32_t parent, std::uint32_t child, int signo);
  void relay_up(std::uint32_t child, const virtual_stream::piece& p,
                std::span<const std::uint8_t> bytes);
  bool is_child_of(std::uint32_t child, std::uint32_t parent) const;

  // ---- pmix_clients.cpp: the modelled PMIx server and clients ----
  bool pmix_job() const { return pmix_on_; }
  void carry_out_pmix(std::uint32_t host, agent::pmix_action& a);
  void start_pmix(std::uint32_t host);
  void client_started(std::uint32_t rank, std::int64_t begin);
  void client_ends(std::uint32_t rank, bool finalize);
  bool client_blocked(std::uint32_t rank, std::uint32_t step, std::uint32_t value);
  void next_call(std::uint32_t rank);
  void make_call(std::uint32_t rank);
  void call_abort(std::uint32_t rank);
  void fence_called(std::uint32_t host, std::uint32_t rank);
  void release(std::uint32_t rank);
  void add_spawned(const job_spawned& x);
  template <class F>
  void for_ranks_on_host(std::uint32_t host, F&& f) {
    for (auto rank : map_->ranks_on_host(host)) f(rank);
    if (const auto it = spawned_on_.find(host); it != spawned_on_.end()) {
      for (std::size_t i = 0; i < it->second.size(); ++i) f(it->second[i]);
    }
  }

  // ---- links.cpp: the virtual streams and the ends' timers ----
  std::int64_t arrival(host_rec& h, virtual_stream& s, std::int64_t from, std::int64_t not_before);
  void touch(std::uint32_t host);
  void flush_touched();
  void flush_launcher(std::uint32_t host, host_rec& h);
  void flush_agent(std::uint32_t host, host_rec& h, std::int64_t from, bool loud);
  bool quiet(std::span<const std::uint8_t> bytes) const;
  void deliver(std::uint32_t host, bool to_starter);
  void pull(std::uint32_t host);
  void on_link_arrival(std::uint32_t host, bool to_starter);
  void on_link_tick(std::uint32_t host);
  void arm_tick(std::uint32_t host, host_rec& h);
  std::int64_t detection_promise() const;

  // ---- processes.cpp ----
  // A process's events carry its generation above their value (bits 17..23 of an event's b, 32..
  // of a batch entry's), so that what a restart's sweep ended never reaches the next process of
  // that rank. `untag` strips it and says whether the event is the current process's.
  static constexpr unsigned gen_shift = 17;
  std::uint32_t tag(std::uint32_t rank, std::uint32_t value) const {
    return value | (static_cast<std::uint32_t>(procs_[rank].gen & 0x7fu) << gen_shift);
  }
  bool untag(std::uint32_t rank, std::uint32_t& value) const {
    const auto g = value >> gen_shift;
    value &= (1u << gen_shift) - 1;
    return rank < procs_.size() && g == (procs_[rank].gen & 0x7fu);
  }
  void start_process(std::uint32_t host, const agent::process_spec& spec);
  void on_spawned(std::uint32_t host, std::uint32_t slot);
  void spawn_failed(std::uint32_t rank);
  void started(std::uint32_t rank, std::int64_t forked);
  void fork_now(std::uint32_t rank);
  void on_reacted(std::uint32_t slot);
  void on_script_step(std::uint32_t rank, std::uint32_t step);
  void on_proc_end(std::uint32_t rank, std::uint32_t status);
  void close_streams(std::uint32_t rank);
  void die(std::uint32_t rank, exit_status status);
  void deliver_signal(std::uint32_t rank, int signo);
  void run_sweeps();
  void sweep_ranks(std::uint32_t host);
  void forget_ranks(std::uint32_t host);

  // ---- faults.cpp ----
  void plan(const fault& f);
  void on_crash(std::uint32_t host);
  void on_partition(std::uint32_t host);
  void first_opened(std::uint32_t host, std::int64_t at);
  void on_launcher_signal(int signo);
  void on_forged_call(std::uint32_t host);

  // ---- checks.cpp ----
  bool rank_hit(std::uint32_t rank) const;
  // Stalls (fault stall:R@T): when each stalled rank stops progressing, and whether the fault
  // was counted as fired. Sparse: few ranks stall.
  std::unordered_map<std::uint32_t, std::pair<std::int64_t, bool>> stalls_;
  bool stalled_now(std::uint32_t rank) const;
  void sample_ranks(std::uint32_t host, const agent::sample_ranks& x);
  void check_report(const job_report& r);
  void final_checks();

  // Timers of the launcher (the controller's among them): an event names a slot and the slot's
  // generation; `racing`: cancelled, but its handler was already queued and runs anyway (the
  // Asio race the controller and the launcher must ignore).
  enum class timer_state : std::uint8_t { free, armed, cancelled, racing };
  struct timer_rec {
    std::uint64_t id = 0;
    std::uint32_t generation = 0;
    timer_state state = timer_state::free;
  };
  void start_timer(std::uint64_t id, std::chrono::milliseconds after);
  void cancel_timer(std::uint64_t id);
  void on_timer(std::uint32_t slot, std::uint32_t generation);

  const scenario& s_;
  const run_options& o_;
  prng rng_;
  // The job's map: built here, then moved into the launcher's config (launch_config_for), whose
  // copy the world reads from then on (100,000 hosts: 12 MB not held twice).
  rank_map own_map_;
  const rank_map* map_ = &own_map_;
  std::uint64_t nonce_;
  std::string token_;                      // connect-back: the job's token, from the seed
  std::optional<srun::caller_gate> gate_;  // connect-back: the srun transport's
  std::optional<launch::launcher> launcher_;
  std::vector<process_script> scripts_;
  // The agents' job setups, shared by agents whose setups are equal (agent_options).
  mutable agent::setup_pool setups_;
  std::vector<proc_rec> procs_;
  std::vector<host_rec> hosts_;
  event_queue queue_;
  std::int64_t now_ = 0;
  std::uint64_t max_events_ = 0;
  std::uint8_t streams_bits_ = 3;
  std::vector<std::uint8_t> heartbeat_frame_;  // a heartbeat as framed on the wire

  launch::actions launcher_out_;
  bool in_launcher_ = false;
  std::deque<launcher_answer> answers_;
  std::vector<agent::host_action> agent_out_;
  std::vector<link::link_event> link_events_;
  batch_pool<batch_entry> batch_pool_;                              // spawns and reactions
  std::vector<batch_entry> spawn_batch_, kill_batch_, term_batch_;  // of one agent step
  std::vector<std::uint32_t> sweeps_due_;       // hosts whose agent asked for a sweep in this event
  std::vector<std::uint32_t> rank_sweeps_due_;  // likewise, a restart's sweep (sweep_ranks)
  std::uint32_t restart_ports_ = 0;             // ports handed out by restarts' sweeps
  std::vector<std::uint32_t> touched_;          // hosts whose link ends were used in this event
  std::vector<std::uint32_t> chain_;            // pull(): a host's starters, nearest first
  // Agent events that actions produced, fed after the batch that produced them (pmd's pending_).
  std::vector<std::pair<std::uint32_t, agent::host_event>> agent_backlog_;
  std::vector<std::uint32_t>
      kids_;  // a tree parent's children, while its tick hands their bytes over
  bool in_agent_step_ = false;
  std::vector<std::pair<std::uint32_t, std::string>> agent_reasons_;  // why agents lost the link
  std::vector<link::link_event> tick_events_;
  // A relayed piece leaves its parent when it arrived there, as loud as it came (relay.cpp).
  std::int64_t relay_from_ = 0;
  bool relay_loud_ = true;
  // The modelled PMIx side (pmix_clients.cpp): a rank that is a PMIx client (its script calls, or
  // it aborts, in a job with PMIx), each host's server, the requests its ranks wait in.
  struct pmix_client {
    std::int64_t begin = 0;       // its script's time zero (fork + slow start)
    std::uint32_t next = 0;       // its next call
    std::uint64_t waits_for = 0;  // the request it is blocked in (0: none)
    std::uint32_t deferred = 0;   // an ending that came while it was blocked: step + 1
    std::uint32_t deferred_value = 0;
  };
  struct pmix_server_model {
    bool up = false;                     // a client connected: the server runs
    std::vector<std::uint32_t> fencing;  // local ranks in the current fence, in call order
  };
  struct pmix_request {
    enum class kind : std::uint8_t { fence, abort, spawn } what;
    std::uint32_t who;  // fence: the host; abort, spawn: the rank
  };
  bool pmix_on_ = false;
  std::uint32_t spawned_script_ = 0;  // what spawned ranks run: the default script, no calls
  std::unordered_map<std::uint32_t, pmix_client> clients_;
  std::unordered_map<std::uint32_t, pmix_server_model> servers_;
  std::unordered_map<std::uint64_t, pmix_request> requests_;
  std::uint64_t next_request_ = 1;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> spawned_on_;  // host: its ranks
  std::vector<timer_rec> timers_;
  std::vector<std::uint32_t> free_timers_;
  std::unordered_map<std::uint64_t, std::uint32_t> timer_slot_;  // looked up, never iterated
  std::uint32_t racing_timers_ = 0;
  // ssh's cap on connections being set up (remote_launch::max_concurrent), in open order.
  std::uint32_t setting_up_ = 0;
  std::vector<std::uint32_t> ssh_queue_;
  std::size_t ssh_queue_head_ = 0;
  // Connect-back: what arrived of each calling host's line (not in host_rec: most runs have none).
  std::unordered_map<std::uint32_t, std::string> greetings_;
  bool srun_step_started_ = false;
  std::int64_t srun_step_at_ = 0;

  std::uint64_t live_procs_ = 0;       // spawning or running
  std::uint64_t leftovers_alive_ = 0;  // ended ranks whose child holds their streams
  std::uint64_t agents_pending_ = 0;   // started agents that have not exited (or crashed)
  std::uint64_t pending_work_ = 0;     // queued events other than link ticks
  std::int64_t last_progress_ = 0;     // the last event that was more than heartbeats
  failure_seen first_failure_;
  bool saw_abort_ = false;
  bool saw_launcher_signal_ = false;        // one that ends or signals ranks
  std::uint32_t terminating_signals_ = 0;   // SIGINT/SIGTERM/SIGHUP fed before the finish
  bool ctl_finished_ = false;               // the controller's finish action went by
  std::uint32_t recovering_ = 0xffffffffu;  // the rank the controller is restarting alone
  std::set<std::uint32_t> respawning_;      // restarted alone, its next process not started
  std::uint32_t incarnations_ = 0;          // controllers started after the first (restarts)
  std::size_t ranks_before_ = 0;            // the last incarnation's ranks (a shrunk job has fewer)
  std::vector<std::uint8_t> spawned_gens_;  // spawned processes' generations, past incarnations
  bool finish_seen_ = false;                // the launcher's finished action
  // A host lost before its hello made the controller end the job although the abort policy is
  // off (a set-up failure ends a launch whatever the policy): from then on ranks are ended.
  std::int64_t forced_abort_at_ = -1;
  std::int64_t grace_started_at_ = -1;  // the first timer as long as the kill grace
  trace_hash hash_;
  run_result result_;
};

}  // namespace pm::sim
