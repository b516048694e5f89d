// job_runner: the Asio driver of the controller. It stamps events with the steady clock, queues
// them (an action's failure comes back as a later event, never as a nested call), carries out the
// controller's actions through one agent link per host, timers and the output layer, and reports
// the end. docs/architecture.md, docs/agent-link.md.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <unordered_map>

#include "agent/pmix/pmix_host.hpp"
#include "control/data_store.hpp"
#include "control/fence_table.hpp"
#include "driver/host_link.hpp"
#include "driver/master_address.hpp"
#include "driver/spawned_job.hpp"
#include "io/output_forwarder.hpp"
#include "link/launch_plan.hpp"
#include "pm/error.hpp"
#include "pm/launcher.hpp"
#include "sys/executable.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/relay/relay_transport.hpp"
#include "transport/routing.hpp"

namespace pm {

namespace asio = boost::asio;

namespace {

std::string joined(const env_var& v) {
  std::string s;
  s.reserve(v.name.size() + 1 + v.value.size());
  s.append(v.name).push_back('=');
  s.append(v.value);
  return s;
}

std::vector<std::string> joined(const std::vector<env_var>& vars) {
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& v : vars) out.push_back(joined(v));
  return out;
}

// One getrandom() call: std::random_device probes the CPU (cpuid, which traps in a virtual
// machine) before its first number, on every launch.
std::uint64_t fresh_nonce() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace

struct job_runner::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io_, job_request request_, job_callbacks callbacks_)
      : io(io_),
        req(std::move(request_)),
        cb(std::move(callbacks_)),
        ctl(req.map, req.control),
        epoch(std::chrono::steady_clock::now()),
        nonce(req.prestarted ? req.prestarted->nonce() : fresh_nonce()) {}

  // One host's agent link and what the job waits for on it.
  struct host_state {
    std::shared_ptr<driver::host_link> link;
    std::vector<std::uint32_t> pending_spawns;  // ranks waiting for the launch facts
    std::optional<link::hello> agent;           // its hello
    std::string agent_error;                    // what the agent said before it closed
    std::uint32_t attempts = 0;
    bool shutdown_sent = false;
    bool retrying = false;          // waiting to connect again (retry_later opens the link)
    bool closed = false;            // the link is over and its transport was told
    bool lost_told = false;         // host_lost went to the controller
    std::uint64_t held_ack = 0;     // output consumed while the destination was congested
    bool lost_with_parent = false;  // tree: relayed by a host that was lost; reported with it
    bool abandoned = false;  // the job ended before its agent answered: given up (give_up_setup)
    std::optional<link::pmix_server> pmix;  // where its PMIx server is for tools
  };

  asio::io_context& io;
  job_request req;
  job_callbacks cb;
  controller ctl;
  std::chrono::steady_clock::time_point epoch;
  std::uint64_t nonce;
  std::unique_ptr<transport_router> router;
  // The tree launch: hosts started by another host's agent (their plan parent), and the
  // transport that reaches them through it.
  std::unordered_map<std::uint32_t, std::uint32_t> tree_parent;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> tree_children;  // the other way
  std::shared_ptr<relay::relay_transport> relay;
  pm::transport& transport_for(std::uint32_t h) {
    if (relay && tree_parent.contains(h)) return *relay;
    return *router;
  }
  std::unique_ptr<io::output_forwarder> out;
  std::deque<event> queue;
  bool drain_posted = false;
  std::unordered_map<std::uint64_t, std::unique_ptr<asio::steady_timer>> timers;
  std::vector<action> actions;
  bool done = false;
  bool finishing = false;
  bool facts_ready = false;
  bool setup_given_up = false;   // the job is ending: nothing more is started (give_up_setup)
  std::uint32_t interrupts = 0;  // SIGINT/SIGTERM/SIGHUP received
  std::unique_ptr<asio::steady_timer> hurry_timer;  // after a second interrupt (hurry)
  std::optional<job_report> final_report;
  std::vector<rank_state> told;  // per rank: the state on_rank_state last reported
  std::unordered_map<std::uint32_t, host_state> hosts;
  std::string local_agent_path;
  std::string launcher_cwd;              // where apps without a wdir run, on every host that has it
  std::vector<std::string> base_env;     // the local agent's environment
  std::vector<std::string> mca_exports;  // what every agent adds to its own environment
  std::function<void()> after_shutdown;  // on_finish, once every link is closed
  // PMIx (req.pmix): the job's facts every agent's server registers, and the fences that span
  // hosts, gathered here (docs/pmix.md).
  std::optional<link::pmix_job> pmix_facts;
  std::optional<control::fence_table> fences;
  // Direct modex requests on their way: the launcher's id -> who asked (host, its id) and the
  // host that owns the rank.
  struct modex_route {
    std::uint32_t asker = 0;
    std::uint64_t asker_id = 0;
    std::uint32_t owner = 0;
  };
  std::unordered_map<std::uint64_t, modex_route> modex_routes;
  std::uint64_t next_modex = 0;
  // Jobs the ranks spawned (MPI_Comm_spawn), in order, and what they published for each other.
  std::vector<driver::spawned_job> spawned;
  std::deque<driver::spawned_job> offered;  // posted to the controller, not taken yet
  std::uint32_t spawned_apps = 0;
  control::data_store store;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::unique_ptr<asio::steady_timer>>
      lookup_timers;

  // Stdin for a rank on another host: read here and sent as input frames, as far as the link's
  // credit allows (a rank that does not read its stdin stops the reading here).
  struct input_pump {
    std::uint32_t host = 0;
    std::uint32_t rank = 0;
    link::owned_fd fd;                                     // a private duplicate
    std::optional<asio::posix::stream_descriptor> waiter;  // pipes and ttys; none: a file
    bool waiting = false;
    bool done = false;
  };
  std::vector<std::unique_ptr<input_pump>> pumps;
  std::vector<char> input_buffer = std::vector<char>(std::size_t{64} << 10);

  job_time now() const { return std::chrono::steady_clock::now() - epoch; }

  const host& host_info(std::uint32_t h) const { return req.map.allocation().hosts.at(h); }
  // Processes: the first job's ranks, then each spawned job's (the controller's numbering).
  bool on_host(std::uint32_t process, std::uint32_t h) const {
    return process < ctl.size() && ctl.host_of(process) == h;
  }
  const driver::spawned_job* spawned_of(std::uint32_t process) const {
    if (process < req.map.size()) return nullptr;
    for (const auto& j : spawned) {
      if (j.holds(process)) return &j;
    }
    return nullptr;
  }
  bool all_local() const {
    for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
      if (!host_info(req.map.host_of_node(n)).local) return false;
    }
    return true;
  }

  // The PATH the ranks of app `app` see on this machine: the app's own PATH wins over an -x PATH,
  // which wins over the inherited one.
  std::string rank_path_variable(std::uint32_t app) const {
    for (const auto* list : {&req.env.app_variables(app), &req.env.overrides, &req.env.base}) {
      for (auto it = list->rbegin(); it != list->rend(); ++it) {
        if (it->name == "PATH") return it->value;
      }
    }
    return "/usr/local/bin:/usr/bin:/bin";
  }

  // Before anything starts: a job on this machine only has every program checked; a job with
  // other hosts reached by ssh has the remote shell command checked (a typo there is a launch
  // error, not a host lost later).
  void check_programs() {
    if (!all_local() && !req.remote_transport && req.remote.launcher == agent_launcher::srun) {
      check_srun();
    } else if (!all_local() && !req.remote_transport) {
      const std::string agent = req.remote.rsh_agent.empty() ? "ssh" : req.remote.rsh_agent.front();
      const char* path = std::getenv("PATH");
      try {
        local::resolve_executable(agent, path != nullptr ? path : "/usr/bin:/bin", "");
      } catch (const pm::error& e) {
        throw error(errc::launch, std::string("the remote shell command: ") + e.what() +
                                      " (set plm_rsh_agent or PM_RSH_AGENT)");
      }
    }
    for (std::uint32_t i = 0; i < req.apps.size(); ++i) {
      const auto& app = req.apps[i];
      if (app.argv.empty()) throw error(errc::launch, "an app context has no program");
      if (all_local()) local::resolve_executable(app.argv[0], rank_path_variable(i), app.wdir);
    }
  }

  // Inside a Slurm allocation the other hosts' agents start with srun: without it, nothing starts.
  void check_srun() const {
    const std::string srun =
        req.remote.srun_command.empty() ? "srun" : req.remote.srun_command.front();
    const char* path = std::getenv("PATH");
    try {
      local::resolve_executable(srun, path != nullptr ? path : "/usr/bin:/bin", "");
    } catch (const pm::error& e) {
      throw error(errc::launch,
                  std::string("cannot start the agents of the other nodes with srun: ") + e.what() +
                      " (use --launcher ssh to reach them with ssh)");
    }
  }

  void post(event e) {
    queue.push_back(std::move(e));
    if (drain_posted) return;
    drain_posted = true;
    asio::post(io, [self = shared_from_this()] { self->drain(); });
  }

  void drain() {
    drain_posted = false;
    while (!queue.empty()) {
      event e = std::move(queue.front());
      queue.pop_front();
      actions.clear();
      const auto before = ctl.size();
      ctl.handle(now(), e, actions);
      if (std::holds_alternative<job_spawned>(e)) spawn_taken(before);
      tell_state_changes(e);
      for (auto& a : actions) std::visit([this](auto& act) { execute(act); }, a);
      if (ctl.ending() && !setup_given_up) give_up_setup();
    }
  }

  // The job is ending (a failure under the abort policy, a signal, the timeout, a cancel): it
  // waits for nothing that was still being set up. Spawns held here (waiting for the launch
  // facts, or for a link) never go out, and hosts whose agent has not said hello yet (ssh still
  // connecting or retrying, a silent or unroutable host) are given up at once: their links close
  // (the agent, if it started, sees the end and exits with whatever it started) and their ranks
  // end as never started. Without this, a launch whose rank-0 host never answered waited for
  // ever, and a Ctrl-C waited for ssh's retries (docs/failure-semantics.md, "Set-up").
  void give_up_setup() {
    setup_given_up = true;
    std::vector<std::uint32_t> withdrawn;
    std::vector<std::uint32_t> known;
    known.reserve(hosts.size());
    for (const auto& [h, hs] : hosts) known.push_back(h);
    std::sort(known.begin(), known.end());
    for (const auto h : known) {
      auto& hs = hosts[h];
      if (hs.lost_told || hs.abandoned) continue;
      if (hs.agent) {
        // Its agent is up: what it was sent is reported; what waits here is not sent.
        withdrawn.insert(withdrawn.end(), hs.pending_spawns.begin(), hs.pending_spawns.end());
        hs.pending_spawns.clear();
        continue;
      }
      abandon(h);
      for (const auto rank : ctl.processes_on_host(h)) {
        if (ctl.rank_report_of(rank).state == rank_state::pending) withdrawn.push_back(rank);
      }
    }
    if (!withdrawn.empty()) post(spawn_withdrawn{std::move(withdrawn)});
  }

  // Closes a host's link before its agent answered, without calling it lost: the job is ending.
  void abandon(std::uint32_t h) {
    auto& hs = hosts[h];
    hs.abandoned = true;
    hs.shutdown_sent = true;
    hs.retrying = false;  // its retry timer finds it abandoned
    hs.pending_spawns.clear();
    if (!hs.link || hs.closed) return;
    auto link = hs.link;
    link->close();
    transport_for(h).close(h, [weak = weak_from_this(), h, link](agent_end) {
      auto self = weak.lock();
      if (!self) return;
      auto& st = self->hosts[h];
      if (st.link != link) return;
      st.closed = true;
      self->maybe_all_closed();
    });
  }

  // A second SIGINT/SIGTERM/SIGHUP: the controller sends SIGKILL to every rank at once; an agent
  // that does not confirm within a moment (a silent host) is not waited for: its link closes and
  // its ranks count as lost (its agent, cut off, ends them itself). mpirun exits at the second
  // Ctrl-C; so does pmrun, with nothing left behind.
  void hurry() {
    if (hurry_timer || finishing) return;
    hurry_timer = std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(500));
    hurry_timer->async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->finishing) return;
      for (auto& entry : self->hosts) {
        const std::uint32_t h = entry.first;  // a copy: clang 14 captures no structured binding
        auto& hs = entry.second;
        if (!hs.link || hs.closed || hs.lost_told || hs.abandoned) continue;
        if (self->ctl.live_on_host(h) == 0) continue;
        hs.shutdown_sent = true;  // its link's end is ours, not a loss to wait for
        auto link = hs.link;
        link->close();
        self->transport_for(h).close(h, [weak, h, link](agent_end) {
          auto s = weak.lock();
          if (!s || s->hosts[h].link != link) return;
          s->hosts[h].closed = true;
          s->maybe_all_closed();
        });
        self->lose(h, "not waited for after a second interrupt");
      }
    });
  }

  // on_rank_state for the ranks the event may have moved: only rank events, a lost host and
  // withdrawn spawns change a rank's state (the controller's rules), so this is O(1) per rank
  // concerned.
  void tell_state_changes(const event& e) {
    if (!cb.on_rank_state) return;
    if (told.size() < ctl.size()) told.resize(ctl.size(), rank_state::pending);
    const auto tell = [&](std::uint32_t rank) {
      if (rank >= told.size()) return;
      auto rr = ctl.rank_report_of(rank);
      if (rr.state == told[rank]) return;
      told[rank] = rr.state;
      cb.on_rank_state(rr);
    };
    if (const auto* x = std::get_if<rank_started>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<rank_exited>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<rank_spawn_failed>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<host_lost>(&e)) {
      for (auto rank : ctl.processes_on_host(x->host)) tell(rank);
    }
    if (const auto* x = std::get_if<spawn_withdrawn>(&e)) {
      for (auto rank : x->ranks) tell(rank);
    }
  }

  // ---- links ----

  link::job_setup setup_for(std::uint32_t h) const {
    link::job_setup s;
    s.host = h;
    s.grace_ms = static_cast<std::uint32_t>(req.control.kill_grace.count());
    const bool local = host_info(h).local;
    if (!local && req.remote.heartbeat_interval.count() > 0) {
      s.heartbeat_ms = static_cast<std::uint32_t>(req.remote.heartbeat_interval.count());
      s.silence_ms = s.heartbeat_ms * std::max<std::uint32_t>(1, req.remote.heartbeat_misses);
    }
    s.forward_output = !local;
    s.streams = req.output.merge_stderr ? 1 : 2;
    s.cwd = launcher_cwd;
    s.base = mca_exports;
    s.overrides = joined(req.env.overrides);
    for (std::uint32_t i = 0; i < req.apps.size(); ++i) {
      s.apps.push_back(
          link::app_spec{req.apps[i].argv, req.apps[i].wdir, joined(req.env.app_variables(i))});
    }
    if (pmix_facts) {
      s.pmix = pmix_facts;
      s.pmix->node = req.map.node_of_host(h).value_or(link::no_node);
    }
    return s;
  }

  // ---- PMIx ----

  void on_pmix_abort(std::uint32_t h, const link::pmix_abort& a) {
    if (!on_host(a.rank, h)) return;  // not its rank
    std::string text = "PMIx_Abort (MPI_Abort)";
    if (!a.message.empty() && a.message != "N/A") text += ": " + a.message;  // Open MPI's "none"
    post(abort_requested{a.rank, a.status, text});
  }

  // A rank left MPI without MPI_Finalize (an exit or a signal): its peers would wait for it in
  // their next fence, so the job ends, as mpirun ends it ("exited without calling finalize"),
  // also where the abort policy is off: those peers have no other way out.
  void on_unfinalized(std::uint32_t h, const link::pmix_unfinalized& u) {
    if (!on_host(u.rank, h)) return;
    post(rank_unfinalized{u.rank, u.status});
  }

  void on_fence(std::uint32_t h, const link::fence_contribution& c) {
    if (!fences) return;
    try {
      if (auto complete = fences->contribute(h, c)) answer_fence(*complete);
    } catch (const error& e) {
      post(abort_requested{std::nullopt, 1, e.what()});
    }
  }

  void send_to(std::uint32_t h, const link::message& m) {
    auto it = hosts.find(h);
    if (it != hosts.end() && it->second.link && !it->second.closed) it->second.link->send(m);
  }

  // A host asks for the data of a rank elsewhere: ask the rank's host under an id of ours.
  void on_modex_request(std::uint32_t h, const link::modex_request& q) {
    if (!pmix_facts || q.rank >= ctl.size()) {
      send_to(h, link::modex_reply{q.id, false, {}});
      return;
    }
    const std::uint32_t owner = ctl.host_of(q.rank);
    auto it = hosts.find(owner);
    if (it == hosts.end() || !it->second.link || it->second.lost_told) {
      send_to(h, link::modex_reply{q.id, false, {}});
      return;
    }
    const std::uint64_t id = next_modex++;
    modex_routes[id] = modex_route{h, q.id, owner};
    it->second.link->send(link::modex_request{id, q.rank});
  }

  void on_modex_reply(std::uint32_t h, link::modex_reply& a) {
    auto it = modex_routes.find(a.id);
    if (it == modex_routes.end() || it->second.owner != h) return;
    const modex_route route = it->second;
    modex_routes.erase(it);
    a.id = route.asker_id;
    send_to(route.asker, a);
  }

  // A PMIx tool asked that host's server for the job's process table: every rank as the
  // controller knows it (pids are those of the ranks' hosts).
  void on_proc_table_request(std::uint32_t h, const link::proc_table_request& q) {
    const job_report now = ctl.report();
    link::proc_table_reply reply{q.id, {}};
    reply.ranks.reserve(now.ranks.size());
    for (const auto& r : now.ranks) {
      if (r.rank >= req.map.size()) break;  // the first job's (docs/pmix.md, "Tools")
      link::proc_table_entry e{r.rank, r.pid, to_string(r.state), -1, 0};
      if (r.status) {
        if (r.status->is_signal()) {
          e.signo = r.status->signal();
        } else {
          e.code = r.status->code();
        }
      }
      reply.ranks.push_back(std::move(e));
    }
    send_to(h, reply);
  }

  // ---- spawned jobs (MPI_Comm_spawn, PMIx_Spawn; docs/pmix.md, "Spawn") ----

  // A rank (or a PMIx tool attached to host h's agent) asked for a new job: place it on the free
  // slots and offer it to the controller; once taken (spawn_taken) every agent learns it and its
  // ranks start. The caller is answered once every new rank runs, or as soon as the job cannot be.
  void on_pmix_spawn(std::uint32_t h, const link::pmix_spawn& q) {
    // A rank's spawn comes from its own host's agent (else it is ignored, like its other
    // messages); a tool is no process of the launch: it is wherever the agent is.
    if (q.tool.empty() && !on_host(q.rank, h)) return;
    driver::spawned_job job;
    job.asker_host = h;
    job.asker_id = q.id;
    job.tool = q.tool;
    if (!pmix_facts || finishing || ctl.finished() || ctl.ending()) {
      refuse_spawn(job, "the job is ending");
      return;
    }
    const auto& alloc = req.map.allocation();
    std::vector<std::uint32_t> live(alloc.hosts.size(), 0);
    std::vector<bool> usable(alloc.hosts.size(), true);
    for (std::uint32_t host = 0; host < live.size(); ++host) {
      live[host] = ctl.live_on_host(host);
      const auto it = hosts.find(host);
      usable[host] = it == hosts.end() || !it->second.lost_told;
    }
    // Jobs offered to the controller but not taken yet hold their slots too.
    for (const auto& p : offered) {
      for (std::uint32_t r = 0; r < p.size(); ++r) ++live[p.host_of(r)];
    }
    try {
      auto placed = driver::map_spawn(q, alloc, live, usable, req.mapping);
      placed.asker_host = job.asker_host;
      placed.asker_id = job.asker_id;
      placed.tool = std::move(job.tool);
      job = std::move(placed);
    } catch (const std::exception& e) {  // a mapping error, or no memory for a huge request
      refuse_spawn(job, e.what());
      return;
    }
    job.facts = agent::pmix::pmix_job_of(agent::pmix::make_job_info(job.map, "", 0));
    job.facts->universe = pmix_facts->universe;  // MPI_UNIVERSE_SIZE: the allocation's slots
    // PMIX_PARENT_ID: the rank, or the tool, that asked.
    const auto caller = job.tool.empty() ? pmix_name_of(q.rank) : std::pair{job.tool, q.rank};
    job.facts->parent_nspace = caller.first;
    job.facts->parent_rank = caller.second;
    std::vector<std::uint32_t> places;
    places.reserve(job.size());
    for (std::uint32_t r = 0; r < job.size(); ++r) places.push_back(job.host_of(r));
    offered.push_back(std::move(job));
    post(job_spawned{std::move(places)});
  }

  void refuse_spawn(driver::spawned_job& job, const std::string& why) {
    job.answered = true;
    send_to(job.asker_host, link::pmix_spawn_reply{job.asker_id, false, {}, why});
    if (!cb.on_message) return;
    cb.on_message(job.tool.empty() ? "MPI_Comm_spawn (PMIx_Spawn) refused: " + why
                                   : "PMIx_Spawn of tool " + job.tool + " on " +
                                         host_info(job.asker_host).name + " refused: " + why);
  }

  // The controller took (or, while the job ends, refused) the oldest job offered: a taken job
  // gets its numbers now, every agent its job_add (before any spawn of its ranks, which the
  // controller's actions for it send right after), the output layer its labels.
  void spawn_taken(std::uint32_t before) {
    if (offered.empty()) return;
    driver::spawned_job job = std::move(offered.front());
    offered.pop_front();
    if (ctl.size() == before) {
      refuse_spawn(job, "the job is ending");
      return;
    }
    job.job = static_cast<std::uint32_t>(spawned.size()) + 1;
    job.first = before;
    job.first_app = static_cast<std::uint32_t>(req.apps.size()) + spawned_apps;
    job.nspace = pmix_facts->nspace + "." + std::to_string(job.job);
    job.facts->nspace = job.nspace;
    job.started.assign(job.size(), false);
    job.not_started = job.size();
    spawned_apps += static_cast<std::uint32_t>(job.apps.size());
    if (out) out->add_job(job.first, job.size());
    spawned.push_back(std::move(job));
    const auto& added = spawned.back();
    // Agents linked now get it; a link opened from here on (a host new to the launch, or one
    // retried) gets every taken job right after its setup (open_link).
    for (auto& [host, hs] : hosts) {
      if (hs.link && !hs.closed && !hs.lost_told) hs.link->send(added.add_for(host));
    }
  }

  // A spawned rank's start (or failure to start) was reported by its host's agent: the caller
  // hears once all started, or at the first that could not (the failure policy ends the rest).
  void spawned_rank_reported(std::uint32_t h, std::uint32_t process, const std::string* failure) {
    if (process < req.map.size() || !on_host(process, h)) return;
    for (auto& j : spawned) {
      if (!j.holds(process)) continue;
      const auto rank = process - j.first;
      if (j.answered || j.started[rank]) return;  // a duplicate report counts once
      j.started[rank] = true;
      if (failure != nullptr) {
        answer_spawn_failed(
            j, "rank " + std::to_string(rank) + " of the spawned job could not start: " + *failure);
      } else if (--j.not_started == 0) {
        j.answered = true;
        send_to(j.asker_host, link::pmix_spawn_reply{j.asker_id, true, j.nspace, {}});
      }
      return;
    }
  }

  void answer_spawn_failed(driver::spawned_job& j, const std::string& why) {
    j.answered = true;
    send_to(j.asker_host, link::pmix_spawn_reply{j.asker_id, false, {}, why});
  }

  // The namespace and rank of a process, as PMIx names it.
  std::pair<std::string, std::uint32_t> pmix_name_of(std::uint32_t process) const {
    if (const auto* j = spawned_of(process)) return {j->nspace, process - j->first};
    return {pmix_facts ? pmix_facts->nspace : std::string(), process};
  }

  void answer_data(const std::vector<control::data_store::answer>& answers) {
    for (const auto& a : answers) {
      lookup_timers.erase({a.host, a.reply.id});
      send_to(a.host, a.reply);
    }
  }

  void on_lookup(std::uint32_t h, const link::pmix_lookup& q) {
    if (!on_host(q.rank, h)) return;
    if (auto a = store.lookup(h, q)) {
      answer_data({*a});
      return;
    }
    if (q.timeout_s == 0) return;  // held until published (or the job ends)
    auto timer = std::make_unique<asio::steady_timer>(io, std::chrono::seconds(q.timeout_s));
    timer->async_wait([weak = weak_from_this(), h, id = q.id](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      if (auto a = self->store.expire(h, id)) self->answer_data({*a});
    });
    lookup_timers[{h, q.id}] = std::move(timer);
  }

  void answer_fence(const control::fence_table::outcome& o) {
    for (const auto h : o.hosts) {
      auto it = hosts.find(h);
      if (it != hosts.end() && it->second.link) it->second.link->send(o.result);
    }
  }

  link::endpoint_options link_options(std::uint32_t h) const {
    link::endpoint_options o;
    o.self = link::role::launcher;
    o.nonce = nonce;
    if (!host_info(h).local) {
      o.hello_timeout = req.remote.hello_timeout;
      if (req.remote.heartbeat_interval.count() > 0) {
        o.heartbeat_interval = req.remote.heartbeat_interval;
        o.silence_timeout =
            req.remote.heartbeat_interval * std::max<std::uint32_t>(1, req.remote.heartbeat_misses);
      }
    }
    return o;
  }

  agent_target target_for(std::uint32_t h) const {
    agent_target t;
    t.host = h;
    t.info = host_info(h);
    const std::string path =
        t.info.local || req.remote.agent_path.empty() ? local_agent_path : req.remote.agent_path;
    t.agent_argv = {path, "--stdio", "--nonce", hex(nonce)};
    if (t.info.local) t.environment = base_env;
    return t;
  }

  host_state& link_to(std::uint32_t h) {
    auto& hs = hosts[h];
    if (!hs.link && !hs.retrying) open_link(h);
    return hs;
  }

  void open_link(std::uint32_t h) {
    // A relayed host's parent needs its own link first (it has ranks too: the plan is over the
    // job's hosts).
    // (Not while the parent waits to retry its own connection: its retry opens it.)
    if (auto it = tree_parent.find(h); it != tree_parent.end() && hosts[it->second].attempts == 0) {
      link_to(it->second);
    }
    auto& hs = hosts[h];
    ++hs.attempts;
    hs.agent.reset();
    hs.closed = false;
    driver::host_link_callbacks lc;
    std::weak_ptr<impl> weak = weak_from_this();
    lc.on_greeted = [weak, h](const link::hello& agent) {
      if (auto self = weak.lock()) self->on_greeted(h, agent);
    };
    lc.on_message = [weak, h](link::message& m, std::vector<link::owned_fd> fds) {
      if (auto self = weak.lock()) self->on_message(h, m, std::move(fds));
    };
    lc.on_output = [weak, h](std::uint32_t rank, output_stream stream,
                             std::span<const std::uint8_t> bytes) {
      if (auto self = weak.lock()) self->on_output(h, rank, stream, bytes);
    };
    lc.on_down = [weak, h](std::string reason) {
      if (auto self = weak.lock()) self->on_down(h, std::move(reason));
    };
    lc.on_credit = [weak, h] {
      if (auto self = weak.lock()) self->on_credit(h);
    };
    hs.link = driver::host_link::create(io, link_options(h), std::move(lc), epoch);
    hs.link->send(setup_for(h));
    for (const auto& j : spawned) hs.link->send(j.add_for(h));  // jobs the ranks spawned so far
    auto link = hs.link;
    transport_for(h).open(
        target_for(h), [link](agent_stream s) { link->attach(s); },
        [weak, h, link](std::string reason) {
          auto self = weak.lock();
          if (!self || self->hosts[h].link != link) return;
          link->close();
          self->hosts[h].closed = true;
          self->lose(h, reason, true);  // nothing started there: a set-up failure
        });
  }

  void on_greeted(std::uint32_t h, const link::hello& agent) {
    auto& hs = hosts[h];
    hs.agent = agent;
    transport_for(h).established(h);
    if (relay) relay->parent_greeted(h);
    if (!facts_ready) decide_facts();
    if (facts_ready) flush_spawns(h);
  }

  // Multi-host: MASTER_ADDR and MASTER_PORT come from rank 0's agent (an address of its host the
  // others reach, a port free there); TF_CONFIG needs every node's address.
  void decide_facts() {
    const std::uint32_t h0 = req.map.host_of_node(req.map.at(0).node);
    const auto& rank0 = hosts[h0];
    if (!rank0.agent) return;
    std::vector<const link::hello*> others;
    for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
      const auto h = req.map.host_of_node(n);
      if (h == h0) continue;
      const auto it = hosts.find(h);
      if (it != hosts.end() && it->second.agent) others.push_back(&*it->second.agent);
    }
    const bool need_all = has(req.env.profiles, env_profile::tf);
    if (need_all && others.size() + 1 < req.map.num_nodes()) return;
    // This machine holds rank 0: its address must be one the other hosts reach, so wait for one.
    if (host_info(h0).local && others.empty() && req.map.num_nodes() > 1) return;
    auto& facts = req.env.facts;
    facts.master_addr = driver::pick_address(*rank0.agent, req.remote.iface, others);
    if (!req.master_port_fixed && rank0.agent->port != 0) facts.master_port = rank0.agent->port;
    facts.node_addrs.assign(req.map.num_nodes(), facts.master_addr);
    for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
      const auto it = hosts.find(req.map.host_of_node(n));
      if (it != hosts.end() && it->second.agent) {
        facts.node_addrs[n] = driver::pick_address(*it->second.agent, req.remote.iface, others);
      }
    }
    facts_ready = true;
    for (auto& [h, hs] : hosts) flush_spawns(h);
  }

  // Spawn requests go out in small batches: each rank's profile variables are built just before
  // they are sent, so the launcher never holds every rank's environment at once.
  static constexpr std::size_t spawn_batch = 16;

  link::rank_spec spec_of(std::uint32_t r) const {
    if (const auto* j = spawned_of(r)) {
      // A spawned rank: its own job's map and apps; stdin /dev/null (as under mpirun).
      link::rank_spec s;
      s.rank = r;
      s.app = j->first_app + j->map.at(r - j->first).app;
      auto vars = profile_env(j->map, r - j->first, req.env.profiles, req.env.facts);
      // Its map holds the free slots only; the universe is the allocation's (as PMIx says).
      for (auto& v : vars) {
        if (v.name == "OMPI_UNIVERSE_SIZE") v.value = std::to_string(req.map.total_slots());
      }
      s.env = joined(vars);
      return s;
    }
    link::rank_spec s;
    s.rank = r;
    s.app = req.map.at(r).app;
    s.env = joined(profile_env(req.map, r, req.env.profiles, req.env.facts));
    s.stdin_from_launcher =
        req.per_rank_stdin.empty()
            ? req.stdin_fd >= 0 && static_cast<std::int64_t>(r) == req.stdin_rank
            : r < req.per_rank_stdin.size() && req.per_rank_stdin[r] >= 0;
    return s;
  }

  std::vector<link::owned_fd> stdin_for(const link::spawn_request& m) const {
    std::vector<link::owned_fd> fds;
    bool wants = false;
    for (const auto& r : m.ranks) wants = wants || r.stdin_from_launcher;
    if (!wants) return fds;
    const int fd = req.per_rank_stdin.empty() ? req.stdin_fd : req.per_rank_stdin[m.ranks[0].rank];
    fds.emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    return fds;
  }

  void flush_spawns(std::uint32_t h) {
    auto& hs = hosts[h];
    if (hs.pending_spawns.empty() || !hs.link || hs.link->down()) return;
    auto ranks = std::move(hs.pending_spawns);
    hs.pending_spawns.clear();
    const bool local = host_info(h).local;
    if (local && !req.per_rank_stdin.empty()) {
      // --stdin all: every rank reads its own pipe, so each spawn carries its own descriptor.
      for (auto r : ranks) {
        link::spawn_request m;
        m.ranks.push_back(spec_of(r));
        auto fds = stdin_for(m);
        if (fds.empty() || !fds.front()) m.ranks.front().stdin_from_launcher = false;
        hs.link->send(m, std::move(fds));
      }
      return;
    }
    for (std::size_t first = 0; first < ranks.size(); first += spawn_batch) {
      link::spawn_request m;
      const auto end = std::min(ranks.size(), first + spawn_batch);
      m.ranks.reserve(end - first);
      for (auto i = first; i < end; ++i) m.ranks.push_back(spec_of(ranks[i]));
      std::vector<link::owned_fd> fds;
      if (local) {
        fds = stdin_for(m);
        if (!fds.empty() && !fds.front()) fds.clear();
      }
      std::vector<std::pair<std::uint32_t, int>> inputs;  // remote ranks fed from here
      if (!local) {
        for (auto& r : m.ranks) {
          if (!r.stdin_from_launcher) continue;
          const int source = req.per_rank_stdin.empty() ? req.stdin_fd : req.per_rank_stdin[r.rank];
          inputs.emplace_back(r.rank, source);
        }
      } else if (fds.empty()) {
        // No descriptor to give: those ranks read /dev/null.
        for (auto& r : m.ranks) r.stdin_from_launcher = false;
      }
      hs.link->send(m, std::move(fds));
      for (const auto& [rank, source] : inputs) start_pump(h, rank, source);
    }
  }

  void start_pump(std::uint32_t h, std::uint32_t rank, int source) {
    auto p = std::make_unique<input_pump>();
    p->host = h;
    p->rank = rank;
    p->fd.reset(::fcntl(source, F_DUPFD_CLOEXEC, 3));
    struct stat st {};
    if (p->fd && ::fstat(p->fd.get(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      // A private non-blocking description, so that the launcher's own stays as it was.
      const std::string path = "/proc/self/fd/" + std::to_string(p->fd.get());
      const int nfd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (nfd >= 0) {
        p->fd.reset(nfd);
        p->waiter.emplace(io);
        p->waiter->assign(::fcntl(nfd, F_DUPFD_CLOEXEC, 3));  // the waiter owns its own copy
      }
    }
    pumps.push_back(std::move(p));
    pump(*pumps.back());
  }

  void pump(input_pump& p) {
    if (p.done || p.waiting) return;
    auto it = hosts.find(p.host);
    if (!p.fd || it == hosts.end() || !it->second.link || it->second.link->down() || finishing) {
      p.done = true;
      return;
    }
    auto& hl = *it->second.link;
    for (int round = 0; round < 16; ++round) {
      const auto credit = hl.credit();
      if (credit == 0) return;  // on_credit resumes
      const auto want = std::min<std::size_t>(input_buffer.size(), credit);
      const ssize_t n = ::read(p.fd.get(), input_buffer.data(), want);
      if (n > 0) {
        hl.send_input(p.rank, {reinterpret_cast<const std::uint8_t*>(input_buffer.data()),
                               static_cast<std::size_t>(n)});
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && p.waiter) {
        p.waiting = true;
        p.waiter->async_wait(
            asio::posix::descriptor_base::wait_read,
            [weak = weak_from_this(), pp = &p](const boost::system::error_code& ec) {
              auto self = weak.lock();
              if (!self || ec) return;
              pp->waiting = false;
              self->pump(*pp);
            });
        return;
      }
      // End of input (or an error: nothing more will come).
      p.done = true;
      hl.send(link::input_closed{p.rank});
      return;
    }
    asio::post(io, [weak = weak_from_this(), pp = &p] {
      if (auto self = weak.lock()) self->pump(*pp);
    });
  }

  void on_credit(std::uint32_t h) {
    for (auto& p : pumps) {
      if (p->host == h) pump(*p);
    }
  }

  void on_message(std::uint32_t h, link::message& m, std::vector<link::owned_fd> fds) {
    std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, link::started>) {
            // Output first, so that the output layer owns the pipes before the rank counts.
            for (std::size_t i = 0; i < fds.size(); ++i) {
              const stream_kind k = i == 0 ? stream_kind::out : stream_kind::err;
              attach_pipe(x.rank, k, fds[i].release());
            }
            post(rank_started{x.rank, x.pid});
            spawned_rank_reported(h, x.rank, nullptr);
          } else if constexpr (std::is_same_v<T, link::spawn_failed>) {
            post(rank_spawn_failed{x.rank, x.code, x.reason});
            spawned_rank_reported(h, x.rank, &x.reason);
          } else if constexpr (std::is_same_v<T, link::pmix_spawn>) {
            on_pmix_spawn(h, x);
          } else if constexpr (std::is_same_v<T, link::pmix_publish>) {
            if (on_host(x.rank, h)) answer_data(store.publish(h, x));
          } else if constexpr (std::is_same_v<T, link::pmix_lookup>) {
            on_lookup(h, x);
          } else if constexpr (std::is_same_v<T, link::pmix_unpublish>) {
            if (on_host(x.rank, h)) answer_data({store.unpublish(h, x)});
          } else if constexpr (std::is_same_v<T, link::exited>) {
            post(rank_exited{x.rank, x.status});
          } else if constexpr (std::is_same_v<T, link::stream_closed>) {
            close_pushed(h, x.rank, x.stream);
          } else if constexpr (std::is_same_v<T, link::shutdown_done>) {
            // The agent exits next; its end-of-file closes the link.
          } else if constexpr (std::is_same_v<T, link::agent_error>) {
            hosts[h].agent_error = x.text;
          } else if constexpr (std::is_same_v<T, link::pmix_abort>) {
            on_pmix_abort(h, x);
          } else if constexpr (std::is_same_v<T, link::fence_contribution>) {
            on_fence(h, x);
          } else if constexpr (std::is_same_v<T, link::agent_notice>) {
            if (cb.on_message) cb.on_message(host_info(h).name + ": " + x.text);
          } else if constexpr (std::is_same_v<T, link::pmix_unfinalized>) {
            on_unfinalized(h, x);
          } else if constexpr (std::is_same_v<T, link::modex_request>) {
            on_modex_request(h, x);
          } else if constexpr (std::is_same_v<T, link::modex_reply>) {
            on_modex_reply(h, x);
          } else if constexpr (std::is_same_v<T, link::proc_table_request>) {
            on_proc_table_request(h, x);
          } else if constexpr (std::is_same_v<T, link::pmix_server>) {
            hosts[h].pmix = x;
          } else if constexpr (std::is_same_v<T, link::child_data> ||
                               std::is_same_v<T, link::child_closed>) {
            if (relay) relay->from_parent(h, m);
          }
        },
        m);
  }

  void attach_pipe(std::uint32_t rank, stream_kind stream, int fd) {
    out->attach(rank, stream, fd, [weak = weak_from_this(), rank, stream](std::uint64_t bytes) {
      if (auto s = weak.lock()) s->post(stream_closed{rank, stream, bytes});
    });
  }

  // A forwarded stream is opened at its first bytes (or its end, for a rank that wrote nothing).
  // An agent's messages are checked here: a stream of a rank that is not on its host, bytes after
  // the stream's end, a second end, are ignored rather than handed to the output layer.
  std::vector<std::uint8_t> pushed;  // per rank: bits 1/2 stdout/stderr open, 4/8 closed
  static std::uint8_t open_bit(stream_kind s) { return s == stream_kind::out ? 1 : 2; }
  bool pushed_stream_usable(std::uint32_t h, std::uint32_t rank, stream_kind stream) {
    if (!on_host(rank, h)) return false;
    if (stream == stream_kind::err && req.output.merge_stderr) return false;
    if (pushed.size() < ctl.size()) pushed.resize(ctl.size(), 0);
    const std::uint8_t bit = open_bit(stream);
    if ((pushed[rank] & (bit << 2)) != 0) return false;  // closed already
    if ((pushed[rank] & bit) == 0) {
      pushed[rank] |= bit;
      out->open_stream(rank, stream, [weak = weak_from_this(), rank, stream](std::uint64_t bytes) {
        if (auto s = weak.lock()) s->post(stream_closed{rank, stream, bytes});
      });
    }
    return true;
  }
  void close_pushed(std::uint32_t h, std::uint32_t rank, stream_kind stream) {
    if (!pushed_stream_usable(h, rank, stream)) return;
    pushed[rank] |= static_cast<std::uint8_t>(open_bit(stream) << 2);
    out->close_stream(rank, stream);
  }

  // A lost host sends nothing more: the streams its ranks opened end here, or the output layer
  // would wait for them forever (what they had sent is written; the rest is gone with the host).
  void end_pushed_streams(std::uint32_t h) {
    if (pushed.empty() || !out) return;
    for (const auto rank : ctl.processes_on_host(h)) {
      if (rank >= pushed.size()) continue;
      for (const auto stream : {stream_kind::out, stream_kind::err}) {
        const std::uint8_t bit = open_bit(stream);
        if ((pushed[rank] & bit) == 0 || (pushed[rank] & (bit << 2)) != 0) continue;
        pushed[rank] |= static_cast<std::uint8_t>(bit << 2);
        out->close_stream(rank, stream);
      }
    }
  }

  void on_output(std::uint32_t h, std::uint32_t rank, output_stream stream,
                 std::span<const std::uint8_t> bytes) {
    auto& hs = hosts[h];
    if (!pushed_stream_usable(h, rank, stream)) {
      if (hs.link) hs.link->acknowledge(bytes.size());  // dropped, but the credit comes back
      return;
    }
    out->push(rank, stream,
              std::span<const char>(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (out->congested(rank, stream)) {
      hs.held_ack += bytes.size();  // the agent stops once its window is used up
    } else if (hs.link) {
      hs.link->acknowledge(bytes.size());
    }
  }

  // The output layer drained a congested destination: the agents may send again.
  void on_output_ready() {
    for (auto& [h, hs] : hosts) {
      if (hs.held_ack > 0 && hs.link) hs.link->acknowledge(hs.held_ack);
      hs.held_ack = 0;
    }
  }

  // The link is over. Expected after a shutdown; otherwise the host is lost. How its carrier
  // ended (ssh's last words, pmd killed by a signal) makes the best line, so the loss waits for
  // it — briefly, for a link that was up (a cut network may leave ssh running), or for as long as
  // it takes before the hello, when that is all there is to say and ssh's 255 may be retried.
  void on_down(std::uint32_t h, std::string reason) {
    auto& hs = hosts[h];
    if (!hs.agent_error.empty()) reason = "the agent said: " + hs.agent_error;
    const bool expected = hs.shutdown_sent;
    const bool greeted = hs.agent.has_value();
    auto link = hs.link;
    auto reported = std::make_shared<bool>(false);
    // The hosts it relays lose their links with it, now; they are reported right after it.
    if (relay && greeted) {
      if (!expected) mark_subtree(h);
      relay->parent_down(h);
    }
    if (!expected && greeted && !hs.lost_with_parent) {
      // A relayed host that falls silent may be the first sign of its parent's partition (its
      // parent's last heartbeat may be up to one interval younger): wait that long more, so
      // that the parent is reported with its subtree.
      auto wait = std::chrono::milliseconds(300);
      if (tree_parent.contains(h)) wait += req.remote.heartbeat_interval;
      auto timer = std::make_shared<asio::steady_timer>(io, wait);
      timer->async_wait([weak = weak_from_this(), h, reason, reported,
                         timer](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (ec || !self || *reported) return;
        *reported = true;
        // A relayed host whose parent went down meanwhile (a partition silences both at once)
        // is reported with its parent.
        if (self->hosts[h].lost_with_parent) return;
        self->lose(h, reason);
      });
    }
    transport_for(h).close(
        h, [weak = weak_from_this(), h, reason, expected, greeted, link, reported](agent_end end) {
          auto self = weak.lock();
          if (!self) return;
          auto& st = self->hosts[h];
          if (st.link != link) return;
          st.closed = true;
          if (expected || *reported || st.lost_with_parent) {
            self->maybe_all_closed();
            return;
          }
          *reported = true;
          if (!greeted && end.retryable && st.attempts <= self->req.remote.connect_retries &&
              !self->finishing && !self->setup_given_up) {
            self->retry_later(h);
            return;
          }
          if (!greeted) {
            // Its agent never answered: a set-up failure, said in the carrier's words (ssh's
            // reason) when it has any.
            self->lose(h, end.how.empty() ? reason : end.how, true);
            return;
          }
          self->lose(h, end.how.empty() ? reason : reason + " (" + end.how + ")");
        });
  }

  // The hosts whose links went through `h` (its children in the plan, theirs, ...).
  std::vector<std::uint32_t> relayed_by(std::uint32_t h) const {
    std::vector<std::uint32_t> found;
    // Breadth first, in time linear in the subtree (a lost parent among 10,000 hosts).
    for (std::size_t i = 0; i <= found.size(); ++i) {
      const std::uint32_t parent = i == 0 ? h : found[i - 1];
      if (auto it = tree_children.find(parent); it != tree_children.end()) {
        found.insert(found.end(), it->second.begin(), it->second.end());
      }
    }
    return found;
  }

  void mark_subtree(std::uint32_t h) {
    for (const auto d : relayed_by(h)) {
      auto it = hosts.find(d);
      if (it != hosts.end() && it->second.link && !it->second.lost_told) {
        it->second.lost_with_parent = true;
      }
    }
  }

  void retry_later(std::uint32_t h) {
    auto& hs = hosts[h];
    // Jittered exponential backoff: 100 ms, 200 ms, 400 ms, ... plus up to half of it again.
    std::random_device rd;
    const auto base = std::chrono::milliseconds(100) * (1u << std::min(hs.attempts - 1, 6u));
    const auto wait = base + std::chrono::milliseconds(rd() % (base.count() / 2 + 1));
    auto timer = std::make_shared<asio::steady_timer>(io, wait);
    hs.link.reset();
    hs.retrying = true;
    timer->async_wait([weak = weak_from_this(), h, timer](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->finishing || self->hosts[h].abandoned) return;
      self->hosts[h].retrying = false;
      self->open_link(h);
      if (self->facts_ready) self->requeue_spawns(h);
    });
  }

  // A retried link starts from nothing: every rank of the host is asked for again.
  void requeue_spawns(std::uint32_t h) {
    auto& hs = hosts[h];
    const auto ranks = ctl.processes_on_host(h);
    hs.pending_spawns.assign(ranks.begin(), ranks.end());
    flush_spawns(h);
  }

  // `before_hello`: its agent never said hello (a set-up failure, exit 125; docs/exit-codes.md).
  void lose(std::uint32_t h, const std::string& reason, bool before_hello = false) {
    auto& hs = hosts[h];
    if (finishing || hs.abandoned) {
      maybe_all_closed();
      return;
    }
    if (hs.lost_told) return;
    hs.lost_told = true;
    if (relay) relay->parent_down(h);  // a host that never came up started none of its children
    end_pushed_streams(h);
    // Its subtree is lost with it: one line names them all, and each is lost right after it.
    std::vector<std::uint32_t> with_it;
    for (const auto d : relayed_by(h)) {
      auto it = hosts.find(d);
      if (it != hosts.end() && it->second.lost_with_parent && !it->second.lost_told) {
        with_it.push_back(d);
      }
    }
    std::sort(with_it.begin(), with_it.end());
    std::string names;
    for (const auto d : with_it) names += (names.empty() ? "" : ", ") + host_info(d).name;
    post(host_lost{h,
                   with_it.empty() ? reason : reason + "; with it the hosts it relayed: " + names,
                   before_hello});
    for (const auto d : with_it) {
      lose(d, "host " + host_info(h).name + ", which relayed its link, was lost",
           !hosts[d].agent.has_value());
    }
    store.host_lost(h);
    // A caller waiting for children that were to start there is told now.
    for (auto& j : spawned) {
      if (j.answered) continue;
      for (std::uint32_t r = 0; r < j.size(); ++r) {
        if (j.host_of(r) == h && !j.started[r]) {
          answer_spawn_failed(j, "host " + host_info(h).name + " was lost");
          break;
        }
      }
    }
    std::erase_if(lookup_timers, [&](const auto& t) { return t.first.first == h; });
    // Requests this host will never answer fail now: no rank waits for ever (ompi#7628).
    for (auto it = modex_routes.begin(); it != modex_routes.end();) {
      if (it->second.owner != h) {
        ++it;
        continue;
      }
      send_to(it->second.asker, link::modex_reply{it->second.asker_id, false, {}});
      it = modex_routes.erase(it);
    }
    if (fences) {
      // Ranks elsewhere wait in a fence this host will never join: fail it, and end the job
      // (Open MPI ignores a failed fence and would carry on, ompi#5086).
      const auto failed = fences->host_lost(h);
      for (const auto& o : failed) answer_fence(o);
      if (!failed.empty()) {
        post(abort_requested{std::nullopt, 1,
                             "a PMIx fence cannot complete without host " + host_info(h).name});
      }
    }
  }

  // ---- actions ----

  void execute(spawn& s) {
    auto& hs = link_to(s.host);
    hs.pending_spawns.insert(hs.pending_spawns.end(), s.ranks.begin(), s.ranks.end());
    if (facts_ready) flush_spawns(s.host);
  }
  void execute(signal_ranks& s) {
    auto it = hosts.find(s.host);
    if (it == hosts.end() || !it->second.link) return;
    it->second.link->send(link::signal_request{s.ranks, s.signo});
  }
  void execute(start_timer& t) {
    auto timer = std::make_unique<asio::steady_timer>(io, t.after);
    timer->async_wait([weak = weak_from_this(), id = t.timer](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!ec && self) self->post(timer_fired{id});
    });
    timers[t.timer] = std::move(timer);
  }
  void execute(cancel_timer& t) { timers.erase(t.timer); }  // destroying cancels the wait
  // Ranks of the job failed, or the job is being ended, where the abort policy is off: the
  // host's agent tells its ranks with a PMIx event (docs/pmix.md, "Events"). The link keeps the
  // order, so the notice is there before any signal the same event sends.
  void execute(notify_ranks& n) {
    if (!pmix_facts) return;
    std::string where;
    if (!n.ranks.empty() && n.ranks.front() < ctl.size()) {
      where = host_info(ctl.host_of(n.ranks.front())).name;
    }
    send_to(n.host, link::pmix_notify{n.kind, std::move(n.ranks), n.code, std::move(where),
                                      std::move(n.line)});
  }
  void execute(emit& e) {
    if (cb.on_message) cb.on_message(e.line);
  }
  // The ranks are gone but something they left holds their output open: the agents clear it.
  void execute(clear_leftovers&) { shutdown_agents(); }
  void execute(finish& f) {
    final_report = std::move(f.report);
    finishing = true;
    timers.clear();
    lookup_timers.clear();
    // Every stream reached end-of-stream; let the output layer write what it holds, then let the
    // agents clear what the ranks left behind, then report.
    out->async_drain([self = shared_from_this()] {
      self->after_shutdown = [self] {
        self->done = true;
        if (self->cb.on_finish) self->cb.on_finish(*self->final_report);
      };
      self->shutdown_agents();
      self->maybe_all_closed();
    });
  }

  void shutdown_agents() {
    for (auto& [h, hs] : hosts) {
      if (hs.shutdown_sent || !hs.link || hs.closed) continue;
      hs.shutdown_sent = true;
      hs.pending_spawns.clear();
      if (hs.link->down()) continue;  // its on_down is on its way
      hs.link->send(link::shutdown_request{});
    }
  }

  void maybe_all_closed() {
    if (!after_shutdown) return;
    for (auto& [h, hs] : hosts) {
      if (hs.link && !hs.closed) return;
    }
    auto f = std::move(after_shutdown);
    after_shutdown = nullptr;
    f();
  }

  // The tree launch (ssh only): the plan over the job's other hosts in node order; a host whose
  // parent is another host is reached through that host's agent.
  void plan_tree() {
    if (!req.remote.tree || req.remote_transport || req.remote.launcher != agent_launcher::ssh) {
      return;
    }
    std::vector<std::uint32_t> remote;
    for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
      const auto h = req.map.host_of_node(n);
      if (!host_info(h).local) remote.push_back(h);
    }
    const link::launch_plan_options shape{link::launch_shape::tree,
                                          std::max<std::uint32_t>(1, req.remote.tree_fanout)};
    for (std::uint32_t i = 0; i < remote.size(); ++i) {
      const auto step = link::plan_step(i, shape);
      if (step.parent != link::by_launcher) {
        tree_parent[remote[i]] = remote[step.parent];
        tree_children[remote[step.parent]].push_back(remote[i]);
      }
    }
    if (tree_parent.empty()) return;
    relay::relay_hooks hooks;
    std::weak_ptr<impl> weak = weak_from_this();
    hooks.send = [weak](std::uint32_t parent, const link::message& m) {
      if (auto self = weak.lock()) self->send_to(parent, m);
    };
    hooks.parent_of = [weak](std::uint32_t h) {
      auto self = weak.lock();
      return self ? self->tree_parent.at(h) : 0;
    };
    hooks.name_of = [weak](std::uint32_t h) {
      auto self = weak.lock();
      return self ? self->host_info(h).name : std::string();
    };
    relay = std::make_shared<relay::relay_transport>(io, req.remote, std::move(hooks));
  }

  void start() {
    out = std::make_unique<io::output_forwarder>(io, req.output, req.map.size());
    out->set_resume_callback([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->on_output_ready();
    });
    local_agent_path = req.agent_path.empty() ? local::default_agent_path() : req.agent_path;
    if (::access(local_agent_path.c_str(), X_OK) != 0) {
      throw error(errc::launch,
                  "cannot start the agent: '" + local_agent_path + "' is not an executable file");
    }
    base_env = joined(req.env.base);
    std::error_code ec;
    launcher_cwd = std::filesystem::current_path(ec).string();
    for (const auto& v : req.env.base) {
      if (v.name.starts_with("OMPI_MCA_")) mca_exports.push_back(joined(v));
    }
    if (!req.remote.notice) req.remote.notice = cb.on_message;
    router =
        std::make_unique<transport_router>(io, req.remote, req.remote_transport, req.prestarted);
    plan_tree();
    if (req.pmix) {
      char ns[64];
      std::snprintf(ns, sizeof ns, "pmrun.%d.%08llx", static_cast<int>(::getpid()),
                    static_cast<unsigned long long>(nonce & 0xffffffffu));
      pmix_facts = agent::pmix::pmix_job_of(agent::pmix::make_job_info(req.map, ns, 0));
      fences.emplace(req.map, [this](std::uint32_t process) -> std::optional<std::uint32_t> {
        if (process < ctl.size()) return ctl.host_of(process);
        return std::nullopt;
      });
    }
    facts_ready = req.map.num_nodes() <= 1 && all_local();
    post(job_start{});
  }
};

job_runner::job_runner(asio::io_context& io, job_request request, job_callbacks callbacks)
    : impl_(std::make_shared<impl>(io, std::move(request), std::move(callbacks))) {
  impl_->req.control.streams_per_rank = impl_->req.output.merge_stderr ? 1 : 2;
  // Only PMIx ranks can be told (their agents' servers send the events).
  impl_->req.control.notify_failures = impl_->req.pmix;
  impl_->ctl = controller(impl_->req.map, impl_->req.control);
  impl_->check_programs();
}

job_runner::~job_runner() = default;

void job_runner::start() {
  impl_->start();
}
void job_runner::signal(int signo) {
  check_job_signal(signo);
  if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP) {
    // The second one escalates (the controller's SIGKILL to every rank) and waits for no agent.
    if (++impl_->interrupts >= 2) {
      impl_->post(signal_received{signo});
      impl_->hurry();
      return;
    }
  }
  // A stopped launcher reads nothing: the agents must not take its silence for a loss.
  if (signo == SIGTSTP) {
    for (auto& [h, hs] : impl_->hosts) {
      if (hs.link) hs.link->suspend();
    }
  } else if (signo == SIGCONT) {
    for (auto& [h, hs] : impl_->hosts) {
      if (hs.link) hs.link->resume();
    }
  }
  impl_->post(signal_received{signo});
}
void job_runner::cancel() {
  impl_->post(abort_requested{std::nullopt, 1, "cancelled"});
}
bool job_runner::finished() const noexcept {
  return impl_->done;
}
job_report job_runner::report() const {
  return impl_->final_report ? *impl_->final_report : impl_->ctl.report();
}
std::vector<agent_report> job_runner::agents() const {
  std::vector<agent_report> out;
  for (const auto& [h, hs] : impl_->hosts) {
    agent_report a;
    a.host = h;
    if (hs.agent) a.pid = hs.agent->pid;
    if (hs.pmix) {
      a.pmix_uri = hs.pmix->uri;
      a.pmix_tmpdir = hs.pmix->tmpdir;
    }
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(),
            [](const agent_report& a, const agent_report& b) { return a.host < b.host; });
  return out;
}

}  // namespace pm
