// PMIx on the launcher's side (docs/pmix.md): the job's facts every agent's server registers,
// fences that span hosts (gathered here), direct modex requests routed to the rank's host, the
// jobs the ranks spawn (placed on free slots, offered to the controller, announced to every
// agent), the data store (publish/lookup), the process table for tools, and what a lost host
// means for each of them.
#include <map>

#include "agent/pmix/pmix_host.hpp"
#include "launch/launcher_impl.hpp"
#include "pm/error.hpp"

namespace pm::launch {

void launcher::impl::start_pmix() {
  pmix_facts =
      agent::pmix::pmix_job_of(agent::pmix::make_job_info(req.map, namespace_of(inc.number), 0));
  fences.emplace(req.map, [this](std::uint32_t process) -> std::optional<std::uint32_t> {
    if (process < ctl.size()) return ctl.host_of(process);
    return std::nullopt;
  });
}

void launcher::impl::on_pmix_abort(std::uint32_t h, const link::pmix_abort& a) {
  if (!on_host(a.rank, h)) return;  // not its rank
  std::string text = "PMIx_Abort (MPI_Abort)";
  if (!a.message.empty() && a.message != "N/A") text += ": " + a.message;  // Open MPI's "none"
  queue.push_back(abort_requested{a.rank, a.status, text});
}

// A rank left MPI without MPI_Finalize (an exit or a signal): its peers would wait for it in
// their next fence, so the job ends, as mpirun ends it ("exited without calling finalize"),
// also where the abort policy is off: those peers have no other way out.
void launcher::impl::on_unfinalized(std::uint32_t h, const link::pmix_unfinalized& u) {
  if (!on_host(u.rank, h)) return;
  queue.push_back(rank_unfinalized{u.rank, u.status});
}

void launcher::impl::on_fence(std::uint32_t h, const link::fence_contribution& c) {
  if (!fences) return;
  try {
    if (auto complete = fences->contribute(h, c)) answer_fence(*complete);
  } catch (const error& e) {
    queue.push_back(abort_requested{std::nullopt, 1, e.what()});
  }
}

void launcher::impl::answer_fence(const control::fence_table::outcome& o) {
  for (const auto h : o.hosts) send_to(h, o.result);
}

// A host asks for the data of a rank elsewhere: ask the rank's host under an id of ours.
void launcher::impl::on_modex_request(std::uint32_t h, const link::modex_request& q) {
  if (!pmix_facts || q.rank >= ctl.size()) {
    send_to(h, link::modex_reply{q.id, false, {}});
    return;
  }
  const std::uint32_t owner = ctl.host_of(q.rank);
  if (!link_usable(owner) || hosts[owner].lost_told) {
    send_to(h, link::modex_reply{q.id, false, {}});
    return;
  }
  const std::uint64_t id = next_modex++;
  modex_routes[id] = modex_route{h, q.id, owner};
  send_to(owner, link::modex_request{id, q.rank});
}

void launcher::impl::on_modex_reply(std::uint32_t h, link::modex_reply& a) {
  auto it = modex_routes.find(a.id);
  if (it == modex_routes.end() || it->second.owner != h) return;
  const modex_route route = it->second;
  modex_routes.erase(it);
  a.id = route.asker_id;
  send_to(route.asker, a);
}

// A PMIx tool asked that host's server for the job's process table: every rank as the
// controller knows it (pids are those of the ranks' hosts).
void launcher::impl::on_proc_table_request(std::uint32_t h, const link::proc_table_request& q) {
  const job_report now_report = ctl.report();
  link::proc_table_reply reply{q.id, {}};
  reply.ranks.reserve(now_report.ranks.size());
  for (const auto& r : now_report.ranks) {
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

const spawned_job* launcher::impl::spawned_of(std::uint32_t process) const {
  if (process < req.map.size()) return nullptr;
  for (const auto& j : spawned) {
    if (j.holds(process)) return &j;
  }
  return nullptr;
}

// A rank (or a PMIx tool attached to host h's agent) asked for a new job: place it on the free
// slots and offer it to the controller; once taken (spawn_taken) every agent learns it and its
// ranks start. The caller is answered once every new rank runs, or as soon as the job cannot be.
void launcher::impl::on_pmix_spawn(std::uint32_t h, const link::pmix_spawn& q) {
  // A rank's spawn comes from its own host's agent (else it is ignored, like its other
  // messages); a tool is no process of the launch: it is wherever the agent is.
  if (q.tool.empty() && !on_host(q.rank, h)) return;
  spawned_job job;
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
    // Not a host that was lost, quarantined, or given up in an earlier incarnation's end.
    const auto& hs = hosts[host];
    usable[host] = !hs.lost_told && !hs.quarantined && !hs.abandoned;
  }
  // Jobs offered to the controller but not taken yet, or waiting for their slots, hold their
  // slots too.
  for (const auto& p : offered) {
    for (std::uint32_t r = 0; r < p.size(); ++r) ++live[p.host_of(r)];
  }
  for (const auto& [id, p] : claiming) {
    for (std::uint32_t r = 0; r < p.size(); ++r) ++live[p.host_of(r)];
  }
  try {
    auto placed = map_spawn(q, alloc, live, usable, req.mapping);
    placed.asker_host = job.asker_host;
    placed.asker_id = job.asker_id;
    placed.tool = std::move(job.tool);
    // Its PMIx facts too: a map PMIx cannot describe (over 65,536 ranks on one node) is a
    // refusal of this spawn, not the end of the launch.
    placed.facts = agent::pmix::pmix_job_of(agent::pmix::make_job_info(placed.map, "", 0));
    job = std::move(placed);
  } catch (const std::exception& e) {  // a mapping error, or no memory for a huge request
    refuse_spawn(job, e.what());
    return;
  }
  job.facts->universe = pmix_facts->universe;  // MPI_UNIVERSE_SIZE: the allocation's slots
  // PMIX_PARENT_ID: the rank, or the tool, that asked.
  const auto caller = job.tool.empty() ? pmix_name_of(q.rank) : std::pair{job.tool, q.rank};
  job.facts->parent_nspace = caller.first;
  job.facts->parent_rank = caller.second;
  if (!cfg.claims_spawn_slots) {
    offer_spawn(std::move(job));
    return;
  }
  // The hosts are shared with other jobs: the places are this job's once claimed.
  std::map<std::string, std::uint32_t> counts;
  for (std::uint32_t r = 0; r < job.size(); ++r) ++counts[host_info(job.host_of(r)).name];
  const auto id = next_claim++;
  out->push_back(
      claim_slots{id, {counts.begin(), counts.end()}, req.mapping.oversubscribe.value_or(false)});
  claiming.emplace(id, std::move(job));
}

void launcher::impl::offer_spawn(spawned_job job) {
  std::vector<std::uint32_t> places;
  places.reserve(job.size());
  for (std::uint32_t r = 0; r < job.size(); ++r) places.push_back(job.host_of(r));
  offered.push_back(std::move(job));
  queue.push_back(job_spawned{std::move(places)});
}

// A spawned job's slots were claimed (or not): it is offered to the controller, or refused.
// Claimed slots stay the job's until the launch ends, also when the job is refused after all.
void launcher::impl::on_slots_claimed(std::uint64_t id, const std::string& refusal) {
  auto it = claiming.find(id);
  if (it == claiming.end()) return;
  auto job = std::move(it->second);
  claiming.erase(it);
  if (!refusal.empty()) {
    refuse_spawn(job, "its slots could not be claimed: " + refusal);
  } else if (!pmix_facts || finishing || ctl.finished() || ctl.ending()) {
    refuse_spawn(job, "the job is ending");
  } else {
    offer_spawn(std::move(job));
  }
}

void launcher::impl::refuse_spawn(spawned_job& job, const std::string& why) {
  job.answered = true;
  send_to(job.asker_host, link::pmix_spawn_reply{job.asker_id, false, {}, why});
  out->push_back(say{job.tool.empty() ? "MPI_Comm_spawn (PMIx_Spawn) refused: " + why
                                      : "PMIx_Spawn of tool " + job.tool + " on " +
                                            host_info(job.asker_host).name + " refused: " + why});
}

// The controller took (or, while the job ends, refused) the oldest job offered: a taken job
// gets its numbers now, every agent its job_add (before any spawn of its ranks, which the
// controller's actions for it send right after), the output layer its labels.
void launcher::impl::spawn_taken(std::uint32_t before) {
  if (offered.empty()) return;
  spawned_job job = std::move(offered.front());
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
  out->push_back(output_add_job{job.first, job.size()});
  spawned.push_back(std::move(job));
  const auto& added = spawned.back();
  // Agents linked now get it; a link opened from here on (a host new to the launch, or one
  // retried) gets every taken job right after its setup (open_link).
  for (std::uint32_t host = 0; host < hosts.size(); ++host) {
    if (hosts[host].ep && !hosts[host].closed && !hosts[host].lost_told) {
      send_to(host, added.add_for(host));
    }
  }
}

// A spawned rank's start (or failure to start) was reported by its host's agent: the caller
// hears once all started, or at the first that could not (the failure policy ends the rest).
void launcher::impl::spawned_rank_reported(std::uint32_t h, std::uint32_t process,
                                           const std::string* failure) {
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

void launcher::impl::answer_spawn_failed(spawned_job& j, const std::string& why) {
  j.answered = true;
  send_to(j.asker_host, link::pmix_spawn_reply{j.asker_id, false, {}, why});
}

// The namespace and rank of a process, as PMIx names it.
std::pair<std::string, std::uint32_t> launcher::impl::pmix_name_of(std::uint32_t process) const {
  if (const auto* j = spawned_of(process)) return {j->nspace, process - j->first};
  return {pmix_facts ? pmix_facts->nspace : std::string(), process};
}

// ---- the data store ----

void launcher::impl::answer_data(const std::vector<control::data_store::answer>& answers) {
  for (const auto& a : answers) {
    if (auto it = lookup_timers.find({a.host, a.reply.id}); it != lookup_timers.end()) {
      auto id = it->second;
      lookup_timers.erase(it);
      cancel_own_timer(id);
    }
    send_to(a.host, a.reply);
  }
}

void launcher::impl::on_lookup(std::uint32_t h, const link::pmix_lookup& q) {
  if (!on_host(q.rank, h)) return;
  if (auto a = store.lookup(h, q)) {
    answer_data({*a});
    return;
  }
  if (q.timeout_s == 0) return;  // held until published (or the job ends)
  lookup_timers[{h, q.id}] =
      start_own_timer(std::chrono::seconds(q.timeout_s), own_timer{timer_kind::lookup, h, q.id});
}

// ---- a lost host ----

void launcher::impl::pmix_host_lost(std::uint32_t h) {
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
  for (auto it = lookup_timers.begin(); it != lookup_timers.end();) {
    if (it->first.first != h) {
      ++it;
      continue;
    }
    auto id = it->second;
    it = lookup_timers.erase(it);
    cancel_own_timer(id);
  }
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
      queue.push_back(abort_requested{
          std::nullopt, 1, "a PMIx fence cannot complete without host " + host_info(h).name});
    }
  }
}

}  // namespace pm::launch
