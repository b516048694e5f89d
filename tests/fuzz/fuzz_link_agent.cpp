// The agent's end of an agent link fed what a launcher (or anything pretending to be one) sends,
// and the agent's logic (pm::agent::agent, what pmd runs) fed every message that passes the link:
// the job's setup, spawns, signals, stdin, shutdown. The agent's actions are answered in memory
// as pmd would answer them (a spawn succeeds with a made-up pid, or fails when its rank is odd and
// flag 16 is set), never carried out. Input layout: link_drive.hpp.
#include <csignal>
#include <map>
#include <set>
#include <string>

#include "agent/agent.hpp"
#include "link_drive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  namespace link = pm::link;
  namespace agent = pm::agent;
  const auto script = link_script::read(data, size);
  const bool fail_odd_spawns = size >= link_header_bytes && (data[2] & 16) != 0;

  link::endpoint ep(link_options(link::role::agent));
  link::hello mine;
  mine.pid = 4242;
  mine.hostname = "node1";
  mine.addrs = {"10.0.0.1"};
  mine.port = 29500;
  ep.start(link::link_time{0}, mine);

  agent::options opts;
  opts.environment = {"PATH=/usr/bin:/bin", "HOME=/home/u", "OMPI_COMM_WORLD_RANK=9"};
  agent::agent machine(opts);
  std::vector<agent::action> actions;
  // Variables the launcher itself sent (its setup, spawned jobs' apps, ranks' profiles): a rank
  // gets whatever the launcher asks for, even a variable that looks like an outer job's identity
  // (found by this target: a job_add app's env of "OMPI_COMM_WORLD_RANK=9" tripped the check
  // below, which is about the agent's own environment only).
  std::set<std::string> launcher_sent;
  const auto remember = [&](const link::message& m) {
    const auto add = [&](const std::vector<std::string>& v) {
      launcher_sent.insert(v.begin(), v.end());
    };
    if (const auto* j = std::get_if<link::job_setup>(&m)) {
      add(j->base);
      add(j->overrides);
      for (const auto& a : j->apps) add(a.env);
    } else if (const auto* ja = std::get_if<link::job_add>(&m)) {
      for (const auto& a : ja->apps) add(a.env);
    } else if (const auto* sp = std::get_if<link::spawn_request>(&m)) {
      for (const auto& r : sp->ranks) add(r.env);
    }
  };
  std::map<std::uint32_t, std::int64_t> running;  // rank -> pid
  std::uint64_t latest_timer = 0;
  std::int64_t next_pid = 1000;
  const std::vector<std::uint8_t> output_bytes(700, 'o');

  // Carries out the machine's actions in memory; the events they cause go back in at once.
  std::function<void(link::link_time, agent::event)> feed = [&](link::link_time now,
                                                                agent::event ev) {
    if (machine.done()) return;
    machine.handle(now, std::move(ev), actions);
    auto todo = std::move(actions);
    actions.clear();
    for (auto& a : todo) {
      if (auto* s = std::get_if<agent::spawn_rank>(&a)) {
        const auto rank = s->spec.rank;
        check(!s->spec.argv.empty() && !s->spec.argv.front().empty(),
              "the agent asked to spawn a rank without a program");
        for (const auto& entry : s->spec.environment()) {
          check(entry.find('=') != std::string::npos, "a rank's environment entry has no '='");
          check(entry.rfind("OMPI_COMM_WORLD_RANK=9", 0) != 0 || launcher_sent.contains(entry),
                "an outer job's identity reached a rank");
        }
        if (fail_odd_spawns && rank % 2 == 1) {
          feed(now, agent::rank_spawn_failed{rank, 127, "not found"});
        } else {
          running[rank] = next_pid;
          feed(now, agent::rank_spawned{rank, next_pid++});
        }
      } else if (auto* send = std::get_if<agent::send>(&a)) {
        check(link::sent_by(send->msg) != link::sender::launcher,
              "the agent sent a message only a launcher sends");
        ep.send(send->msg);
      } else if (auto* t = std::get_if<agent::start_timer>(&a)) {
        latest_timer = t->timer;
      } else if (std::holds_alternative<agent::sweep>(a)) {
        feed(now, agent::swept{0});
      } else if (std::holds_alternative<agent::sweep_ranks>(a)) {
        feed(now, agent::ranks_swept{0, 1});  // a restart: nothing left, a port
      } else if (auto* sig = std::get_if<agent::signal_group>(&a)) {
        check(sig->pgid > 0, "the agent signals a process group it never started");
        if (sig->signo == SIGKILL || sig->signo == SIGTERM) {
          for (auto it = running.begin(); it != running.end(); ++it) {
            if (it->second != sig->pgid) continue;
            const auto rank = it->first;
            running.erase(it);
            feed(now, agent::rank_exited{rank, pm::exit_status::signaled(sig->signo)});
            break;
          }
        }
      }
      // reap_orphans: nothing to reap; exit_agent: done() says so.
    }
  };

  const auto on_event = [&](link::link_time now, link::link_event& e) {
    if (auto* m = std::get_if<link::message_in>(&e)) {
      // Messages either side sends (modex, modex_reply, ...) may come in too.
      check(link::sent_by(m->msg) != link::sender::agent,
            "the agent's end passed on a message only an agent sends");
      remember(m->msg);
      feed(now, agent::received{std::move(m->msg)});
    } else if (auto* in = std::get_if<link::input_in>(&e)) {
      check(!in->bytes.empty(), "an empty stdin event");
      if (script.ack) ep.acknowledge(in->bytes.size());
    } else if (std::holds_alternative<link::output_in>(e)) {
      broken("output data reached the agent's end");
    } else if (auto* d = std::get_if<link::link_down>(&e)) {
      feed(now, agent::channel_lost{d->reason});
    }
  };
  const auto between = [&](link::link_time now) {
    if (latest_timer != 0) feed(now, agent::timer_fired{latest_timer});
    if (!script.send_data || ep.down() || running.empty()) return;
    // The first running rank writes a little and, every other time, ends.
    const auto [rank, pid] = *running.begin();
    const auto n = std::min<std::uint64_t>(ep.credit(), output_bytes.size());
    if (n > 0) ep.send_output(rank, pm::output_stream::out, std::span(output_bytes).first(n));
    if (pid % 2 == 0) {
      running.erase(rank);
      feed(now, agent::output_ended{rank, pm::output_stream::out, n});
      feed(now, agent::rank_exited{rank, pm::exit_status::exited(0)});
    }
  };
  drive_link(ep, script, on_event, between);
  return 0;
}
