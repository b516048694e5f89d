// launcher: the launcher's decisions as a sans-I/O machine, the third beside the controller and
// the agent (docs/architecture.md, "One brain, several worlds").
//
// It owns the controller and everything the launcher decides beyond the job's policy: one agent
// link endpoint per host and its life (open, hello, retries with backoff, loss, a lost tree
// parent's subtree, giving up on hosts still being set up when the job ends), the tree relay
// (a relayed host's link travels as child_data inside its parent's link), the launch facts
// (MASTER_ADDR/PORT from rank 0's agent's hello), the spawn requests (batched, each rank's
// profile variables built just before it is sent), PMIx on the launcher's side (fences, direct
// modex, spawned jobs and their placement, the data store, the process table), output streams
// pushed over links, stdin routing, the drain and the shutdown.
//
// Contracts (as the controller's and the agent's): every input carries the driver's monotonic
// time; the machine reads no clock, touches no descriptor, never sleeps and never calls back:
// what the driver must do is appended to `out` as actions, in order. An action that fails at
// once comes back as a later input. A timer that fires after its cancel is ignored. Nothing comes
// out after `finished`.
//
// Drivers: job_runner (Asio, real hosts: libpm/src/driver) and the simulator (virtual hosts and
// clock: sim/). Both run this very class; neither decides anything. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "link/endpoint.hpp"
#include "pm/controller.hpp"
#include "pm/env.hpp"
#include "pm/job_plan.hpp"
#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace pm::launch {

using link::link_time;

/// Where a rank's stdin comes from (decided by the driver from job_request before the start).
enum class stdin_source : std::uint8_t {
  none,    ///< /dev/null
  shared,  ///< the launcher's one stdin (job_request::stdin_fd, for stdin_rank)
  own,     ///< its own descriptor (job_request::per_rank_stdin)
};

/// Everything the machine needs to know about the job; pure data (and two pure hooks).
struct launch_config {
  job_request request;      ///< map, apps, env, control, output, remote, pmix (descriptors unused)
  std::uint64_t nonce = 0;  ///< the job's nonce (hellos must carry it)
  std::uint64_t seed = 0;   ///< the retry backoff's jitter
  std::string local_agent_path;  ///< pmd on this machine
  std::string cwd;               ///< where apps without a wdir run, on every host that has it
  std::string pmix_namespace;    ///< the first job's PMIx namespace (when request.pmix)
  /// Per rank of the first job: where its stdin comes from.
  std::vector<stdin_source> stdin_of;
  /// The remote hosts' agents go through an embedder's transport (job_request::remote_transport):
  /// no tree relay then.
  bool embedder_transport = false;
  /// The address of a host the job hands out, from its agent's hello (net::pick_address on
  /// real hosts: it asks the kernel for a route; the simulator gives a pure one).
  std::function<std::string(const link::hello& agent, const std::vector<std::string>& iface,
                            const std::vector<const link::hello*>& others)>
      pick_address;
  /// Spawn requests carry each rank's profile variables (off: none, for simulations that do not
  /// check the ranks' environment and would only pay for building it).
  bool rank_variables = true;
  /// Free each link's buffers whenever they hold nothing (for drivers of very many mostly idle
  /// links, the simulator's 100,000 hosts; a real launcher keeps them for its next bytes).
  bool shrink_idle_links = false;
  /// rank_changed actions (job_callbacks::on_rank_state); off: none are made.
  bool rank_states = true;
  /// The hosts' slots are shared with other jobs (a DVM's, docs/dvm.md): the slots a spawned job
  /// is placed on are claimed (claim_slots) before the job is offered to the controller.
  bool claims_spawn_slots = false;
  /// For tests that compare worlds (tests/multihost/differential_test.cpp): every decision of the
  /// controller and the launcher that concerns a host (or the whole job: `job_wide`), one short
  /// line each ("spawn [0 1]", "signal [2] SIGTERM", "open 1" (the attempt), "retry", "greeted"
  /// (its agent's hello admitted), "lost before its hello", "given up", "finish 7 rank_failed").
  /// No times, no timer numbers.
  std::function<void(std::uint32_t host, const std::string& decision)> decisions;
  /// For tests (the simulator's checks of its own checks): sees every batch of the controller's
  /// actions before they are carried out, and may change it.
  std::function<void(const event& in, std::vector<action>& actions)> watch_controller;
  /// --report-bindings (request.mapping.report_bindings): Open MPI's line for each rank of a
  /// host, once every host is planned and before any rank starts (job_callbacks::on_binding).
  std::function<void(const std::string& line)> report_binding = {};
  /// Once every host is planned, before any rank starts: each rank's resources, by rank
  /// (job_callbacks::on_planned; pmrun's --display-map with bindings).
  std::function<void(const job_plan& plan)> planned = {};
};

// ---- actions: what the driver must do -------------------------------------------------------

/// Start the agent of a host the launcher reaches itself (not through a tree parent): the local
/// transport, ssh, srun, or the embedder's. Answer with stream_opened or open_failed.
struct open_host {
  agent_target target;
};
/// The host's agent answered its hello (a transport capping concurrent set-ups starts another).
struct host_established {
  std::uint32_t host;
};
/// Bytes wait in output(host): write them (consume_output) when the stream takes them.
struct write_host {
  std::uint32_t host;
};
/// Descriptors to pass with the byte at stream offset `offset` of host's stream (a local agent's
/// socket): the stdin of `rank`.
struct pass_stdin {
  std::uint32_t host;
  std::uint64_t offset;
  std::uint32_t rank;
};
/// The host's stream is over for the launcher: write what output(host) still holds if the stream
/// takes it at once, close the descriptors, end what carried the stream (the transport's
/// close) and answer with carrier_ended. Never for a relayed host (the machine ends those).
struct close_host {
  std::uint32_t host;
};
/// The next time link_tick(host) is due (heartbeats, hello deadline, silence); none: no timer.
struct link_deadline {
  std::uint32_t host;
  std::optional<link_time> at;
};
/// A timer: answer with timer_fired(timer) after `after`, unless cancelled first (the controller's
/// timers keep their numbers; the launcher's own are numbered from launcher_timers).
struct start_timer_after {
  std::uint64_t timer;
  std::chrono::milliseconds after;
};
struct cancel_timer_id {
  std::uint64_t timer;
};
/// A line for the user (pmrun prints it on stderr; an embedder's on_message).
struct say {
  std::string line;
};
/// A rank's state changed (job_callbacks::on_rank_state).
struct rank_changed {
  rank_report rank;
};
/// The output pipes of `rank` came with the last message from `host` (a local agent): take the
/// first `count` descriptors received on its stream, stdout then stderr, and read them; report
/// each pipe's end with output_ended. A host that sent fewer: stream_broken(host).
struct take_pipes {
  std::uint32_t host;
  std::uint32_t rank;
  std::uint32_t count;
};
/// The local agent of `host` was lost while `rank`'s output pipes (take_pipes) were open. What
/// the rank left on this machine may hold them open for ever, with no agent left to end it: kill
/// its process group (`pgid`, the rank's pid: each rank leads one) with SIGKILL, then read what
/// the pipes hold and close them, reporting their ends with output_ended.
struct end_orphaned_rank {
  std::uint32_t host;
  std::uint32_t rank;
  std::int64_t pgid;
};
/// Output pushed over a link: a rank's stream opens, gets bytes, closes (report its end with
/// output_ended). Answer each output_bytes with output_taken(host, n).
struct output_open {
  std::uint32_t rank;
  stream_kind stream;
};
struct output_bytes {
  std::uint32_t host;
  std::uint32_t rank;
  stream_kind stream;
  std::string bytes;
};
struct output_close {
  std::uint32_t rank;
  stream_kind stream;
};
/// Processes [first, first + size) (a spawned job) get output labels.
struct output_add_job {
  std::uint32_t first;
  std::uint32_t size;
};
/// Every stream ended: write what the output layer holds, then answer output_drained.
struct output_drain {};
/// A second interrupt: stop waiting for a terminal destination nobody reads (`| less` left
/// open, a stopped consumer). What it holds is discarded and named, and so is what the ranks
/// still write to it: their pipes are read to their ends, so the job can end.
struct output_give_up {};
/// Read the stdin of `rank` (on `host`, reached over a link) and hand it over with stdin_bytes
/// as far as input_credit(host) allows; stdin_ended at its end. Resume at input_ready(host).
struct pump_stdin {
  std::uint32_t host;
  std::uint32_t rank;
};
struct input_ready {
  std::uint32_t host;
};
/// The launcher's copy of `rank`'s stdin is needed no more: close it and end its pump_stdin. A
/// local rank's agent holds its own copy once the rank started; a remote rank's stdin is pumped
/// from here until it ends. Holding it longer would keep a rank that is gone, or never read,
/// from ever looking full-and-dead to whatever writes its input (`--stdin all`). Any later start
/// of the rank reads /dev/null.
struct release_stdin {
  std::uint32_t rank;
};
/// The launch restarts in place (restart_policy): `ended` is the incarnation that failed
/// (job_callbacks::on_restart). Its line follows as a `say`.
struct restarting {
  incarnation_report ended;
};
/// --enable-recovery (restart_policy::per_rank): a rank failed and starts again alone
/// (job_callbacks::on_rank_restart). Its line follows as a `say`.
struct rank_restarted {
  rank_restart_report restart;
};
/// restart_policy::host_discovery: run `command` (/bin/sh -c) for at most `bound` and answer
/// hosts_discovered with
/// the hosts it printed (parse_discovered_hosts), or with why it gave none.
struct discover_hosts {
  std::string command;
  std::chrono::milliseconds bound;  ///< killed (its process group too) after this long
};
/// launch_config::claims_spawn_slots: claim `slots` (host name, count) for this job, all or
/// nothing; with `share` (the job oversubscribes) only what is free and share the rest, as the
/// job's first claim did. Answer with slots_claimed(id, ...).
struct claim_slots {
  std::uint64_t id;
  std::vector<std::pair<std::string, std::uint32_t>> slots;
  bool share = false;
};
/// The job is over; every link is closed. Last action.
struct finished {
  job_report report;
};

using launch_action =
    std::variant<open_host, host_established, write_host, pass_stdin, close_host, link_deadline,
                 start_timer_after, cancel_timer_id, say, rank_changed, take_pipes,
                 end_orphaned_rank, output_open, output_bytes, output_close, output_add_job,
                 output_drain, output_give_up, pump_stdin, input_ready, release_stdin, restarting,
                 rank_restarted, discover_hosts, claim_slots, finished>;
using actions = std::vector<launch_action>;

class launcher {
 public:
  explicit launcher(launch_config config);
  ~launcher();
  launcher(launcher&&) noexcept;
  launcher& operator=(launcher&&) noexcept;

  // ---- inputs ----
  void start(link_time now, actions& out);
  /// The stream of `host` opened (open_host), carried by process `carrier_pid` (0: none known).
  void stream_opened(link_time now, std::uint32_t host, std::int64_t carrier_pid, actions& out);
  /// open_host failed at once (one line).
  void open_failed(link_time now, std::uint32_t host, std::string reason, actions& out);
  /// Bytes from the agent of `host`. They must stay valid until the actions are carried out.
  void received(link_time now, std::uint32_t host, std::span<const std::uint8_t> bytes,
                actions& out);
  /// The stream of `host` ended (end-of-file: `why` empty) or broke (why: the error).
  void stream_broken(link_time now, std::uint32_t host, const std::string& why, actions& out);
  /// What carried the stream of `host` ended (after close_host).
  void carrier_ended(link_time now, std::uint32_t host, agent_end end, actions& out);
  void link_tick(link_time now, std::uint32_t host, actions& out);
  void timer_fired(link_time now, std::uint64_t timer, actions& out);
  /// A rank's stream (a local pipe of take_pipes, or a pushed one of output_open) was written
  /// to its end after `bytes` bytes.
  void output_ended(link_time now, std::uint32_t rank, stream_kind stream, std::uint64_t bytes,
                    actions& out);
  /// The output layer took `bytes` of host's output (output_bytes): at once when it is not
  /// congested, else once the congestion drained. The agent may send that much more.
  void output_taken(link_time now, std::uint32_t host, std::uint64_t bytes, actions& out);
  /// Nothing receives a pushed stream any more (its destination failed and it has no file or
  /// sink): its rank's agent is told to close the pipe, so that the rank gets SIGPIPE as a local
  /// rank does. Once per stream; nothing for a stream not pushed, closed, or of a host gone.
  void output_unwanted(link_time now, std::uint32_t rank, stream_kind stream, actions& out);
  void output_drained(link_time now, actions& out);
  /// Stdin read for `rank` on `host` (at most input_credit(host) bytes), and its end.
  void stdin_bytes(link_time now, std::uint32_t host, std::uint32_t rank,
                   std::span<const std::uint8_t> bytes, actions& out);
  void stdin_ended(link_time now, std::uint32_t host, std::uint32_t rank, actions& out);
  /// A signal to the launcher (pmrun's SIGINT, SIGTERM, SIGHUP, SIGUSR1/2, SIGTSTP, SIGCONT).
  void signal(link_time now, int signo, actions& out);
  /// An embedder ends the job (job_runner::cancel).
  void cancel(link_time now, actions& out);
  /// An embedder lets go of the output nobody reads (job_runner::give_up_output).
  void give_up_output(link_time now, actions& out);
  /// What discover_hosts found: the hosts (their `local` decided by the driver), or, with
  /// `failure` set, one line saying why there are none (the command failed, took too long, or
  /// printed garbage).
  struct discovery {
    std::vector<host> hosts;
    std::string failure;
  };
  void hosts_discovered(link_time now, discovery found, actions& out);
  /// claim_slots `id` was answered: the slots are this job's (`refusal` empty), or one line why
  /// not (another job holds them, a host was lost, the DVM is gone).
  void slots_claimed(link_time now, std::uint64_t id, std::string refusal, actions& out);

  // ---- the links' bytes toward the agents ----
  std::span<const std::uint8_t> output(std::uint32_t host) const;
  std::uint64_t output_offset(std::uint32_t host) const;
  void consume_output(std::uint32_t host, std::size_t n);
  /// Stdin bytes that may go to `host` now; 0 also when its link is over.
  std::uint64_t input_credit(std::uint32_t host) const;
  /// False once stdin for `host` will never be taken again (link over, job ending).
  bool takes_input(std::uint32_t host) const;

  // ---- queries ----
  bool done() const noexcept;
  const controller& control() const noexcept;
  /// The rank map the machine runs (its launch_config's): a driver need not keep a copy.
  const rank_map& map() const noexcept;
  job_report report() const;
  std::vector<agent_report> agents() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The host of a decision about the whole job (launch_config::decisions).
inline constexpr std::uint32_t job_wide = UINT32_MAX;

/// The launcher's own timers are numbered from here (the controller's are below).
inline constexpr std::uint64_t launcher_timers = std::uint64_t{1} << 62;

}  // namespace pm::launch
