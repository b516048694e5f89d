// The launcher machine (launch/launcher.hpp) driven with no process, no descriptor and no clock:
// each host's agent is a real agent-side link endpoint in memory that answers as pmd would
// (hello, started, exited, stream ends, shutdown, child_open/child_data for the tree), time is
// virtual, and every input the machine's actions ask for is fed after the batch, never nested.
#include "launch/launcher.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <deque>
#include <functional>
#include <map>
#include <set>

#include "pm/env.hpp"
#include "pm/job.hpp"
#include "pm/job_map.hpp"

namespace {

using namespace std::chrono_literals;
using pm::launch::link_time;
namespace launch = pm::launch;
namespace link = pm::link;

constexpr std::uint64_t nonce = 0x5eed;
constexpr std::uint32_t direct = UINT32_MAX;

// A job of `per_host` ranks on each of `hosts` remote hosts h0, h1, ...
launch::launch_config remote_job(std::uint32_t hosts, std::uint32_t per_host) {
  pm::allocation alloc;
  for (std::uint32_t h = 0; h < hosts; ++h) {
    alloc.hosts.push_back(pm::host{"h" + std::to_string(h), per_host, 0, true, false});
  }
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"app"}, hosts * per_host, {}, {}});
  launch::launch_config c;
  c.request.map = pm::map_job(spec, alloc);
  c.request.apps = spec.apps;
  c.request.env.profiles = pm::default_env_profiles;
  c.request.pmix = false;
  c.request.remote.heartbeat_interval = 500ms;
  c.request.remote.heartbeat_misses = 4;
  c.nonce = nonce;
  c.seed = 1;
  c.local_agent_path = "/opt/pm/bin/pmd";
  c.cwd = "/work";
  c.pmix_namespace = "pmrun.test";
  return c;
}

// The machine and a world around it.
struct world {
  explicit world(launch::launch_config c) : m(std::move(c)) {}

  struct agent {
    std::unique_ptr<link::endpoint> ep;
    std::uint32_t via = direct;  // the host whose agent relays this one's link
    bool gone = false;
    bool exiting = false;  // shutdown: exits once the agents it relays are gone (as pmd)
    std::set<std::uint32_t> running;
    std::vector<link::message> got;
  };

  launch::launcher m;
  link_time t{};
  std::map<std::uint32_t, agent> agents;
  std::map<std::uint64_t, link_time> timers;
  std::map<std::uint32_t, link_time> deadlines;
  std::deque<std::function<void()>> answers;
  std::optional<pm::job_report> report;
  std::vector<std::string> lines;
  std::map<std::uint32_t, int> opens;                                   // open_host per host
  std::vector<std::pair<std::uint32_t, link::child_open>> child_opens;  // (parent, what)
  std::map<std::uint32_t, std::uint32_t> starts;                        // child_open per host
  std::vector<std::chrono::milliseconds> timer_lengths;
  std::string output;

  // What the test says about hosts and ranks.
  std::map<std::uint32_t, int> exit_code;                        // by rank (default: 0 at once)
  std::set<std::uint32_t> keep_running;                          // ranks that run until signalled
  std::set<std::uint32_t> deaf;                                  // agents that answer no signal
  std::map<std::uint32_t, std::deque<pm::agent_end>> ssh_fails;  // per open, before the hello
  bool fence = false;                           // agents contribute to one fence across hosts
  std::map<std::uint32_t, std::string> shapes;  // per host: its topology's text
  std::map<std::uint32_t, std::deque<int>> child_ssh_fails;  // relayed: ssh's exit codes
  std::set<std::uint32_t> slow_children;  // relayed hosts that come up only when told
  // Restarts in place: each agent's incarnation, and a rank's code per incarnation (else
  // exit_code's).
  std::map<std::uint32_t, std::uint32_t> incarnation_of;           // by host
  std::map<std::pair<std::uint32_t, std::uint32_t>, int> code_in;  // (incarnation, rank)
  std::set<std::uint32_t> silent_restart;  // agents that never answer a restart
  std::map<std::uint32_t, std::set<std::uint32_t>> keep_running_in;  // by incarnation
  std::vector<pm::incarnation_report> restarts;
  // --enable-recovery: how many of a rank's first processes fail (with code 7), and how many
  // processes of it were started; the rank restarts the launcher announced.
  std::map<std::uint32_t, int> fail_times;
  std::map<std::uint32_t, int> started_times;
  std::vector<pm::rank_restart_report> rank_restarts;
  std::map<std::uint32_t, link::stall_report> stall_answers;  // per host; none: it stays silent
  std::deque<launch::launcher::discovery> discoveries;        // what each discovery run finds
  std::vector<std::string> commands;                          // the discovery commands run
  std::vector<std::chrono::milliseconds> bounds;              // and how long each may take
  std::vector<launch::claim_slots> claims;                    // answered by the test

  template <class F>
  void feed(F&& f) {
    launch::actions a;
    f(a);
    for (auto& x : a) std::visit([&](auto& act) { carry_out(act); }, x);
  }

  void settle() {
    while (!answers.empty()) {
      auto f = std::move(answers.front());
      answers.pop_front();
      f();
    }
  }

  // Runs until `finished`, or `limit` of virtual time: timers and link deadlines fire in order.
  void run(link_time limit = 120s) {
    settle();
    while (!report && t < limit) {
      std::optional<link_time> next;
      for (const auto& [id, at] : timers) next = next ? std::min(*next, at) : at;
      for (const auto& [h, at] : deadlines) next = next ? std::min(*next, at) : at;
      if (!next || *next > limit) break;
      t = std::max(t, *next);
      for (auto it = timers.begin(); it != timers.end();) {
        if (it->second > t) {
          ++it;
          continue;
        }
        const auto id = it->first;
        it = timers.erase(it);
        feed([&](auto& a) { m.timer_fired(t, id, a); });
      }
      for (auto it = deadlines.begin(); it != deadlines.end();) {
        if (it->second > t) {
          ++it;
          continue;
        }
        const auto h = it->first;
        it = deadlines.erase(it);
        feed([&](auto& a) { m.link_tick(t, h, a); });
      }
      tick_agents();
      settle();
    }
  }

  void start() {
    feed([&](auto& a) { m.start(t, a); });
    settle();
  }

  // ---- the agents ----

  void bring_up(std::uint32_t h, std::uint32_t via) {
    auto& ag = agents[h];
    ag = agent{};
    ag.via = via;
    link::endpoint_options o;
    o.self = link::role::agent;
    o.nonce = nonce;
    o.heartbeat_interval = 500ms;
    o.silence_timeout = 2s;
    ag.ep = std::make_unique<link::endpoint>(o);
    link::hello me;
    me.pid = 100 + h;
    me.hostname = "h" + std::to_string(h);
    me.addrs = {"10.0.0." + std::to_string(h + 1) + "%eth0"};
    me.port = 29500;
    ag.ep->start(t, me);
    ag.ep->stream_opened(t);
    flush_agent(h);
    if (auto it = unborn.find(h); it != unborn.end()) {
      const auto bytes = std::move(it->second);
      unborn.erase(it);
      agent_gets(h, bytes);
    }
  }

  // The agent's bytes go to the launcher: straight, or as child_data through its parent.
  void flush_agent(std::uint32_t h) {
    auto& ag = agents[h];
    if (ag.gone || !ag.ep) return;
    const auto bytes = ag.ep->output();
    if (bytes.empty()) return;
    const std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
    ag.ep->consume_output(copy.size());
    if (ag.via == direct) {
      answers.push_back([this, h, copy] { feed([&](auto& a) { m.received(t, h, copy, a); }); });
    } else {
      auto& parent = agents[ag.via];
      if (parent.gone) return;
      parent.ep->send(link::child_data{h, std::string(copy.begin(), copy.end())});
      flush_agent(ag.via);
    }
  }

  void tick_agents() {
    for (auto& [h, ag] : agents) {
      if (ag.gone || !ag.ep) continue;
      std::vector<link::link_event> ev;
      ag.ep->tick(t, ev);
      agent_events(h, ev);
      flush_agent(h);
    }
  }

  void agent_gets(std::uint32_t h, std::span<const std::uint8_t> bytes) {
    auto& ag = agents[h];
    if (!ag.ep) {
      // A child still being started: its ssh's stdin holds the bytes until its agent reads them.
      unborn[h].insert(unborn[h].end(), bytes.begin(), bytes.end());
      return;
    }
    if (ag.gone) return;
    std::vector<link::link_event> ev;
    ag.ep->received(t, bytes, ev);
    agent_events(h, ev);
    flush_agent(h);
  }

  void end_rank(std::uint32_t h, std::uint32_t rank, pm::exit_status st) {
    auto& ag = agents[h];
    ag.running.erase(rank);
    ag.ep->send(link::stream_closed{{{rank, pm::output_stream::out, 0}}});
    ag.ep->send(link::stream_closed{{{rank, pm::output_stream::err, 0}}});
    ag.ep->send(link::exited{{{rank, st}}});
  }

  void agent_events(std::uint32_t h, std::vector<link::link_event>& ev) {
    for (auto& e : ev) {
      auto* in = std::get_if<link::message_in>(&e);
      if (in == nullptr) continue;
      auto& ag = agents[h];
      ag.got.push_back(in->msg);
      if (auto* j = std::get_if<link::job_setup>(&in->msg); j != nullptr && j->topology) {
        // As pmd: the host's summary (or why none) before any spawn.
        const auto it = shapes.find(h);
        ag.ep->send(it != shapes.end() ? link::host_shape{it->second, ""}
                                       : link::host_shape{"", "no topology here"});
      } else if (auto* s = std::get_if<link::spawn_request>(&in->msg)) {
        for (const auto& r : s->ranks) {
          ag.ep->send(link::started{{{r.rank, 1000 + r.rank}}});
          ag.running.insert(r.rank);
          if (r.rank == 0) {
            const std::string hi = "hello from rank 0\n";
            ag.ep->send_output(0, pm::output_stream::out,
                               {reinterpret_cast<const std::uint8_t*>(hi.data()), hi.size()});
          }
          if (fence) {
            link::fence_contribution c;
            c.collect = true;
            c.data = "d" + std::to_string(r.rank);
            ag.ep->send(c);
          }
          const auto inc = incarnation_of[h];
          const auto nth = started_times[r.rank]++;
          if (nth < fail_times[r.rank]) {
            end_rank(h, r.rank, pm::exit_status::exited(7));
          } else if (!keep_running.contains(r.rank) && !keep_running_in[inc].contains(r.rank)) {
            const auto it = code_in.find({inc, r.rank});
            end_rank(h, r.rank,
                     pm::exit_status::exited(it != code_in.end() ? it->second : exit_code[r.rank]));
          }
        }
      } else if (auto* q = std::get_if<link::stall_query>(&in->msg)) {
        if (auto it = stall_answers.find(h); it != stall_answers.end()) {
          auto answer = it->second;
          answer.id = q->id;
          ag.ep->send(answer);
        }
      } else if (auto* sig = std::get_if<link::signal_request>(&in->msg)) {
        if (deaf.contains(h)) continue;
        for (const auto r : sig->ranks) {
          if (ag.running.contains(r)) end_rank(h, r, pm::exit_status::signaled(sig->signo));
        }
      } else if (auto* re = std::get_if<link::restart_request>(&in->msg)) {
        // As pmd: what still runs is killed, reported, then the answer.
        const auto running = ag.running;
        for (const auto r : running) end_rank(h, r, pm::exit_status::signaled(SIGKILL));
        incarnation_of[h] = re->incarnation;
        if (!silent_restart.contains(h)) {
          ag.ep->send(link::restarted{re->incarnation,
                                      static_cast<std::uint16_t>(29500 + re->incarnation)});
        }
      } else if (std::holds_alternative<link::shutdown_request>(in->msg)) {
        ag.ep->send(link::shutdown_done{});
        flush_agent(h);
        ag.exiting = true;
        maybe_exit(h);
      } else if (auto* open = std::get_if<link::child_open>(&in->msg)) {
        ++starts[open->host];
        unborn.erase(open->host);  // a new ssh: what an earlier one was sent is gone with it
        child_opens.emplace_back(h, *open);
        const auto child = open->host;
        auto& fails = child_ssh_fails[child];
        if (!fails.empty()) {
          ag.ep->send(link::child_closed{child, fails.front(), 0, "Connection reset by peer"});
          fails.pop_front();
          continue;
        }
        if (slow_children.contains(child)) continue;
        answers.push_back([this, child, h] { bring_up(child, h); });
      } else if (auto* data = std::get_if<link::child_data>(&in->msg)) {
        const std::vector<std::uint8_t> bytes(data->bytes.begin(), data->bytes.end());
        const auto child = data->host;
        answers.push_back([this, child, bytes] { agent_gets(child, bytes); });
      } else if (auto* close = std::get_if<link::child_close>(&in->msg)) {
        if (!agents[close->host].gone) {
          agents[close->host].gone = true;
          ag.ep->send(link::child_closed{close->host, 0, 0, {}});
        }
        maybe_exit(h);
      }
    }
  }

  // ---- the machine's actions ----

  // The agent exits (its end of the stream closes after its last words) once every agent it
  // relays is gone.
  void maybe_exit(std::uint32_t h) {
    auto& ag = agents[h];
    if (!ag.exiting || ag.gone) return;
    for (const auto& [c, child] : agents) {
      if (child.via == h && !child.gone) return;
    }
    ag.gone = true;
    if (ag.via == direct) {
      answers.push_back([this, h] { feed([&](auto& a) { m.stream_broken(t, h, "", a); }); });
      return;
    }
    auto& parent = agents[ag.via];
    if (parent.gone) return;
    parent.ep->send(link::child_closed{h, 0, 0, {}});
    flush_agent(ag.via);
    maybe_exit(ag.via);
  }

  void carry_out(launch::open_host& x) {
    const auto h = x.target.host;
    ++opens[h];
    unborn.erase(h);  // a new ssh: what an earlier one was sent is gone with it
    auto& fails = ssh_fails[h];
    if (!fails.empty()) {
      // ssh starts, then dies before the agent says anything.
      auto end = fails.front();
      fails.pop_front();
      answers.push_back([this, h] {
        feed([&](auto& a) { m.stream_opened(t, h, 0, a); });
        feed([&](auto& a) { m.stream_broken(t, h, "", a); });
      });
      pending_end[h] = end;
      return;
    }
    answers.push_back([this, h] {
      bring_up(h, direct);
      feed([&](auto& a) { m.stream_opened(t, h, 0, a); });
    });
  }
  void carry_out(launch::host_established&) {}
  void carry_out(launch::write_host& x) {
    const auto h = x.host;
    const auto bytes = m.output(h);
    const std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
    m.consume_output(h, copy.size());
    answers.push_back([this, h, copy] { agent_gets(h, copy); });
  }
  void carry_out(launch::pass_stdin&) { ADD_FAILURE() << "no local host here"; }
  void carry_out(launch::close_host& x) {
    const auto h = x.host;
    agents[h].gone = true;
    const auto end = pending_end.contains(h) ? pending_end[h] : pm::agent_end{};
    pending_end.erase(h);
    answers.push_back([this, h, end] { feed([&](auto& a) { m.carrier_ended(t, h, end, a); }); });
  }
  void carry_out(launch::link_deadline& x) {
    if (x.at) {
      deadlines[x.host] = *x.at;
    } else {
      deadlines.erase(x.host);
    }
  }
  void carry_out(launch::start_timer_after& x) {
    timers[x.timer] = t + x.after;
    timer_lengths.push_back(x.after);
  }
  void carry_out(launch::cancel_timer_id& x) { timers.erase(x.timer); }
  void carry_out(launch::say& x) { lines.push_back(x.line); }
  void carry_out(launch::rank_changed&) {}
  void carry_out(launch::take_pipes&) { ADD_FAILURE() << "no local host here"; }
  void carry_out(launch::output_open&) {}
  void carry_out(launch::output_bytes& x) {
    output += x.bytes;
    answers.push_back([this, h = x.host, n = x.bytes.size()] {
      feed([&](auto& a) { m.output_taken(t, h, n, a); });
    });
  }
  void carry_out(launch::output_close& x) {
    answers.push_back([this, r = x.rank, s = x.stream] {
      feed([&](auto& a) { m.output_ended(t, r, s, 0, a); });
    });
  }
  void carry_out(launch::output_add_job&) {}
  void carry_out(launch::output_drain&) {
    answers.push_back([this] { feed([&](auto& a) { m.output_drained(t, a); }); });
  }
  void carry_out(launch::pump_stdin&) { ADD_FAILURE() << "no stdin here"; }
  void carry_out(launch::input_ready&) {}
  void carry_out(launch::restarting& x) { restarts.push_back(x.ended); }
  void carry_out(launch::rank_restarted& x) { rank_restarts.push_back(x.restart); }
  // --host-discovery-script: the next of `discoveries` answers (none left: it names no host).
  void carry_out(launch::discover_hosts& x) {
    commands.push_back(x.command);
    bounds.push_back(x.bound);
    launch::launcher::discovery d;
    if (!discoveries.empty()) {
      d = std::move(discoveries.front());
      discoveries.pop_front();
    }
    answers.push_back([this, d = std::move(d)]() mutable {
      feed([&](auto& a) { m.hosts_discovered(t, std::move(d), a); });
    });
  }
  void carry_out(launch::claim_slots& x) { claims.push_back(x); }
  void carry_out(launch::finished& x) {
    EXPECT_FALSE(report) << "finished twice";
    report = x.report;
  }

  std::map<std::uint32_t, pm::agent_end> pending_end;
  std::map<std::uint32_t, std::vector<std::uint8_t>> unborn;

  bool said(const std::string& part) const {
    for (const auto& l : lines) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  }
  template <class T>
  std::vector<T> received(std::uint32_t h) const {
    std::vector<T> v;
    for (const auto& msg : agents.at(h).got) {
      if (const auto* x = std::get_if<T>(&msg)) v.push_back(*x);
    }
    return v;
  }
};

TEST(Launcher, TwoRemoteHostsRunEveryRankAndTheFirstFailureDecides) {
  world w(remote_job(2, 2));
  w.exit_code[3] = 7;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->failed_rank, 3u);
  // Every rank's report, taken from the finished controller at `finished`.
  ASSERT_EQ(w.report->ranks.size(), 4u);
  EXPECT_EQ(w.report->ranks[3].state, pm::rank_state::exited);
  EXPECT_EQ(w.report->ranks[3].status, pm::exit_status::exited(7));
  EXPECT_EQ(w.report->ranks[3].host, 1u);
  EXPECT_EQ(w.opens[0], 1);
  EXPECT_EQ(w.opens[1], 1);
  EXPECT_EQ(w.output, "hello from rank 0\n");
  // Rank 0's agent said hello before any spawn went out: MASTER_ADDR is its address.
  const auto spawns = w.received<link::spawn_request>(1);
  ASSERT_EQ(spawns.size(), 1u);
  ASSERT_EQ(spawns[0].ranks.size(), 2u);
  bool master = false;
  for (const auto& v : spawns[0].ranks[0].env) master = master || v == "MASTER_ADDR=10.0.0.1";
  EXPECT_TRUE(master);
  // Each agent got the job's setup first, and the shutdown last.
  EXPECT_TRUE(std::holds_alternative<link::job_setup>(w.agents[1].got.front()));
  EXPECT_TRUE(std::holds_alternative<link::shutdown_request>(w.agents[1].got.back()));
}

// A host of 2 cores (one thread each) and 2 NVIDIA GPUs, on one NUMA node.
std::string small_gpu_host() {
  pm::topo::host_topology t;
  t.packages = 1;
  t.l3caches = 1;
  t.numa_os_index = {0};
  t.cores = {pm::topo::core{0, 0, 0, 0, 1}, pm::topo::core{0, 0, 0, 1, 1}};
  t.pu_os_index = {0, 1};
  t.gpus = {pm::topo::gpu{pm::topo::gpu_vendor::nvidia, 0, "0000:01:00.0", "", 0, 0},
            pm::topo::gpu{pm::topo::gpu_vendor::nvidia, 1, "0000:02:00.0", "", 0, 0}};
  return pm::topo::to_text(t);
}

// With GPUs asked, the spawns wait for every host's topology, then carry each rank's cpus and
// CUDA_VISIBLE_DEVICES; --report-bindings lines come before any spawn; the report has them.
TEST(Launcher, PlannedHostsGiveEachRankItsCoresAndGpu) {
  auto c = remote_job(2, 2);
  c.request.mapping.host.gpus.per_rank = 1;
  c.request.mapping.host.bind.to = pm::topo::object::core;
  c.request.mapping.report_bindings = true;
  std::vector<std::string> reported;
  c.report_binding = [&](const std::string& line) { reported.push_back(line); };
  world w(std::move(c));
  w.shapes[0] = w.shapes[1] = small_gpu_host();
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  ASSERT_EQ(reported.size(), 4u);
  EXPECT_EQ(reported[1].substr(reported[1].find(']')),
            "] MCW rank 1 bound to socket 0[core 1[hwt 0]]: [./B]");
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto spawns = w.received<link::spawn_request>(h);
    ASSERT_EQ(spawns.size(), 1u);
    for (std::uint32_t i = 0; i < 2; ++i) {
      const auto& r = spawns[0].ranks[i];
      ASSERT_TRUE(r.binding);
      EXPECT_EQ(r.binding->cpus, std::to_string(i));
      EXPECT_NE(std::find(r.env.begin(), r.env.end(), "CUDA_VISIBLE_DEVICES=" + std::to_string(i)),
                r.env.end());
    }
  }
  ASSERT_EQ(w.report->resources.size(), 4u);
  EXPECT_EQ(w.report->resources[3], (pm::rank_resources{"1", {1}, ""}));
}

// A host that cannot meet the job refuses it in one line, before any rank of any host starts.
TEST(Launcher, AHostThatCannotMeetTheJobRefusesItBeforeAnySpawn) {
  auto c = remote_job(2, 2);
  c.request.mapping.host.gpus.per_rank = 2;
  world w(std::move(c));
  w.shapes[0] = w.shapes[1] = small_gpu_host();
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 2);
  EXPECT_EQ(w.lines, (std::vector<std::string>{
                         "host 'h0' has 2 GPUs; 2 ranks x 2 GPUs asked (--gpus-per-rank 2; add "
                         ":shared to share GPUs)"}));
  for (std::uint32_t h = 0; h < 2; ++h) EXPECT_TRUE(w.received<link::spawn_request>(h).empty());
  ASSERT_EQ(w.report->ranks.size(), 4u);
  for (const auto& r : w.report->ranks) EXPECT_EQ(r.state, pm::rank_state::not_started);
}

// An agent without a topology (no hwloc there) refuses the job the same way.
TEST(Launcher, AHostWithoutATopologyRefusesAJobThatNeedsOne) {
  auto c = remote_job(1, 1);
  c.request.mapping.host.bind.to = pm::topo::object::core;
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 2);
  EXPECT_EQ(w.lines,
            (std::vector<std::string>{"host 'h0' cannot tell its topology: no topology here"}));
}

TEST(Launcher, AHostWhoseAgentNeverSaysHelloFailsTheLaunchWith125) {
  world w(remote_job(2, 1));
  w.ssh_fails[1] = {pm::agent_end{"ssh exited with code 255: Connection refused", false}};
  w.keep_running.insert(0);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 125);
  EXPECT_EQ(w.opens[1], 1);  // a refused connection is not retried
  EXPECT_TRUE(w.said("Connection refused")) << ::testing::PrintToString(w.lines);
  EXPECT_LT(w.t, 5s);  // rank 0 was ended at once, not waited for
}

TEST(Launcher, Ssh255BeforeTheHelloIsRetriedWithBackoffAndTheJobRuns) {
  world w(remote_job(2, 1));
  w.ssh_fails[1] = {pm::agent_end{"ssh exited with code 255", true},
                    pm::agent_end{"ssh exited with code 255", true}};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.opens[1], 3);
  // 100 ms then 200 ms, each plus up to half again.
  std::vector<std::chrono::milliseconds> backoff;
  for (const auto d : w.timer_lengths) {
    if (d >= 100ms && d < 300ms) backoff.push_back(d);
  }
  ASSERT_EQ(backoff.size(), 2u);
  EXPECT_LE(backoff[0], 150ms);
  EXPECT_GE(backoff[1], 200ms);
}

TEST(Launcher, TheTreeReachesEachHostThroughItsParentsAgent) {
  auto c = remote_job(4, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  // The launcher itself starts one host; each other is started by the one before it.
  EXPECT_EQ(w.opens.size(), 1u);
  ASSERT_EQ(w.child_opens.size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w.child_opens[i].first, i);
    EXPECT_EQ(w.child_opens[i].second.host, i + 1);
    bool names_host = false;
    for (const auto& word : w.child_opens[i].second.argv) {
      names_host = names_host || word == "h" + std::to_string(i + 1);
    }
    EXPECT_TRUE(names_host) << ::testing::PrintToString(w.child_opens[i].second.argv);
  }
  // The depth-3 host's own link ran end to end: its spawn and shutdown reached it.
  EXPECT_EQ(w.received<link::spawn_request>(3).size(), 1u);
  EXPECT_EQ(w.received<link::shutdown_request>(3).size(), 1u);
}

TEST(Launcher, ARelayedHostsSshCommandLineCarriesNoEnvironmentAndEndsInExit) {
  auto c = remote_job(2, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  c.request.remote.rsh_agent = {"ssh", "-F", "/cfg"};
  c.request.env.base = {{"SECRET", "launcher-only"}};
  world w(std::move(c));
  w.start();
  w.run();
  ASSERT_EQ(w.child_opens.size(), 1u);
  const auto& argv = w.child_opens[0].second.argv;
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_EQ(argv[argv.size() - 2], "h1");
  EXPECT_EQ(argv.back(), "/opt/pm/bin/pmd --stdio --nonce 0000000000005eed; exit");
  for (const auto& a : argv) EXPECT_EQ(a.find("SECRET"), std::string::npos);
}

TEST(Launcher, ARelayedHostsSsh255BeforeItsHelloIsRetriedThroughItsParent) {
  auto c = remote_job(2, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.child_ssh_fails[1] = {255};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.starts[1], 2u);
}

TEST(Launcher, AtMostMaxConcurrentChildrenOfAParentAreSetUpAtOnce) {
  // Fan-out 2: the launcher starts h0 and h1; h0 starts h2 and h3, one at a time.
  auto c = remote_job(4, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 2;
  c.request.remote.max_concurrent = 1;
  world w(std::move(c));
  w.slow_children = {2, 3};
  w.start();
  w.run(1s);
  ASSERT_EQ(w.child_opens.size(), 1u);
  EXPECT_EQ(w.child_opens[0].first, 0u);
  EXPECT_EQ(w.child_opens[0].second.host, 2u);
  w.bring_up(2, 0);  // its agent says hello: the next may start
  w.run(2s);
  ASSERT_EQ(w.child_opens.size(), 2u);
  EXPECT_EQ(w.child_opens[1].second.host, 3u);
  w.bring_up(3, 0);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
}

TEST(Launcher, ALostTreeParentIsReportedWithItsSubtreeInOneLine) {
  auto c = remote_job(3, 1);
  c.request.remote.tree = true;
  c.request.remote.tree_fanout = 1;
  world w(std::move(c));
  w.keep_running = {0, 1, 2};
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  ASSERT_EQ(w.received<link::spawn_request>(2).size(), 1u);
  // h1 (which relays h2) is cut off: its stream breaks.
  w.agents[1].gone = true;
  w.agents[2].gone = true;
  w.feed([&](auto& a) { w.m.stream_broken(w.t, 1, "", a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 213);
  EXPECT_TRUE(w.said("with it the hosts it relayed: h2")) << ::testing::PrintToString(w.lines);
}

TEST(Launcher, AFenceAcrossHostsIsAnsweredToEveryHostOnceAllContributed) {
  auto c = remote_job(2, 1);
  c.request.pmix = true;
  world w(std::move(c));
  w.fence = true;
  w.keep_running = {0, 1};
  w.start();
  w.run(2s);
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto results = w.received<link::fence_result>(h);
    ASSERT_EQ(results.size(), 1u) << "host " << h;
    EXPECT_TRUE(results[0].ok);
    EXPECT_EQ(results[0].data, "d0d1");
  }
}

TEST(Launcher, ASecondInterruptDoesNotWaitForAnAgentThatDoesNotAnswer) {
  world w(remote_job(2, 1));
  w.keep_running = {0, 1};
  w.deaf.insert(1);
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  const auto interrupted = w.t;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_LT(w.t - interrupted, 2s);
  // The silent host's rank counts as lost with it; the other was killed.
  EXPECT_EQ(w.report->ranks.at(1).state, pm::rank_state::lost);
  EXPECT_EQ(w.report->ranks.at(0).state, pm::rank_state::killed);
}

// ---- --stall-timeout: the launcher's stall decision (docs/resilience.md, "Stalls") ----

launch::launch_config stall_job(std::uint32_t hosts, std::uint32_t per_host) {
  auto c = remote_job(hosts, per_host);
  c.request.control.stall_timeout = 2s;
  return c;
}

// What the agent of `h` says of its ranks: one sample each, pids 1000 + rank.
link::stall_report quiet_ranks(std::vector<std::uint32_t> ranks) {
  link::stall_report r;
  for (const auto rank : ranks) {
    r.ranks.push_back(
        link::rank_activity{rank, 1000 + rank, "S", "futex_wait_queue", 20, -1, 2100});
  }
  return r;
}

void tell(world& w, std::uint32_t h, link::message m) {
  w.agents[h].ep->send(m);
  w.flush_agent(h);
  w.settle();
}

std::size_t queries(const world& w, std::uint32_t h) {
  return w.received<link::stall_query>(h).size();
}

TEST(LauncherStall, EveryAgentIsToldTheTimeoutAndItsSamplePeriod) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.start();
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto setup = w.received<link::job_setup>(h);
    ASSERT_EQ(setup.size(), 1u);
    EXPECT_EQ(setup[0].stall, (link::stall_watch{2000, 200}));
  }
  // Without the option the setup has none.
  world plain(remote_job(1, 1));
  plain.start();
  EXPECT_FALSE(plain.received<link::job_setup>(0).at(0).stall);
}

TEST(LauncherStall, TheJobIsStalledOnlyWhenEveryHostWithLiveRanksIsQuiet) {
  world w(stall_job(2, 2));
  w.keep_running = {0, 1, 2, 3};
  w.stall_answers[0] = quiet_ranks({0, 1});
  w.stall_answers[1] = quiet_ranks({2, 3});
  w.stall_answers[1].ranks[1] = link::rank_activity{3, 1003, "D", "", 1500, 2345, 2100};
  w.start();
  tell(w, 0, link::host_quiet{true, 2});
  EXPECT_EQ(queries(w, 0), 0u);  // h1 still progresses
  tell(w, 1, link::host_quiet{true, 2});
  EXPECT_EQ(queries(w, 0), 1u);
  EXPECT_EQ(queries(w, 1), 1u);
  // One line per host, ranks ascending, then the controller's line; the job is aborted.
  ASSERT_GE(w.lines.size(), 3u);
  EXPECT_EQ(w.lines[0],
            "stalled on h0: rank 0 (pid 1000, S in futex_wait_queue, cpu 0.02 s, no output yet); "
            "rank 1 (pid 1001, S in futex_wait_queue, cpu 0.02 s, no output yet)");
  EXPECT_EQ(w.lines[1],
            "stalled on h1: rank 2 (pid 1002, S in futex_wait_queue, cpu 0.02 s, no output yet); "
            "rank 3 (pid 1003, D, cpu 1.50 s, last output 2.3 s ago)");
  EXPECT_EQ(w.lines[2],
            "no rank progressed for 2 s (--stall-timeout); aborting the job (SIGTERM to 4 ranks)");
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, pm::exit_codes::stalled);
  EXPECT_EQ(w.report->cause, pm::cause_kind::stalled);
  EXPECT_EQ(w.report->summary, "no rank progressed for 2 s (--stall-timeout)");
  EXPECT_EQ(w.report->ranks_killed, 4u);
  EXPECT_FALSE(w.report->failed_rank);
}

TEST(LauncherStall, AHostThatTurnsActiveWhileAskedCallsTheStallOff) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.stall_answers[0] = quiet_ranks({0});  // h1 answers only when the test says
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  tell(w, 1, link::host_quiet{true, 1});
  ASSERT_EQ(queries(w, 1), 1u);
  tell(w, 1, link::host_quiet{false, 1});
  auto late = quiet_ranks({1});
  late.id = 1;
  tell(w, 1, late);
  EXPECT_TRUE(w.lines.empty());
  // The answer bound's timer is gone with the round: nothing happens later either.
  w.run(w.t + 5s);
  EXPECT_TRUE(w.lines.empty());
  EXPECT_FALSE(w.report);
  // Quiet again: a new round, with a new id.
  w.stall_answers[1] = quiet_ranks({1});
  tell(w, 1, link::host_quiet{true, 1});
  ASSERT_EQ(queries(w, 1), 2u);
  EXPECT_EQ(w.received<link::stall_query>(1)[1].id, 2u);
  EXPECT_EQ(w.lines.size(), 3u);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::stalled);
}

TEST(LauncherStall, AnAgentThatDoesNotAnswerIsNamedAfterOneSecond) {
  world w(stall_job(2, 2));
  w.keep_running = {0, 1, 2, 3};
  w.stall_answers[0] = quiet_ranks({0, 1});
  w.start();
  tell(w, 0, link::host_quiet{true, 2});
  tell(w, 1, link::host_quiet{true, 2});
  EXPECT_TRUE(w.lines.empty());
  // The answers are waited for 1 s.
  ASSERT_FALSE(w.timer_lengths.empty());
  EXPECT_EQ(w.timer_lengths.back(), 1s);
  const auto asked = w.t;
  w.run(asked + 1s);
  ASSERT_GE(w.lines.size(), 3u);
  EXPECT_TRUE(w.lines[0].starts_with("stalled on h0: rank 0 (pid 1000"));
  EXPECT_EQ(w.lines[1], "stalled on h1: its agent did not answer (ranks 2 3)");
  EXPECT_TRUE(w.lines[2].starts_with("no rank progressed for 2 s"));
}

TEST(LauncherStall, RanksThatEndLeaveOnlyTheQuietHostsToDecide) {
  world w(stall_job(2, 1));
  w.keep_running = {0, 1};
  w.stall_answers[0] = quiet_ranks({0});
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  EXPECT_EQ(queries(w, 0), 0u);
  // h1's rank ends by itself: h0 is the only host with a live rank, and it is quiet.
  w.end_rank(1, 1, pm::exit_status::exited(0));
  w.flush_agent(1);
  w.settle();
  EXPECT_EQ(queries(w, 0), 1u);
  EXPECT_EQ(queries(w, 1), 0u);
  ASSERT_EQ(w.lines.size(), 2u);
  EXPECT_TRUE(w.lines[0].starts_with("stalled on h0: "));
  EXPECT_EQ(w.lines[1],
            "no rank progressed for 2 s (--stall-timeout); aborting the job (SIGTERM to 1 rank)");
}

TEST(LauncherStall, NoStallWithoutTheOption) {
  world w(remote_job(2, 1));
  w.keep_running = {0, 1};
  w.start();
  tell(w, 0, link::host_quiet{true, 1});
  tell(w, 1, link::host_quiet{true, 1});
  EXPECT_EQ(queries(w, 0), 0u);
  EXPECT_TRUE(w.lines.empty());
}

TEST(Launcher, NothingComesOutAfterFinished) {
  world w(remote_job(2, 1));
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  launch::actions a;
  w.m.signal(w.t, SIGINT, a);
  w.m.timer_fired(w.t, launch::launcher_timers + 1, a);
  w.m.stream_broken(w.t, 0, "", a);
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(w.m.done());
}

// ---- restarts in place (docs/resilience.md) ----

std::string env_of(const link::rank_spec& r, const std::string& name) {
  for (const auto& v : r.env) {
    if (v.starts_with(name + "=")) return v.substr(name.size() + 1);
  }
  return "<unset>";
}

TEST(Launcher, AFailedIncarnationRestartsOnTheSameAgentsWithFreshFacts) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.code_in[{0, 3}] = 7;  // fails once, then succeeds
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.report->cause, pm::cause_kind::none);
  // No new ssh: the agents that ran incarnation 0 ran incarnation 1.
  EXPECT_EQ(w.opens[0], 1);
  EXPECT_EQ(w.opens[1], 1);
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].number, 0u);
  EXPECT_EQ(w.report->incarnations[0].exit_code, 7);
  EXPECT_EQ(w.report->incarnations[0].cause, pm::cause_kind::rank_failed);
  EXPECT_EQ(w.report->incarnations[0].failed_rank, 3u);
  EXPECT_EQ(w.report->incarnations[1].number, 1u);
  EXPECT_EQ(w.report->incarnations[1].exit_code, 0);
  ASSERT_EQ(w.restarts.size(), 1u);
  EXPECT_EQ(w.restarts[0], w.report->incarnations[0]);
  EXPECT_TRUE(w.said("restarting the job (1 of 3): rank 3 on h1 exited with code 7")) << w.lines[0];
  for (std::uint32_t h = 0; h < 2; ++h) {
    // One restart request, between the incarnations' spawns; the shutdown after the last.
    const auto restarts = w.received<link::restart_request>(h);
    ASSERT_EQ(restarts.size(), 1u);
    EXPECT_EQ(restarts[0].incarnation, 1u);
    EXPECT_FALSE(restarts[0].pmix);  // --no-pmix here
    const auto spawns = w.received<link::spawn_request>(h);
    ASSERT_EQ(spawns.size(), 2u);
    for (std::uint32_t i = 0; i < 2; ++i) {
      for (const auto& r : spawns[i].ranks) {
        EXPECT_EQ(env_of(r, "TORCHELASTIC_RESTART_COUNT"), std::to_string(i));
        EXPECT_EQ(env_of(r, "TORCHELASTIC_MAX_RESTARTS"), "3");
        EXPECT_EQ(env_of(r, "TORCHELASTIC_RUN_ID"), "pmrun.test");
        // A fresh MASTER_PORT: rank 0's agent's answer to the restart.
        EXPECT_EQ(env_of(r, "MASTER_PORT"), i == 0 ? "29500" : "29501");
      }
    }
    EXPECT_TRUE(std::holds_alternative<link::shutdown_request>(w.agents[h].got.back()));
  }
}

TEST(Launcher, TheBudgetIsTheLaunchsAndTheLastFailureDecides) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 2;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.code_in[{1, 1}] = 8;
  w.code_in[{2, 1}] = 9;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 9);
  EXPECT_EQ(w.report->failed_rank, 1u);
  ASSERT_EQ(w.report->incarnations.size(), 3u);
  EXPECT_EQ(w.report->incarnations[1].exit_code, 8);
  EXPECT_EQ(w.restarts.size(), 2u);
  EXPECT_TRUE(w.said("restarting the job (2 of 2): rank 1 on h1 exited with code 8"));
  EXPECT_FALSE(w.said("(3 of 2)"));
  // The first restart at once, the second after 50 ms.
  EXPECT_NE(std::find(w.timer_lengths.begin(), w.timer_lengths.end(), 50ms), w.timer_lengths.end());
  EXPECT_EQ(w.received<link::restart_request>(1).size(), 2u);
  // Without restarts a report has no incarnations (its JSON keeps its schema).
  world plain(remote_job(1, 1));
  plain.start();
  plain.run();
  ASSERT_TRUE(plain.report);
  EXPECT_TRUE(plain.report->incarnations.empty());
  EXPECT_EQ(pm::to_json(*plain.report).find("incarnations"), std::string::npos);
  EXPECT_NE(pm::to_json(*w.report).find("\"restarts\": 2"), std::string::npos);
}

// --enable-recovery (docs/resilience.md, "Recovering single ranks"): the failed rank alone is
// asked for again, from the same agent, with its own restart count; the job never restarts.
TEST(LauncherRecovery, AFailedRankIsSpawnedAgainAloneWithItsOwnCount) {
  auto c = remote_job(2, 2);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.per_rank = true;
  world w(std::move(c));
  w.fail_times[3] = 2;  // rank 3 (on h1) fails twice, then succeeds
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_EQ(w.report->cause, pm::cause_kind::none);
  EXPECT_TRUE(w.report->incarnations.empty());
  EXPECT_TRUE(w.restarts.empty());
  EXPECT_TRUE(w.received<link::restart_request>(1).empty());
  ASSERT_EQ(w.rank_restarts.size(), 2u);
  EXPECT_EQ(w.rank_restarts, w.report->rank_restarts);
  EXPECT_EQ(w.rank_restarts[1].number, 2u);
  EXPECT_EQ(w.rank_restarts[1].count, 2u);
  EXPECT_TRUE(w.said("restarting rank 3 on h1 (1 of 3): rank 3 on h1 exited with code 7"));
  EXPECT_TRUE(w.said("restarting rank 3 on h1 (2 of 3): rank 3 on h1 exited with code 7"));
  EXPECT_EQ(w.started_times[3], 3);
  EXPECT_EQ(w.started_times[2], 1);  // the other rank of h1 ran once
  const auto spawns = w.received<link::spawn_request>(1);
  ASSERT_EQ(spawns.size(), 3u);
  for (std::uint32_t i = 1; i < 3; ++i) {
    ASSERT_EQ(spawns[i].ranks.size(), 1u);
    EXPECT_EQ(spawns[i].ranks[0].rank, 3u);
    EXPECT_EQ(env_of(spawns[i].ranks[0], "TORCHELASTIC_RESTART_COUNT"), std::to_string(i));
    EXPECT_EQ(env_of(spawns[i].ranks[0], "TORCHELASTIC_MAX_RESTARTS"), "3");
    EXPECT_FALSE(spawns[i].ranks[0].stdin_from_launcher);
  }
  EXPECT_EQ(env_of(spawns[0].ranks[0], "TORCHELASTIC_RESTART_COUNT"), "0");
  const auto json = pm::to_json(*w.report);
  EXPECT_NE(json.find("\"restarts\": 2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rank_restarts\""), std::string::npos) << json;
  EXPECT_EQ(json.find("incarnations"), std::string::npos) << json;
}

// --enable-recovery without a budget (PRRTE's default): nothing restarts and the others run on
// past the failed rank, decided by the launcher for every embedder; keep_abort (pmrun's explicit
// -mca orte_abort_on_non_zero_status 1) keeps the abort.
TEST(LauncherRecovery, WithoutABudgetTheOthersRunOnUnlessTheAbortIsKept) {
  for (const bool keep : {false, true}) {
    auto c = remote_job(2, 1);
    c.request.restarts.per_rank = true;
    c.request.restarts.keep_abort = keep;
    world w(std::move(c));
    w.exit_code[1] = 7;
    w.keep_running = {0};
    w.start();
    w.run(2s);
    if (keep) {
      ASSERT_TRUE(w.report);
      EXPECT_EQ(w.report->ranks_killed, 1u);
    } else {
      EXPECT_FALSE(w.report) << "the others were stopped";
      EXPECT_TRUE(w.received<link::signal_request>(0).empty());
    }
    EXPECT_TRUE(w.rank_restarts.empty());
  }
}

TEST(LauncherRecovery, TheSpentBudgetLeavesTheFailureToThePolicy) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 1;
  c.request.restarts.per_rank = true;
  world w(std::move(c));
  w.fail_times[1] = 5;
  w.keep_running = {0};
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->failed_rank, 1u);
  EXPECT_EQ(w.rank_restarts.size(), 1u);
  EXPECT_EQ(w.started_times[1], 2);
  EXPECT_FALSE(w.said("(2 of 1)"));
}

TEST(Launcher, ASignalOrATimeoutIsNeverRestarted) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.keep_running = {0, 1};
  w.start();
  w.run(1s);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGTERM, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  EXPECT_TRUE(w.restarts.empty());
  EXPECT_TRUE(w.received<link::restart_request>(0).empty());

  auto t = remote_job(2, 1);
  t.request.restarts.max_restarts = 3;
  t.request.control.timeout = 2000ms;
  world timed(std::move(t));
  timed.keep_running = {0, 1};
  timed.start();
  timed.run();
  ASSERT_TRUE(timed.report);
  EXPECT_EQ(timed.report->cause, pm::cause_kind::timeout);
  EXPECT_TRUE(timed.restarts.empty());
}

TEST(Launcher, TheTimeoutBoundsEveryIncarnationTogether) {
  auto c = remote_job(1, 1);
  c.request.restarts.max_restarts = 5;
  c.request.control.timeout = 3000ms;
  world w(std::move(c));
  w.code_in[{0, 0}] = 7;
  w.keep_running_in[1] = {0};  // incarnation 0 fails at once, incarnation 1 runs for ever
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::timeout);
  EXPECT_LE(w.t, 3500ms);
}

TEST(Launcher, AHostLostWhileRestartingEndsTheLaunchWithTheFailure) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.silent_restart.insert(1);
  w.start();
  w.settle();
  // Host 1 falls silent after its failure: its restart answer never comes, then it is lost.
  w.agents[1].gone = true;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 7);
  EXPECT_EQ(w.report->cause, pm::cause_kind::rank_failed);
  EXPECT_TRUE(w.said("cannot restart the job: host h1 was lost"));
  ASSERT_EQ(w.report->incarnations.size(), 1u);
  EXPECT_EQ(w.received<link::spawn_request>(0).size(), 1u);  // no second incarnation anywhere
}

TEST(Launcher, AnInterruptBetweenIncarnationsEndsTheLaunchByIt) {
  auto c = remote_job(2, 1);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.backoff_base = 1000ms;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.code_in[{1, 1}] = 7;
  w.start();
  w.run(700ms);  // incarnation 1 failed too; the second restart waits its 1 s
  ASSERT_EQ(w.restarts.size(), 2u);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGINT, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  EXPECT_EQ(w.report->exit_code, 128 + SIGINT);
  EXPECT_TRUE(w.said("interrupted by SIGINT while restarting"));
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.received<link::spawn_request>(1).size(), 2u);  // incarnation 2 never started
}

TEST(Launcher, WithPmixEachIncarnationHasItsOwnNamespace) {
  auto c = remote_job(2, 1);
  c.request.pmix = true;
  c.request.restarts.max_restarts = 1;
  world w(std::move(c));
  w.code_in[{0, 0}] = 3;
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto setups = w.received<link::job_setup>(h);
    ASSERT_EQ(setups.size(), 1u);
    ASSERT_TRUE(setups[0].pmix);
    EXPECT_EQ(setups[0].pmix->nspace, "pmrun.test");
    const auto restarts = w.received<link::restart_request>(h);
    ASSERT_EQ(restarts.size(), 1u);
    ASSERT_TRUE(restarts[0].pmix);
    EXPECT_EQ(restarts[0].pmix->nspace, "pmrun.test.r1");
    EXPECT_EQ(restarts[0].pmix->node, h);
  }
}

// ---- spare hosts and fewer hosts (docs/resilience.md) ----

// `hosts` job hosts of `per_host` ranks and `spares` more hosts the map leaves empty.
launch::launch_config spare_job(std::uint32_t hosts, std::uint32_t spares, std::uint32_t per_host) {
  auto c = remote_job(hosts + spares, per_host);
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"app"}, hosts * per_host, {}, {}});
  c.request.map = pm::map_job(spec, c.request.map.allocation());
  c.request.apps = spec.apps;
  c.request.restarts.max_restarts = 2;
  return c;
}

// Host h's agent and everything on it die: its link breaks.
void crash(world& w, std::uint32_t h) {
  w.agents[h].gone = true;
  w.feed([&](auto& a) { w.m.stream_broken(w.t, h, "Connection reset by peer", a); });
}

std::vector<std::uint32_t> spawned_ranks(const world& w, std::uint32_t h, std::size_t request) {
  std::vector<std::uint32_t> v;
  const auto spawns = w.received<link::spawn_request>(h);
  if (request >= spawns.size()) return v;
  for (const auto& r : spawns[request].ranks) v.push_back(r.rank);
  return v;
}

// On hosts shared with other jobs (a DVM's: launch_config::claims_spawn_slots) a spawn's slots
// are claimed before any of its ranks is announced: refused, the caller hears why and nothing
// starts; claimed, its ranks start there.
TEST(LauncherSpares, ASpawnOnSharedHostsClaimsItsSlotsFirst) {
  auto c = spare_job(1, 1, 2);  // h0 runs ranks 0 and 1; h1's 2 slots are free
  c.request.restarts.max_restarts = 0;
  c.request.pmix = true;
  c.claims_spawn_slots = true;
  world w(std::move(c));
  w.keep_running = {0, 1};
  w.start();
  w.run(1s);
  ASSERT_FALSE(w.report);
  const auto ask = [&](std::uint64_t id) {
    link::pmix_spawn q;
    q.id = id;
    q.apps.push_back(link::spawn_app_spec{{"child"}, {}, {}, 2, {}});
    w.agents[0].ep->send(q);
    w.flush_agent(0);
    w.settle();
  };
  const auto answer = [&](std::size_t claim, std::string refusal) {
    w.feed([&](auto& a) { w.m.slots_claimed(w.t, w.claims.at(claim).id, refusal, a); });
    w.settle();
  };
  ask(1);
  ASSERT_EQ(w.claims.size(), 1u);
  EXPECT_EQ(w.claims[0].slots, (std::vector<std::pair<std::string, std::uint32_t>>{{"h1", 2}}));
  EXPECT_FALSE(w.claims[0].share);
  const auto added_on_h1 = [&] {
    return w.agents.contains(1) ? w.received<link::job_add>(1).size() : std::size_t{0};
  };
  EXPECT_EQ(added_on_h1(), 0u);
  answer(0, "host h1 has 0 free slots, not 2");
  auto replies = w.received<link::pmix_spawn_reply>(0);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_FALSE(replies[0].ok);
  EXPECT_EQ(replies[0].error, "its slots could not be claimed: host h1 has 0 free slots, not 2");
  EXPECT_TRUE(w.said("MPI_Comm_spawn (PMIx_Spawn) refused: its slots could not be claimed"));
  EXPECT_EQ(added_on_h1(), 0u);
  // The next spawn asks for the same places (the refused one holds none) and gets them.
  ask(2);
  ASSERT_EQ(w.claims.size(), 2u);
  EXPECT_EQ(w.claims[1].slots, w.claims[0].slots);
  answer(1, "");
  w.run(w.t + 1s);
  EXPECT_EQ(added_on_h1(), 1u);
  EXPECT_EQ(spawned_ranks(w, 1, 0), (std::vector<std::uint32_t>{2, 3}));
  replies = w.received<link::pmix_spawn_reply>(0);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[1].ok) << replies[1].error;
}

TEST(LauncherSpares, ALostHostsRanksMoveToASpareWithTheirNumbers) {
  world w(spare_job(2, 1, 2));
  w.keep_running_in[0] = {0, 1, 2, 3};
  w.start();
  w.run(1s);
  // The spare's agent is up from the start, with no rank.
  EXPECT_EQ(w.opens[2], 1);
  EXPECT_TRUE(w.received<link::spawn_request>(2).empty());
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(w.said("restarting the job (1 of 2): host h1 was lost")) << w.lines.front();
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
  EXPECT_EQ(w.opens[1], 1);  // never opened again: quarantined
  ASSERT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(spawned_ranks(w, 0, 1), (std::vector<std::uint32_t>{0, 1}));
  const auto spawns = w.received<link::spawn_request>(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& r = spawns[0].ranks[i];
    EXPECT_EQ(env_of(r, "RANK"), std::to_string(2 + i));
    EXPECT_EQ(env_of(r, "LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(env_of(r, "NODE_RANK"), "1");  // the lost host's node number
    EXPECT_EQ(env_of(r, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_of(r, "MASTER_ADDR"), "10.0.0.1");  // rank 0 stayed on h0
  }
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].cause, pm::cause_kind::host_lost);
  EXPECT_EQ(w.report->incarnations[1].hosts, 2u);
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
  EXPECT_EQ(w.report->quarantined[0].incarnation, 0u);
  const auto json = pm::to_json(*w.report);
  const auto at = json.find("\"quarantined\": [");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_NE(json.find("\"host\": \"h1\"", at), std::string::npos) << json;
}

TEST(LauncherSpares, RankZerosHostLostMovesMasterAddrToTheSpare) {
  world w(spare_job(2, 1, 1));
  w.keep_running_in[0] = {0, 1};
  w.start();
  w.run(1s);
  crash(w, 0);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  const auto spawns = w.received<link::spawn_request>(2);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "RANK"), "0");
  EXPECT_EQ(env_of(spawns[0].ranks[0], "MASTER_ADDR"), "10.0.0.3");
  // The spare's answer to the restart gave the port.
  EXPECT_EQ(env_of(spawns[0].ranks[0], "MASTER_PORT"), "29501");
  const auto other = w.received<link::spawn_request>(1);
  ASSERT_EQ(other.size(), 2u);
  EXPECT_EQ(env_of(other[1].ranks[0], "MASTER_ADDR"), "10.0.0.3");
}

TEST(LauncherSpares, WithoutASpareMinHostsGoesOnWithFewerRanks) {
  auto c = remote_job(3, 2);
  c.request.restarts.max_restarts = 2;
  c.request.restarts.min_hosts = 2;
  world w(std::move(c));
  w.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  w.start();
  w.run(1s);
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(w.said("going on with 2 hosts and 4 ranks (--min-hosts 2)"));
  EXPECT_EQ(spawned_ranks(w, 0, 1), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(spawned_ranks(w, 2, 1), (std::vector<std::uint32_t>{2, 3}));
  const auto spawns = w.received<link::spawn_request>(2);
  EXPECT_EQ(env_of(spawns[1].ranks[0], "WORLD_SIZE"), "4");
  EXPECT_EQ(env_of(spawns[1].ranks[0], "NODE_RANK"), "1");
  ASSERT_EQ(w.report->incarnations.size(), 2u);
  EXPECT_EQ(w.report->incarnations[0].size, 6u);
  EXPECT_EQ(w.report->incarnations[1].size, 4u);
  EXPECT_EQ(w.report->ranks.size(), 4u);

  // Fewer than --min-hosts would be left: the loss ends the launch.
  auto d = remote_job(3, 2);
  d.request.restarts.max_restarts = 2;
  d.request.restarts.min_hosts = 3;
  world few(std::move(d));
  few.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  few.start();
  few.run(1s);
  crash(few, 1);
  few.run();
  ASSERT_TRUE(few.report);
  EXPECT_EQ(few.report->cause, pm::cause_kind::host_lost);
  EXPECT_EQ(few.report->exit_code, pm::exit_codes::host_lost);
  EXPECT_TRUE(few.restarts.empty());
}

TEST(LauncherSpares, AHostLostWhileRestartingIsReplacedAndEveryAgentAskedAgain) {
  auto c = spare_job(2, 1, 1);
  c.request.pmix = true;
  world w(std::move(c));
  w.code_in[{0, 1}] = 7;
  w.silent_restart.insert(1);
  w.start();
  w.settle();
  // Host 1 falls silent after its rank's failure, then is lost while the launch waits for it.
  w.agents[1].gone = true;
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("rank 1 moves from h1 to spare h2"));
  EXPECT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{1}));
  // Asked once for where it ran, again (with the new facts) for where it runs now.
  const auto asked = w.received<link::restart_request>(0);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0].incarnation, asked[1].incarnation);
  const auto spare = w.received<link::restart_request>(2);
  ASSERT_EQ(spare.size(), 2u);
  ASSERT_TRUE(spare[0].pmix && spare[1].pmix);
  EXPECT_EQ(spare[0].pmix->node, link::no_node);
  EXPECT_EQ(spare[1].pmix->node, 1u);  // the lost host's node
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
}

TEST(LauncherSpares, ALostSpareIsQuarantinedAndTheJobGoesOn) {
  world w(spare_job(1, 1, 1));
  w.keep_running_in[0] = {0};
  w.start();
  w.run(1s);
  crash(w, 1);
  w.run(2s);
  EXPECT_TRUE(w.said("spare host h1 was lost (")) << (w.lines.empty() ? "" : w.lines.back());
  EXPECT_FALSE(w.report);
  w.feed([&](auto& a) { w.m.signal(w.t, SIGTERM, a); });
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::signal);
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
}

// How often the one spare of a 1-host job was opened when the job ran with `policy`.
int spare_opens(void (*policy)(pm::restart_policy&)) {
  auto c = spare_job(1, 1, 1);
  policy(c.request.restarts);
  world w(std::move(c));
  w.start();
  w.run();
  EXPECT_TRUE(w.report);
  return w.opens[1];
}

TEST(LauncherSpares, NoSpareStartsWithoutRestartsOrWhenTurnedOff) {
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.max_restarts = 0; }), 0);
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.spares = false; }), 0);
  // --enable-recovery never restarts the whole job: a spare would never be used.
  EXPECT_EQ(spare_opens([](pm::restart_policy& p) { p.per_rank = true; }), 0);
  EXPECT_EQ(spare_opens([](pm::restart_policy&) {}), 1);
}

}  // namespace

// ---- hosts that join at a restart: --host-discovery-script (docs/resilience.md) ----

namespace {

launch::launcher::discovery found(std::vector<std::pair<std::string, std::uint32_t>> hosts) {
  launch::launcher::discovery d;
  for (auto& [name, slots] : hosts) d.hosts.push_back(pm::host{name, slots, 0, true, false});
  return d;
}

// Runs the job until its hosts are up, crashes host `h`, runs it to its end.
void crash_midrun(world& w, std::uint32_t h) {
  w.start();
  w.run(1s);
  crash(w, h);
  w.run();
}

// Every ssh to host `h` fails for good.
void unreachable(world& w, std::uint32_t h) {
  for (int i = 0; i < 20; ++i)  // every try, retries included
    w.ssh_fails[h].push_back(pm::agent_end{"ssh exited with code 255: No route to host", false});
}

launch::launch_config discovering_job(std::uint32_t hosts, std::uint32_t per_host) {
  auto c = remote_job(hosts, per_host);
  c.request.restarts.max_restarts = 2;
  c.request.restarts.host_discovery = "./hosts.sh";
  return c;
}

TEST(LauncherDiscovery, ALostHostsRanksMoveToAHostTheCommandNames) {
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({{"h0", 2}, {"h2", 2}}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  w.start();
  w.run(1s);
  EXPECT_TRUE(w.commands.empty());  // run at a restart only
  crash(w, 1);
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_EQ(w.commands, std::vector<std::string>{"./hosts.sh"});
  EXPECT_EQ(w.bounds, std::vector<std::chrono::milliseconds>{10s});  // restart_policy's default
  EXPECT_TRUE(w.said("host h2 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
  EXPECT_EQ(w.opens[2], 1);
  EXPECT_EQ(spawned_ranks(w, 2, 0), (std::vector<std::uint32_t>{2, 3}));
  const auto spawns = w.received<link::spawn_request>(2);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "NODE_RANK"), "1");
  EXPECT_EQ(env_of(spawns[0].ranks[0], "WORLD_SIZE"), "4");
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);
  EXPECT_EQ(w.report->incarnations.back().hosts, 2u);
}

TEST(LauncherDiscovery, WhenItNamesNoHostTheRestartEndsInOneLine) {
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->cause, pm::cause_kind::host_lost);
  EXPECT_EQ(w.report->exit_code, pm::exit_codes::host_lost);
  EXPECT_TRUE(
      w.said("cannot restart the job: no spare or discovered host takes the ranks of lost host h1"))
      << w.lines.back();
}

TEST(LauncherDiscovery, AFailedCommandIsOneLineAndTheSpareTakesTheRanks) {
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world w(std::move(c));
  w.discoveries.push_back(launch::launcher::discovery{{}, "'./hosts.sh' exited with code 3"});
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0);
  EXPECT_TRUE(
      w.said("host discovery failed: './hosts.sh' exited with code 3; going on with the "
             "hosts there are"));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
}

TEST(LauncherDiscovery, AShrunkJobGrowsBackOntoAHostThatJoins) {
  auto c = discovering_job(3, 2);
  c.request.restarts.max_restarts = 3;
  c.request.restarts.min_hosts = 2;
  world w(std::move(c));
  w.discoveries.push_back(found({}));           // at the first restart: nothing new
  w.discoveries.push_back(found({{"h3", 2}}));  // at the second: h3 is there
  w.keep_running_in[0] = {0, 1, 2, 3, 4, 5};
  w.code_in[{1, 0}] = 7;  // the shrunk job fails once more
  w.keep_running_in[1] = {1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("going on with 2 hosts and 4 ranks (--min-hosts 2)"));
  EXPECT_TRUE(w.said("host h3 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("growing back to 3 hosts and 6 ranks (--min-hosts 2)"));
  ASSERT_EQ(w.report->incarnations.size(), 3u);
  EXPECT_EQ(w.report->incarnations[0].size, 6u);
  EXPECT_EQ(w.report->incarnations[1].size, 4u);
  EXPECT_EQ(w.report->incarnations[2].size, 6u);
  EXPECT_EQ(w.report->incarnations[2].hosts, 3u);
  EXPECT_EQ(w.commands.size(), 2u);
  const auto spawns = w.received<link::spawn_request>(3);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].ranks.size(), 2u);
  EXPECT_EQ(env_of(spawns[0].ranks[0], "WORLD_SIZE"), "6");
}

TEST(LauncherDiscovery, AQuarantinedHostComesBackOnlyWhenNothingElseIsLeft) {
  // Nothing else: the lost host, named again, gets a new agent and its ranks back.
  world w(discovering_job(2, 2));
  w.discoveries.push_back(found({{"h0", 2}, {"h1", 2}}));
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said(
      "nothing else is left: lost host h1 is tried again (--host-discovery-script named it)"));
  EXPECT_EQ(w.opens[1], 2);
  EXPECT_EQ(spawned_ranks(w, 1, 0), (std::vector<std::uint32_t>{2, 3}));  // its new agent's first

  // A spare is there: the lost host stays out.
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world s(std::move(c));
  s.discoveries.push_back(found({{"h1", 2}}));
  s.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(s, 1);
  ASSERT_TRUE(s.report);
  EXPECT_EQ(s.report->exit_code, 0);
  EXPECT_EQ(s.opens[1], 1);
  EXPECT_TRUE(s.said("ranks 2-3 move from h1 to spare h2"));
}

TEST(LauncherDiscovery, AHostThatJoinsButNeverComesUpIsQuarantinedAndTheRestartGoesOn) {
  auto c = spare_job(2, 1, 2);
  c.request.restarts.host_discovery = "./hosts.sh";
  world w(std::move(c));
  w.discoveries.push_back(found({{"h3", 2}}));
  unreachable(w, 3);
  w.keep_running_in[0] = {0, 1, 2, 3};
  crash_midrun(w, 1);
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_TRUE(w.said("host h3 joins (--host-discovery-script)"));
  EXPECT_TRUE(w.said("spare host h3 was lost ("));
  EXPECT_TRUE(w.said("ranks 2-3 move from h1 to spare h2"));
}

}  // namespace

namespace {

// A host whose ssh is retrying when another host's failure comes is not given up when the launch
// may restart: the restart waits for it, then places the ranks with what came up.
TEST(LauncherSpares, AHostStillBeingSetUpWhenTheFailureComesIsAwaitedNotLost) {
  world w(spare_job(2, 1, 1));
  w.ssh_fails[0] = {pm::agent_end{"ssh exited with code 255: Connection refused", true}};
  unreachable(w, 1);
  w.start();
  w.run();
  ASSERT_TRUE(w.report);
  EXPECT_EQ(w.report->exit_code, 0) << w.lines.back();
  EXPECT_EQ(w.opens[0], 2);  // its retry went on
  EXPECT_TRUE(w.said("rank 1 moves from h1 to spare h2")) << w.lines.back();
  EXPECT_EQ(spawned_ranks(w, 0, 0), (std::vector<std::uint32_t>{0}));
  ASSERT_EQ(w.report->quarantined.size(), 1u);
  EXPECT_EQ(w.report->quarantined[0].host, 1u);

  // Without restarts the set-up is given up at once, as before.
  auto c = spare_job(2, 1, 1);
  c.request.restarts.max_restarts = 0;
  world once(std::move(c));
  once.ssh_fails[0] = {pm::agent_end{"ssh exited with code 255: Connection refused", true}};
  unreachable(once, 1);
  once.start();
  once.run();
  ASSERT_TRUE(once.report);
  EXPECT_NE(once.report->exit_code, 0);
  EXPECT_EQ(once.opens[0], 1);
}

}  // namespace
