// The simulated ranks' PMIx: the smallest model of a PMIx client (the rank's calls, from its
// script) and of pmd's embedded server (libpmix, as pmd's pmix_gateway reports its upcalls) that
// makes the production decisions run. What crosses hosts is the host machine's PMIx relay
// (libpm/src/agent/pmix_relay) and the launcher machine's routing (libpm/src/launch/
// pmix_routing.cpp), run as they are; the world only
//   - answers start_pmix with pmix_ready and simulated facts (a place named after the agent),
//     and starts the server (pmix_server_up) when the host's first client connects;
//   - connects a client at its start (PMIx_Init in MPI_Init) and finalizes it before an `exit`
//     ending (MPI_Finalize), never before a signal: an unfinalized rank is the relay's to report;
//   - gathers a fence of every rank of the first job on a host, as libpmix does, into one
//     pmix_fence_called (none when the job has one host: the server completes it itself);
//   - turns PMIx_Abort and PMIx_Spawn into pmix_abort_called and pmix_spawn_called;
//   - carries out pmix_complete: the ranks blocked in the request return (a fence's every local
//     caller; a spawn's caller; an abort's caller keeps waiting to be killed), answers a local
//     modex (pmix_serve_modex) with a rank's data, and takes the rest (a spawned namespace
//     registered, a notice) as the server would, without a word.
// A rank blocked in a call does nothing else: its next call, its abort or its end wait until the
// call returns (a signal still ends it).
#include <algorithm>

#include "world_impl.hpp"

namespace pm::sim {

namespace {

constexpr std::uint64_t in_local_fence = ~std::uint64_t{0};  // waits for its host's other ranks

}  // namespace

// pmd's gateway names the server's place (its private directory, a port) before it starts.
void world::start_pmix(std::uint32_t host) {
  agent::pmix_host_facts f;
  const auto pid = agent_pid_base + host;
  f.place.dir = "/tmp/pmd." + std::to_string(pid);
  f.place.port = 40000;
  f.place.server_pid = pid;
  // After this batch, as pmd's pending_.
  feed_agent(host, agent::host_event{agent::pmix_ready{std::move(f)}});
}

void world::client_started(std::uint32_t rank, std::int64_t begin) {
  const auto host = procs_[rank].host;
  auto& h = hosts_[host];
  const auto* relay = h.agent ? h.agent->pmix() : nullptr;
  if (relay == nullptr) return;  // no server here: its calls are not made
  const auto me = relay->proc_of(rank);
  if (!me) return;
  clients_[rank] = pmix_client{begin, 0, 0, 0, 0};
  auto& server = servers_[host];
  if (!server.up) {
    server.up = true;
    feed_agent(host, agent::host_event{agent::pmix_event{agent::pmix_server_up{}}});
  }
  feed_agent(host, agent::host_event{agent::pmix_event{agent::pmix_client_connected{*me}}});
  next_call(rank);
}

void world::next_call(std::uint32_t rank) {
  const auto it = clients_.find(rank);
  if (it == clients_.end()) return;
  const auto& calls = script(rank).calls;
  if (it->second.next >= calls.size()) return;
  at(std::max(now_, it->second.begin + calls[it->second.next].at.count()), ek::script_step, rank,
     tag(rank, 2));
}

// The rank's script wants to take `step` (1 abort, 2 a call, 3 its natural end with `value`):
// true when it is blocked in a call, and the step waits for its return.
bool world::client_blocked(std::uint32_t rank, std::uint32_t step, std::uint32_t value) {
  if (clients_.empty()) return false;
  const auto it = clients_.find(rank);
  if (it == clients_.end() || it->second.waits_for == 0) return false;
  it->second.deferred = step + 1;
  it->second.deferred_value = value;
  return true;
}

// The rank ends (`finalize`: PMIx_Finalize first); it is no client any more.
void world::client_ends(std::uint32_t rank, bool finalize) {
  const auto it = clients_.find(rank);
  if (it == clients_.end()) return;
  clients_.erase(it);
  const auto host = procs_[rank].host;
  auto& h = hosts_[host];
  const auto* relay = h.agent ? h.agent->pmix() : nullptr;
  if (!finalize || relay == nullptr || h.agent_done || h.crashed) return;
  if (const auto me = relay->proc_of(rank)) {
    feed_agent(host, agent::host_event{agent::pmix_event{agent::pmix_client_finalized{*me}}});
  }
}

void world::make_call(std::uint32_t rank) {
  const auto it = clients_.find(rank);
  if (it == clients_.end()) return;
  auto& c = it->second;
  const auto& calls = script(rank).calls;
  if (c.next >= calls.size()) return;
  const auto call = calls[c.next++];
  const auto host = procs_[rank].host;
  auto& h = hosts_[host];
  const auto* relay = h.agent ? h.agent->pmix() : nullptr;
  if (relay == nullptr || h.agent_done) return;
  if (call.what == pmix_call::kind::fence) {
    c.waits_for = in_local_fence;
    fence_called(host, rank);
    return;
  }
  ++result_.stats.pmix_spawns;
  const auto id = next_request_++;
  requests_[id] = pmix_request{pmix_request::kind::spawn, rank};
  c.waits_for = id;
  agent::pmix_spawn_called x;
  x.id = id;
  x.requester = *relay->proc_of(rank);
  x.apps.push_back(agent::pmix::spawn_app{{"app"}, {}, {}, call.count, {}});
  feed_agent(host, agent::host_event{agent::pmix_event{std::move(x)}});
}

// libpmix completes a fence locally once every local participant called it, and asks its host
// (pmd) once for the host's part when there are participants elsewhere.
void world::fence_called(std::uint32_t host, std::uint32_t rank) {
  ++result_.stats.pmix_fences;
  auto& server = servers_[host];
  server.fencing.push_back(rank);
  if (server.fencing.size() < map_->ranks_on_host(host).size()) return;
  if (map_->num_nodes() == 1) {
    auto done = std::move(server.fencing);
    server.fencing.clear();
    for (const auto r : done) release(r);
    return;
  }
  const auto id = next_request_++;
  requests_[id] = pmix_request{pmix_request::kind::fence, host};
  const auto* relay = hosts_[host].agent->pmix();
  agent::pmix_fence_called x;
  x.id = id;
  x.participants.push_back(agent::pmix::proc{relay->job().nspace, agent::pmix::wildcard_rank});
  x.collect = true;
  const auto& name = host_name(host);  // the host's part of the collected data
  x.data.assign(name.begin(), name.end());
  feed_agent(host, agent::host_event{agent::pmix_event{std::move(x)}});
}

// PMIx_Abort (MPI_Abort): the caller waits in it until the launcher acts (it is killed then). A
// job without PMIx facts on its hosts (no rank calls a fence or a spawn, no notices: at 100,000
// hosts every host would hold every rank's place) has no relay: the modelled client's request
// is the message the relay would send.
void world::call_abort(std::uint32_t rank) {
  const auto host = procs_[rank].host;
  auto& h = hosts_[host];
  if (h.crashed || h.agent_done) return;
  ++result_.stats.pmix_aborts;
  const auto* relay = h.agent ? h.agent->pmix() : nullptr;
  const auto it = clients_.find(rank);
  if (relay == nullptr || it == clients_.end()) {
    agent_send(host, link::pmix_abort{rank, script(rank).value, "simulated MPI_Abort"});
    return;
  }
  const auto id = next_request_++;
  requests_[id] = pmix_request{pmix_request::kind::abort, rank};
  it->second.waits_for = id;
  feed_agent(host, agent::host_event{agent::pmix_event{agent::pmix_abort_called{
                       id, *relay->proc_of(rank), script(rank).value, "simulated MPI_Abort"}}});
}

// A call returned: what the rank's script wanted meanwhile happens now (as an event, never
// nested), else its next call when it is due.
void world::release(std::uint32_t rank) {
  const auto it = clients_.find(rank);
  if (it == clients_.end()) return;
  auto& c = it->second;
  c.waits_for = 0;
  if (c.deferred != 0) {
    const auto step = c.deferred - 1;
    c.deferred = 0;
    if (step == 3) {
      at(now_, ek::proc_end, rank, tag(rank, c.deferred_value));
    } else {
      at(now_, ek::script_step, rank, tag(rank, step));
    }
    return;
  }
  next_call(rank);
}

void world::carry_out_pmix(std::uint32_t host, agent::pmix_action& a) {
  std::visit(
      overloaded{
          [&](agent::send& x) { agent_send(host, x.msg); },
          [&](agent::pmix_complete& x) {
            const auto it = requests_.find(x.id);
            if (it == requests_.end()) {
              correctness("the agent on " + host_name(host) + " completed PMIx request " +
                          std::to_string(x.id) + ", which its server never made");
              return;
            }
            const auto req = it->second;
            requests_.erase(it);
            switch (req.what) {
              case pmix_request::kind::fence: {
                auto& server = servers_[host];
                auto done = std::move(server.fencing);
                server.fencing.clear();
                for (const auto r : done) release(r);
                break;
              }
              case pmix_request::kind::spawn:
                if (x.status == agent::pmix::status::success) ++result_.stats.pmix_spawned_jobs;
                release(req.who);
                break;
              case pmix_request::kind::abort:
                break;  // PMIx_Abort returns once the rank is signalled: it waits to be killed
            }
          },
          [&](agent::pmix_serve_modex& x) {
            feed_agent(host, agent::host_event{agent::pmix_event{agent::pmix_local_modex_answered{
                                 x.link_id, true, "modex of " + std::to_string(x.target.rank)}}});
          },
          [&](agent::pmix_register_job&) {},
          [&](agent::pmix_host_named&) {},
          [&](agent::pmix_notify_ranks&) {},
          // A restart: the server's namespaces change (its ranks are gone, their requests failed
          // just before); it keeps running.
          [&](agent::pmix_restart&) { servers_[host].fencing.clear(); },
          [&](agent::pmix_reregister&) {},
      },
      a);
}

// A job a rank spawned, taken by the controller: its ranks are processes of the world from now
// on, on the hosts the launcher placed them, running the default script without its calls.
void world::add_spawned(const job_spawned& x) {
  const auto size = ctl().size();
  if (size <= procs_.size()) return;  // not taken (the job is ending)
  if (size - procs_.size() != x.hosts.size()) {
    correctness("the controller took a spawned job of " + std::to_string(x.hosts.size()) +
                " ranks as " + std::to_string(size - procs_.size()));
  }
  for (std::size_t i = 0; procs_.size() < size; ++i) {
    const auto rank = static_cast<std::uint32_t>(procs_.size());
    proc_rec p;
    p.host = i < x.hosts.size() ? x.hosts[i] : 0;
    p.script = spawned_script_;
    if (const auto g = rank - map_->size(); g < spawned_gens_.size()) p.gen = spawned_gens_[g];
    procs_.push_back(p);
    spawned_on_[p.host].push_back(rank);
  }
}

}  // namespace pm::sim
