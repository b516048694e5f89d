#pragma once
// The launcher machine (launch/launcher.hpp) in a world of no process, no descriptor and no
// clock, for the launcher's unit tests: each host's agent is a real agent-side link endpoint in
// memory that answers as pmd would (hello, started, exited, stream ends, shutdown,
// child_open/child_data for the tree), time is virtual, and every input the machine's actions ask
// for is fed after the batch, never nested.
#include <signal.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include "launch/launcher.hpp"
#include "pm/env.hpp"
#include "pm/job.hpp"
#include "pm/job_map.hpp"

namespace pm::test::launcher_world {

using namespace std::chrono_literals;
using pm::launch::link_time;
namespace launch = pm::launch;
namespace link = pm::link;

constexpr std::uint64_t nonce = 0x5eed;
constexpr std::uint32_t direct = UINT32_MAX;

// A job of `per_host` ranks on each of `hosts` remote hosts h0, h1, ...
inline launch::launch_config remote_job(std::uint32_t hosts, std::uint32_t per_host) {
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
  std::vector<std::uint32_t> pumped;    // pump_stdin, by rank
  std::vector<std::uint32_t> released;  // release_stdin, by rank
  std::vector<rank_report> changes;     // rank_changed, in order

  // What the test says about hosts and ranks.
  std::map<std::uint32_t, int> exit_code;                        // by rank (default: 0 at once)
  std::set<std::uint32_t> keep_running;                          // ranks that run until signalled
  std::set<std::uint32_t> deaf;                                  // agents that answer no signal
  std::map<std::uint32_t, std::deque<pm::agent_end>> ssh_fails;  // per open, before the hello
  // Per host: what its ssh prints instead of the link (a login banner past what is skipped);
  // stopped, it ends "killed by SIGTERM" (retryable, as ssh's 255).
  std::map<std::uint32_t, std::string> noise_instead;
  std::set<std::uint32_t> mute;  // hosts whose agent never says hello (after their ssh_fails)
  bool fence = false;            // agents contribute to one fence across hosts
  std::map<std::uint32_t, std::string> shapes;               // per host: its topology's text
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
    if (const auto noise = noise_instead.find(h); noise != noise_instead.end()) {
      const std::vector<std::uint8_t> bytes(noise->second.begin(), noise->second.end());
      answers.push_back([this, h, bytes] {
        feed([&](auto& a) { m.stream_opened(t, h, 0, a); });
        feed([&](auto& a) { m.received(t, h, bytes, a); });
      });
      pending_end[h] = pm::agent_end{"ssh was killed by SIGTERM", true};
      return;
    }
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
    if (mute.contains(h)) {
      answers.push_back([this, h] { feed([&](auto& a) { m.stream_opened(t, h, 0, a); }); });
      pending_end[h] = pm::agent_end{"ssh was killed by SIGTERM", true};
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
  void carry_out(launch::rank_changed& x) { changes.push_back(std::move(x.rank)); }
  void carry_out(launch::take_pipes&) { ADD_FAILURE() << "no local host here"; }
  void carry_out(launch::end_orphaned_rank&) { ADD_FAILURE() << "no local host here"; }
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
  void carry_out(launch::output_give_up&) {}  // its output is never congested
  void carry_out(launch::output_drain&) {
    answers.push_back([this] { feed([&](auto& a) { m.output_drained(t, a); }); });
  }
  void carry_out(launch::pump_stdin& x) {
    EXPECT_EQ(std::count(released.begin(), released.end(), x.rank), 0)
        << "stdin of rank " << x.rank << " pumped after its release";
    pumped.push_back(x.rank);
  }
  void carry_out(launch::release_stdin& x) {
    // A remote rank's stdin is pumped from the launcher until the rank ended (this world has
    // remote hosts only; a local rank's goes once it started).
    for (const auto& [h, ag] : agents) {
      if (ag.gone) continue;  // a lost host's ranks count as ended
      EXPECT_FALSE(ag.running.contains(x.rank))
          << "stdin of running rank " << x.rank << " released";
    }
    released.push_back(x.rank);
  }
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

}  // namespace pm::test::launcher_world
