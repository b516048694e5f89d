// The launcher machine's state, shared by the files that hold its concerns:
//   launcher.cpp        inputs, the controller's events and actions, the job's end
//   host_links.cpp      each host's link: open, hello, down, retries, loss, giving up, shutdown
//   tree_relay.cpp      hosts reached through another host's agent (child_open/child_data)
//   spawn_requests.cpp  launch facts, spawn requests, stdin routing, output pushed over links
//   pmix_routing.cpp    PMIx on the launcher's side: fences, modex, spawned jobs, data store
//   host_plans.cpp      hosts' topologies, their plans (cores, GPUs, NICs), refusals
//   restarts.cpp        incarnations: a failed one cleared on every agent, the next started
//   host_discovery.cpp  --host-discovery-script: hosts that join at a restart, quarantined ones
//   back rank_recovery.cpp   --enable-recovery: a failed rank started again alone stall.cpp
//   --stall-timeout: quiet hosts, the stall, its lines (docs/resilience.md)
// Internal to libpm.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "control/data_store.hpp"
#include "control/fence_table.hpp"
#include "launch/launcher.hpp"
#include "launch/spawned_job.hpp"
#include "pm/host_binding.hpp"
#include "pm/report.hpp"

namespace pm::launch {

/// How long the launcher waits for the agents' answers to a stall_query before it names what it
/// has (an agent that does not answer gets a line saying so).
inline constexpr std::chrono::milliseconds stall_answer_bound{1000};
/// One line per stalled host: "stalled on node1: rank 2 (pid 4711, S in futex_wait_queue, cpu
/// 0.02 s, last output 5.3 s ago); rank 3 (...)" (stall.cpp).
std::string stall_line(const std::string& host, const link::stall_report& report);
std::string stall_unanswered_line(const std::string& host, const std::vector<std::uint32_t>& ranks);

// --stall-timeout: one round of asking the quiet hosts' agents what their ranks are doing
// (stall.cpp). At namespace scope: clang 14 cannot default-construct a nested class with member
// initializers inside std::optional::emplace while its enclosing class is being defined.
struct stall_asking {
  std::uint64_t id = 0;
  std::uint64_t timer = 0;
  std::vector<std::uint32_t> hosts;  // asked, ascending
  std::vector<std::optional<link::stall_report>> answers;
  std::uint32_t waiting = 0;
};

/// NAME=VALUE lines, as the link carries a rank's or a host's variables.
inline std::vector<std::string> env_lines(const std::vector<env_var>& vars) {
  std::vector<std::string> v;
  v.reserve(vars.size());
  for (const auto& x : vars) v.push_back(x.name + "=" + x.value);
  return v;
}

/// The controller's options for the request's job (every incarnation's: launcher.cpp).
controller_options control_of(const job_request& r);

struct launcher::impl {
  explicit impl(launch_config c);

  // ---- state ----
  launch_config cfg;
  job_request& req;
  controller ctl;
  actions* out = nullptr;  // the current input's
  link_time now{};

  // What a host's link and its carrier are doing.
  struct host_state {
    std::unique_ptr<link::endpoint> ep;         // the link; none before the first open, or retrying
    std::vector<std::uint32_t> pending_spawns;  // ranks waiting for the launch facts or the link
    std::optional<link::hello> agent;           // its hello
    std::string agent_error;                    // what the agent said before it closed
    std::unique_ptr<link::pmix_server> pmix;    // where its PMIx server is for tools (rare)
    std::int64_t carrier_pid = 0;
    std::uint64_t held_ack = 0;
    std::uint64_t loss_timer = 0;            // waiting to report a loss (on_down)
    std::string down_reason;                 // on_down's, for the carrier's end
    std::optional<link_time> deadline_told;  // the last link_deadline given
    std::uint32_t attempts = 0;
    // When its set-up began (its first stream since it last had an agent): the hello deadline
    // counts from here across ssh's retries, so that set-up is bounded by it, not by it per try.
    std::optional<link_time> setup_since;
    // Flags as bits (100,000 hosts of a simulation each have one host_state).
    bool opened : 1 = false;        // its stream was opened
    bool down : 1 = false;          // the link is over (the endpoint said so, or it was closed)
    bool down_greeted : 1 = false;  // whether its agent had said hello when it went down
    bool closed : 1 = true;         // the carrier ended (or never started)
    bool shutdown_sent : 1 = false;
    bool shutdown_waits : 1 = false;      // for the links it relays to close first
    bool shutdown_confirmed : 1 = false;  // its agent answered the shutdown (shutdown_done)
    bool timed_out : 1 = false;           // its link went down by our deadline (hello, silence)
    bool refused_bytes : 1 = false;       // its link went down for what came on it (not the link)
    bool retrying : 1 = false;            // waiting to connect again
    bool lost_told : 1 = false;           // host_lost went to the controller
    bool loss_reported : 1 = false;     // the loss of this link was decided (timer or carrier end)
    bool lost_with_parent : 1 = false;  // tree: relayed by a host that was lost
    bool abandoned : 1 = false;         // the job ended before its agent answered
    bool touched : 1 = false;           // in `touched`: its output and deadline are looked at
    bool restart_waited : 1 = false;    // a restart request went out; its `restarted` has not come
    bool quiet : 1 = false;             // --stall-timeout: its agent said its ranks are quiet
    bool spare : 1 = false;             // started as a spare (restarts.cpp)
    bool quarantined : 1 = false;       // lost: never used again in this launch
    bool joining : 1 = false;           // named by the discovery command; the restart waits for it
    bool passes_pipes : 1 = false;      // a local agent: its ranks' output comes as pipes
  };
  std::vector<host_state> hosts;  // by allocation index
  std::vector<std::uint32_t> touched;

  // Link events of the input being handled, a buffer per nesting level (a relayed host's events
  // are handled inside its parent's): reused, so that a message costs no allocation here. A deque,
  // so that a deeper level does not move the buffers of the levels above it.
  std::deque<std::vector<link::link_event>> event_buffers;
  std::size_t event_depth = 0;
  struct events_lease {
    impl& m;
    std::vector<link::link_event>& events;
    explicit events_lease(impl& i)
        : m(i),
          events(i.event_depth < i.event_buffers.size() ? i.event_buffers[i.event_depth]
                                                        : i.event_buffers.emplace_back()) {
      ++m.event_depth;
    }
    ~events_lease() {
      events.clear();
      --m.event_depth;
    }
    events_lease(const events_lease&) = delete;
    events_lease& operator=(const events_lease&) = delete;
  };

  // The controller's events, and what the Asio launcher used to post: both run after the
  // current step, in order, never nested (the contract for drivers, kept inside).
  std::deque<event> queue;
  std::deque<std::function<void()>> later;

  // The launcher's own timers.
  enum class timer_kind : std::uint8_t {
    retry,
    loss,
    hurry,
    lookup,
    relay_close,
    restart,
    fence,
    stall,
    deadline,         // --timeout while no incarnation runs
    restart_leftover  // a rank restarted alone whose old streams are still held
  };
  struct own_timer {
    timer_kind kind;
    std::uint32_t host = 0;
    std::uint64_t id = 0;  // lookup: the request's id; stall: the round's
  };
  std::map<std::uint64_t, own_timer> timers;  // ordered: cancels go out in one order in every world
  std::uint64_t next_timer = launcher_timers;
  std::uint64_t hurry_timer = 0;
  std::mt19937_64 jitter;

  bool done = false;
  bool finishing = false;
  bool facts_ready = false;
  bool setup_given_up = false;
  bool setup_kept = false;  // given up, but hosts still being set up go on: a restart may need them
  bool waiting_for_links = false;  // after the drain: `finished` once every link closed
  std::uint32_t interrupts = 0;
  std::optional<job_report> final_report;  // its ranks' reports from ctl at `finished`
  std::vector<rank_state> told;

  std::vector<std::string> base_env;     // the local agent's environment
  std::vector<std::string> mca_exports;  // what every agent adds to its own environment
  // The launcher's Slurm allocation variables: what a remote agent adds too, so that every rank
  // sees the allocation as this host's ranks do (an agent started by srun has its step's).
  std::vector<std::string> slurm_exports;

  // The tree launch (tree_relay.cpp).
  enum class relay_stage : std::uint8_t { none, queued, running, ended };
  struct relayed {
    std::uint32_t parent = 0;
    relay_stage stage = relay_stage::none;
    bool established = false;
    bool counted = false;  // holds one of its parent's set-up slots
    bool closing = false;  // the launcher asked its parent to end it
    std::uint64_t close_timer = 0;
    agent_end how;
  };
  struct relay_parent {
    bool greeted = false;
    bool down = false;
    std::uint32_t setting_up = 0;
    std::deque<std::uint32_t> queue;
  };
  // By host (sized by plan_tree when the plan relays any): looked up for every relayed message,
  // where a hash map cost 5% of a 10,000-host simulation.
  std::vector<relayed> tree_child;
  std::vector<bool> relayed_host;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> tree_children;
  std::unordered_map<std::uint32_t, relay_parent> relay_parents;

  // PMIx (pmix_routing.cpp).
  std::optional<link::pmix_job> pmix_facts;
  std::optional<control::fence_table> fences;
  struct modex_route {
    std::uint32_t asker = 0;
    std::uint64_t asker_id = 0;
    std::uint32_t owner = 0;
  };
  std::unordered_map<std::uint64_t, modex_route> modex_routes;
  std::uint64_t next_modex = 0;
  std::vector<spawned_job> spawned;
  std::deque<spawned_job> offered;
  // Placed, waiting for their slots (claims_spawn_slots): claim id -> job.
  std::map<std::uint64_t, spawned_job> claiming;
  std::uint64_t next_claim = 1;
  std::uint32_t spawned_apps = 0;
  control::data_store store;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> lookup_timers;

  std::vector<std::uint8_t> pushed;  // per rank: bits 1/2 stdout/stderr open, 4/8 closed, 16/32
                                     // its agent was told nothing receives it
  std::vector<std::uint8_t> piped;   // per rank: bits 1/2 its local pipe of stdout/stderr is open

  // Within hosts (host_plans.cpp): each host's shape from its agent, and its plan, shared by
  // hosts of the same shape and rank count (planned once).
  struct shaped {
    topo::host_topology topology;
    std::string text;
  };
  struct planned {
    std::shared_ptr<const shaped> shape;
    topo::host_plan plan;
    // By local rank, made once per plan (not per host): its facts, Open MPI's words for its
    // binding (only when on_planned is asked) and its device variables.
    std::vector<rank_resources> ranks = {};
    std::vector<std::string> bound = {};
    std::vector<std::vector<std::string>> env = {};
  };
  bool wants_shapes = false;  // needs_topology(req.mapping): agents are asked, spawns wait
  bool plans_done = false;
  bool refused = false;
  std::vector<std::shared_ptr<const shaped>> shapes;  // by host
  std::uint32_t shaped_nodes = 0;  // hosts of the job that answered: plan_hosts waits for all
  // Each distinct summary text read once: 100,000 identical hosts parse one (docs/gpus.md, "Cost").
  std::unordered_map<std::string_view, std::shared_ptr<const shaped>> shape_by_text;
  std::vector<std::shared_ptr<const planned>> plans;  // by host

  // Restarts in place (restarts.cpp): the running incarnation and the ones that ended.
  struct incarnations {
    std::uint32_t number = 0;    // the running one (0: the first)
    bool between = false;        // one failed and the next has not started
    bool requested = false;      // this incarnation's restart requests went out
    bool backoff_over = false;   // the wait before the next one is over
    bool between_ended = false;  // the launch ended between two (its last one listed already)
    bool announce = false;       // its "restarting the job" line waits for a place
    std::uint32_t waiting = 0;   // agents whose `restarted` has not come
    std::uint64_t backoff_timer = 0;
    // A lost host's agent may still be ending its ranks (restarts.cpp, fence_lost_host): no
    // incarnation starts before this.
    link_time fenced_until{};
    std::uint64_t fence_timer = 0;
    std::uint64_t deadline_timer = 0;  // --timeout between two incarnations
    std::uint16_t next_port = 0;       // rank 0's host's answer: the next MASTER_PORT
    std::uint16_t port = 0;            // the running one's MASTER_PORT from it (0: the hello's)
    link_time started_at{};            // the running incarnation's start
    link_time launch_started{};        // --timeout counts from here, over every incarnation
    std::optional<job_report> failed;  // the one that failed, until the next starts
    std::optional<rank_map> next_map;  // where the next one runs, when not where this one ran
    std::vector<incarnation_report> ended;
    std::vector<quarantined_host> quarantined;
    bool discovering = false;             // the discovery command runs (host_discovery)
    std::uint32_t joining = 0;            // hosts it named whose agents are not up yet
    std::vector<std::uint32_t> comeback;  // quarantined hosts it named (used if nothing else is)
  } inc;
  // --stall-timeout (stall.cpp).
  std::uint32_t quiet_hosts = 0;  // hosts whose agent said quiet last
  bool stall_due = false;         // a host turned quiet or ranks ended: look again (settle)
  bool stall_told = false;        // the job was found stalled (once per job)
  std::uint64_t stall_rounds = 0;
  std::optional<stall_asking> stall_round;  // agents asked what their ranks are doing
  void on_quiet(std::uint32_t h, const link::host_quiet& q);
  void check_stall();
  void on_stall_report(std::uint32_t h, link::stall_report& r);
  void stall_timer_fired(std::uint64_t id);
  void stall_named();

  // ---- launcher.cpp ----
  template <class F>
  void step(link_time t, actions& o, F&& f);
  void settle();
  void run_controller(event e);
  void execute(action& a);
  void give_up_setup();
  void fence_lost_host();
  void tell_state_changes(const event& e);
  void release_stdin_after(const event& e);
  void release_stdin_of(std::uint32_t rank);
  std::uint64_t start_own_timer(std::chrono::milliseconds after, own_timer t);
  void cancel_own_timer(std::uint64_t& id);
  void own_timer_fired(const own_timer& t);
  void finish_job(job_report report);
  // A report the controller finished with comes without its ranks' reports
  // (finish_without_ranks): they are the finished controller's, taken when needed.
  void ranks_of_final(job_report& r) const {
    if (r.ranks.empty()) r.ranks = ctl.report().ranks;
  }
  void decided(std::uint32_t host, const std::string& what) const {
    if (cfg.decisions) cfg.decisions(host, what);
  }
  void record(const action& a) const;
  void maybe_all_closed();
  const host& host_info(std::uint32_t h) const { return req.map.allocation().hosts.at(h); }
  bool on_host(std::uint32_t process, std::uint32_t h) const {
    return process < ctl.size() && ctl.host_of(process) == h;
  }
  bool all_local() const;

  // ---- host_links.cpp ----
  link::endpoint_options link_options(std::uint32_t h) const;
  agent_target target_for(std::uint32_t h) const;
  link::job_setup setup_for(std::uint32_t h) const;
  host_state& link_to(std::uint32_t h);
  void open_link(std::uint32_t h);
  void touch(std::uint32_t h);
  void flush_touched();
  void send_to(std::uint32_t h, const link::message& m);
  bool link_usable(std::uint32_t h) const;
  bool end_expected(const host_state& hs) const;
  void handle_link(std::uint32_t h, std::vector<link::link_event>& events);
  void on_greeted(std::uint32_t h, const link::hello& agent);
  void on_message(std::uint32_t h, link::message& m, std::uint32_t fds);
  void link_went_down(std::uint32_t h, std::string reason);
  void close_carrier(std::uint32_t h);
  void carrier_done(std::uint32_t h, const agent_end& end);
  void stream_failed(std::uint32_t h, const std::string& reason);
  void retry_later(std::uint32_t h);
  void lose(std::uint32_t h, const std::string& reason, bool before_hello = false);
  void abandon(std::uint32_t h);
  void hurry();
  void hurry_now();
  void shutdown_agents();
  void send_shutdown(std::uint32_t h);
  bool relays_open_links(std::uint32_t h) const;
  void relayed_link_closed(std::uint32_t h);
  std::vector<std::uint32_t> relayed_by(std::uint32_t h) const;
  void mark_subtree(std::uint32_t h);

  // ---- tree_relay.cpp ----
  void plan_tree();
  bool is_relayed(std::uint32_t h) const { return h < relayed_host.size() && relayed_host[h]; }
  relayed* relay_of(std::uint32_t h) { return is_relayed(h) ? &tree_child[h] : nullptr; }
  void relay_open(std::uint32_t h);
  void relay_start_ready(std::uint32_t parent);
  void relay_start(std::uint32_t h);
  void relay_release_slot(relayed& c);
  void relay_end(std::uint32_t h, agent_end how);
  void relay_close(std::uint32_t h);
  void relay_established(std::uint32_t h);
  void relay_parent_greeted(std::uint32_t parent);
  void relay_parent_down(std::uint32_t parent);
  void link_bytes(std::uint32_t h, std::span<const std::uint8_t> bytes);
  void relay_from_parent(std::uint32_t parent, link::message& m);
  void relay_from_parent(std::uint32_t parent, std::uint32_t host,
                         std::span<const std::uint8_t> bytes);
  void relay_output(std::uint32_t h);

  // ---- spawn_requests.cpp ----
  void decide_facts();
  link::rank_spec spec_of(std::uint32_t r) const;
  void flush_spawns(std::uint32_t h);
  void requeue_spawns(std::uint32_t h);
  void on_output(std::uint32_t h, std::uint32_t rank, output_stream stream,
                 std::span<const std::uint8_t> bytes);
  bool pushed_stream_usable(std::uint32_t h, std::uint32_t rank, stream_kind stream);
  void close_pushed(std::uint32_t h, std::uint32_t rank, stream_kind stream);
  void end_pushed_streams(std::uint32_t h);
  void end_local_pipes(std::uint32_t h);
  void end_streams_after_shutdown(std::uint32_t h);

  // ---- host_plans.cpp ----
  void on_shape(std::uint32_t h, const link::host_shape& s);
  bool plan_hosts();
  void refuse(const std::string& line);
  void add_binding(std::uint32_t rank, link::rank_spec& s) const;
  void fill_resources(job_report& report) const;

  // ---- restarts.cpp ----
  // Where the next incarnation runs: `map` empty for where this one ran; `line` says the move.
  struct next_place {
    std::optional<rank_map> map;
    std::string line;
  };
  // `tell`: when only a place is missing, say so (at the finish; not at a clear_leftovers).
  bool restartable(const job_report& r, bool tell = false);
  std::string no_place_reason() const;
  // Why a host relayed by `parent` is lost with it.
  std::string relayed_loss(std::uint32_t parent) const {
    return "host " + host_info(parent).name + ", which relayed its link, was lost";
  }
  // "restarting the job (2 of 3)": the line's head, for the next incarnation.
  std::string restarting_text() const {
    return "restarting the job (" + std::to_string(inc.number + 1) + " of " +
           std::to_string(req.restarts.max_restarts) + ")";
  }
  // The launch may restart once more (the budget, not the failure's kind).
  bool may_restart() const;
  // Its agent is being started (ssh connecting or retrying) and has not said hello.
  bool setting_up(std::uint32_t h) const {
    const auto& hs = hosts[h];
    return hs.attempts > 0 && !hs.agent && !hs.lost_told && !hs.abandoned && !hs.quarantined;
  }
  std::optional<next_place> place_next() const;
  bool usable_spare(std::uint32_t h) const;
  const rank_map& map_of_next() const { return inc.next_map ? *inc.next_map : req.map; }
  void open_spares();
  void quarantine(std::uint32_t h, const std::string& reason);
  void replace_lost(next_place place);
  std::unordered_map<std::uint32_t, std::string> loss_reasons;  // lost hosts (restarts only)
  // Every agent (or only that one: a host that joined meanwhile) clears the last incarnation.
  void request_restart(std::optional<std::uint32_t> only = std::nullopt);
  void begin_restart(job_report r);
  void on_restarted(std::uint32_t h, const link::restarted& r);
  void restart_host_lost(std::uint32_t h, const std::string& reason);
  // ---- host_discovery.cpp ----
  void discover();
  void on_discovered(discovery found);
  void host_joined(std::uint32_t h);
  void place_after_discovery();
  void readmit(std::uint32_t h);
  void end_restarts(job_report r, const std::string& line);
  void interrupted_between(cause_kind cause, int signo, std::string why);
  std::chrono::milliseconds timeout_left() const;
  void timed_out_between();
  void maybe_start_incarnation();
  void start_incarnation();
  incarnation_report summary_of(const job_report& r) const;
  std::string namespace_of(std::uint32_t incarnation) const;
  std::uint64_t controller_timer_out(std::uint64_t id) const;
  std::optional<std::uint64_t> controller_timer_in(std::uint64_t id) const;

  // ---- rank_recovery.cpp ----
  void rank_restart_begun(rank_restart_report r);
  void respawning(const std::vector<std::uint32_t>& ranks);
  void restart_held_up(std::uint32_t rank, std::uint32_t count);
  // Ranks restarted alone whose spawn waits for the old process's streams: rank -> its count.
  std::map<std::uint32_t, std::uint32_t> awaiting_respawn;
  link::rank_spec respawn_spec_of(std::uint32_t r, std::uint32_t restarts) const;

  // ---- pmix_routing.cpp ----
  void start_pmix();
  void on_pmix_abort(std::uint32_t h, const link::pmix_abort& a);
  void on_unfinalized(std::uint32_t h, const link::pmix_unfinalized& u);
  void on_fence(std::uint32_t h, const link::fence_contribution& c);
  void answer_fence(const control::fence_table::outcome& o);
  void on_modex_request(std::uint32_t h, const link::modex_request& q);
  void on_modex_reply(std::uint32_t h, link::modex_reply& a);
  void on_proc_table_request(std::uint32_t h, const link::proc_table_request& q);
  void on_pmix_spawn(std::uint32_t h, const link::pmix_spawn& q);
  void refuse_spawn(spawned_job& job, const std::string& why);
  void offer_spawn(spawned_job job);
  void on_slots_claimed(std::uint64_t id, const std::string& refusal);
  void spawn_taken(std::uint32_t before);
  void spawned_rank_reported(std::uint32_t h, std::uint32_t process, const std::string* failure);
  void answer_spawn_failed(spawned_job& j, const std::string& why);
  std::pair<std::string, std::uint32_t> pmix_name_of(std::uint32_t process) const;
  const spawned_job* spawned_of(std::uint32_t process) const;
  void answer_data(const std::vector<control::data_store::answer>& answers);
  void on_lookup(std::uint32_t h, const link::pmix_lookup& q);
  void pmix_host_lost(std::uint32_t h);
};

}  // namespace pm::launch
