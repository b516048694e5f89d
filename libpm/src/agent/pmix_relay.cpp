#include "agent/pmix_relay.hpp"
#include "model/overloaded.hpp"

#include <set>

namespace pm::agent {

namespace {

pmix::status status_of(link::data_status s) {
  switch (s) {
    case link::data_status::ok:
      return pmix::status::success;
    case link::data_status::not_found:
      return pmix::status::not_found;
    case link::data_status::timeout:
      return pmix::status::timeout;
    case link::data_status::error:
      break;
  }
  return pmix::status::error;
}

std::vector<std::uint32_t> ranks_on_node(const link::pmix_job& facts) {
  std::vector<std::uint32_t> local;
  for (std::uint32_t r = 0; r < facts.rank_node.size(); ++r) {
    if (facts.rank_node[r] == facts.node) local.push_back(r);
  }
  return local;
}

}  // namespace

pmix_relay::pmix_relay(link::pmix_job job, std::vector<std::string> executables,
                       pmix_host_facts facts)
    : job_(std::move(job)), executables_(std::move(executables)), facts_(std::move(facts)) {
  local_ranks_ = ranks_on_node(job_);
  oversubscribed_ = facts_.cores > 0 && local_ranks_.size() > facts_.cores;
  client_state_.assign(job_.rank_node.size(), 0);
  // A host that runs none of the first job's ranks (one a spawned job brought in) learns its
  // name for PMIx from that job (add_job).
  if (facts_.place.hostname.empty() && job_.node < job_.nodes.size()) {
    facts_.place.hostname = job_.nodes[job_.node];
  }
}

void pmix_relay::say(std::string line, std::vector<pmix_action>& out) {
  out.push_back(send{link::agent_notice{std::move(line)}});
}

link::pmix_server pmix_relay::server_info() const {
  return {"pmix-server." + std::to_string(facts_.place.server_pid) +
              ";tcp4://127.0.0.1:" + std::to_string(facts_.place.port),
          facts_.place.dir + "/pmix"};
}

std::vector<std::string> pmix_relay::predicted_variables(std::uint32_t rank) const {
  const auto p = proc_of(rank);
  if (!p) return {};
  return pmix::predicted_rank_env(facts_.place, p->nspace, p->rank);
}

const link::pmix_job* pmix_relay::facts_of(const std::string& nspace, std::uint32_t& first) const {
  first = 0;
  if (nspace == job_.nspace) return &job_;
  for (const auto& j : spawned_) {
    if (j.add.pmix && j.add.pmix->nspace == nspace) {
      first = j.add.first;
      return &*j.add.pmix;
    }
  }
  return nullptr;
}

std::optional<std::uint32_t> pmix_relay::process_of(const pmix::proc& p) const {
  std::uint32_t first = 0;
  const auto* facts = facts_of(p.nspace, first);
  if (facts == nullptr || p.rank == pmix::wildcard_rank || p.rank >= facts->rank_node.size()) {
    return std::nullopt;
  }
  return first + p.rank;
}

bool pmix_relay::launch_nspace(const std::string& nspace) const {
  std::uint32_t first = 0;
  return facts_of(nspace, first) != nullptr;
}

std::optional<pmix::proc> pmix_relay::proc_of(std::uint32_t process) const {
  if (process < job_.rank_node.size()) return pmix::proc{job_.nspace, process};
  for (const auto& j : spawned_) {
    if (j.add.pmix && process >= j.add.first &&
        process - j.add.first < j.add.pmix->rank_node.size()) {
      return pmix::proc{j.add.pmix->nspace, process - j.add.first};
    }
  }
  return std::nullopt;
}

void pmix_relay::add_job(const link::job_add& job, std::vector<pmix_action>& out) {
  if (!job.pmix) return;
  spawned_job j;
  j.add = job;
  j.local = ranks_on_node(*job.pmix);
  if (facts_.place.hostname.empty() && job.pmix->node < job.pmix->nodes.size()) {
    facts_.place.hostname = job.pmix->nodes[job.pmix->node];
    out.push_back(pmix_host_named{facts_.place.hostname});
  }
  const std::size_t processes = job.first + job.pmix->rank_node.size();
  if (client_state_.size() < processes) client_state_.resize(processes, 0);
  spawned_.push_back(std::move(j));
  if (server_ == server_state::running) register_spawned(spawned_.size() - 1, out);
}

// The ranks were told their job's directories at exec, as the first job's: the driver makes
// them and registers the namespace and its ranks here.
void pmix_relay::register_spawned(std::size_t index, std::vector<pmix_action>& out) {
  auto& j = spawned_[index];
  if (j.registered) return;
  j.registered = true;
  auto info = pmix::job_info_of(*j.add.pmix);
  info.spawned = true;
  info.parent = pmix::proc{j.add.pmix->parent_nspace, j.add.pmix->parent_rank};
  out.push_back(pmix_register_job{std::move(info), j.local});
}

void pmix_relay::restart(link::pmix_job job, std::vector<pmix_action>& out) {
  const auto fail = [&](pmix_request_id id) {
    out.push_back(pmix_complete{id, pmix::status::error, {}});
  };
  for (const auto& [rank, id] : aborts_) fail(id);
  for (const auto& [key, id] : fences_) fail(id);
  for (const auto& [link_id, id] : spawns_) fail(id);
  for (const auto& [link_id, id] : data_ops_) fail(id);
  for (const auto& [link_id, id] : lookups_) fail(id);
  for (const auto& [link_id, id] : modex_) fail(id);
  for (const auto& [link_id, q] : tables_) fail(q.id);
  aborts_.clear();
  fences_.clear();
  fence_seq_.clear();  // every host counts the new incarnation's fences from 0
  spawns_.clear();
  data_ops_.clear();
  lookups_.clear();
  modex_.clear();
  tables_.clear();
  early_notices_.clear();
  local_state_.clear();
  pmix_restart r;
  r.dropped.push_back(job_.nspace);
  for (const auto& j : spawned_) {
    if (j.add.pmix) r.dropped.push_back(j.add.pmix->nspace);
  }
  spawned_.clear();
  job_ = std::move(job);
  local_ranks_ = ranks_on_node(job_);
  oversubscribed_ = facts_.cores > 0 && local_ranks_.size() > facts_.cores;
  client_state_.assign(job_.rank_node.size(), 0);
  if (facts_.place.hostname.empty() && job_.node < job_.nodes.size()) {
    facts_.place.hostname = job_.nodes[job_.node];
  }
  r.job = job_;
  out.push_back(std::move(r));
}

void pmix_relay::rank_started(std::uint32_t rank, std::int64_t pid) {
  local_state_[rank].pid = pid;
}

void pmix_relay::rank_ended(std::uint32_t rank, exit_status status, std::vector<pmix_action>& out) {
  if (unfinalized(rank)) out.push_back(send{link::pmix_unfinalized{rank, status}});
  local_state_[rank].status = status;
}

void pmix_relay::rank_respawned(std::uint32_t rank, std::vector<pmix_action>& out) {
  if (rank < client_state_.size()) client_state_[rank] = 0;
  local_state_.erase(rank);
  release_abort(rank, out);
  out.push_back(pmix_reregister{job_.nspace, rank});
}

void pmix_relay::release_abort(std::uint32_t rank, std::vector<pmix_action>& out) {
  auto it = aborts_.find(rank);
  if (it == aborts_.end()) return;
  out.push_back(pmix_complete{it->second, pmix::status::success, {}});
  aborts_.erase(it);
}

void pmix_relay::release_aborts(std::vector<pmix_action>& out) {
  while (!aborts_.empty()) release_abort(aborts_.begin()->first, out);
}

// Participants as the launcher numbers them: every rank of the first job alone is `all` (the
// common fence, named compactly); anything else is the sorted list of processes, a wildcard
// standing for every rank of its namespace.
bool pmix_relay::members_of(const std::vector<pmix::proc>& participants,
                            link::fence_members& members, std::string& why) const {
  std::set<std::uint32_t> ranks;
  if (participants.empty()) {
    why = "no participants";
    return false;
  }
  for (const auto& p : participants) {
    if (p.rank != pmix::wildcard_rank) {
      const auto r = process_of(p);
      if (!r) {
        why = "a participant (" + p.nspace + ", " + std::to_string(p.rank) +
              ") of no job of the launch";
        return false;
      }
      ranks.insert(*r);
      continue;
    }
    std::uint32_t first = 0;
    const auto* facts = facts_of(p.nspace, first);
    if (facts == nullptr) {
      why = "namespace " + p.nspace + ", which the launch does not have";
      return false;
    }
    for (std::uint32_t r = 0; r < facts->rank_node.size(); ++r) ranks.insert(first + r);
  }
  const auto n = static_cast<std::uint32_t>(job_.rank_node.size());
  members.all = ranks.size() == n && *ranks.rbegin() == n - 1;
  members.ranks.clear();
  if (!members.all) members.ranks.assign(ranks.begin(), ranks.end());
  return true;
}

// Every host sees the same fences of the same members in the same order, so its own count of
// them (seq) names the fence on every host alike.
void pmix_relay::contribute(link::fence_members members, bool collect, std::vector<char> data,
                            pmix_request_id id, std::vector<pmix_action>& out) {
  const std::uint64_t seq = fence_seq_[members]++;
  link::fence_contribution c;
  c.members = members;
  c.seq = seq;
  c.collect = collect;
  c.data.assign(data.begin(), data.end());
  fences_[{std::move(members), seq}] = id;
  out.push_back(send{std::move(c)});
}

void pmix_relay::handle(pmix_event e, std::vector<pmix_action>& out) {
  std::visit(
      overloaded{
          [&](pmix_abort_called& a) {
            const auto rank = process_of(a.caller);
            if (!rank) {  // not a rank of ours: it exits with its status
              out.push_back(pmix_complete{a.id, pmix::status::success, {}});
              return;
            }
            aborts_[*rank] = a.id;
            out.push_back(send{link::pmix_abort{*rank, a.status, std::move(a.message)}});
          },
          [&](pmix_fence_called& f) {
            link::fence_members members;
            std::string why;
            if (!members_of(f.participants, members, why)) {
              say("PMIx: a fence with " + why, out);
              out.push_back(pmix_complete{f.id, pmix::status::not_found, {}});
              return;
            }
            contribute(std::move(members), f.collect, std::move(f.data), f.id, out);
          },
          // Across hosts: a fence without data among the participants' hosts.
          [&](pmix_connect_called& c) {
            link::fence_members members;
            std::string why;
            if (!members_of(c.participants, members, why)) {
              say("PMIx: a connect with " + why, out);
              out.push_back(pmix_complete{c.id, pmix::status::not_found, {}});
              return;
            }
            contribute(std::move(members), false, {}, c.id, out);
          },
          // A rank's spawn names it by its process number; anyone else connected to this server
          // is a tool attached here (PMIx lets only ranks and tools in), named by its own
          // namespace and rank.
          [&](pmix_spawn_called& s) {
            link::pmix_spawn m;
            if (const auto rank = process_of(s.requester)) {
              m.rank = *rank;
            } else if (!s.requester.nspace.empty() && s.requester.rank != pmix::wildcard_rank &&
                       !launch_nspace(s.requester.nspace)) {
              m.rank = s.requester.rank;
              m.tool = s.requester.nspace;
            } else {
              out.push_back(pmix_complete{s.id, pmix::status::error, {}});
              return;
            }
            m.id = next_request_++;
            for (auto& a : s.apps) {
              m.apps.push_back(link::spawn_app_spec{std::move(a.argv), std::move(a.env),
                                                    std::move(a.wdir), a.max_procs,
                                                    std::move(a.hosts)});
            }
            spawns_.emplace(m.id, s.id);
            out.push_back(send{std::move(m)});
          },
          [&](pmix_publish_called& p) {
            const auto rank = process_of(p.publisher);
            if (!rank) {
              out.push_back(pmix_complete{p.id, pmix::status::not_supported, {}});
              return;
            }
            link::pmix_publish m{next_request_++, *rank, {}};
            for (auto& v : p.values) {
              m.values.push_back({v.key, *rank, std::string(v.value.begin(), v.value.end())});
            }
            data_ops_.emplace(m.id, p.id);
            out.push_back(send{std::move(m)});
          },
          [&](pmix_unpublish_called& u) {
            const auto rank = process_of(u.requester);
            if (!rank) {
              out.push_back(pmix_complete{u.id, pmix::status::not_supported, {}});
              return;
            }
            link::pmix_unpublish m{next_request_++, *rank, std::move(u.keys)};
            data_ops_.emplace(m.id, u.id);
            out.push_back(send{std::move(m)});
          },
          [&](pmix_lookup_called& l) {
            const auto rank = process_of(l.requester);
            if (!rank) {
              out.push_back(pmix_complete{l.id, pmix::status::not_supported, {}});
              return;
            }
            link::pmix_lookup m{next_request_++, *rank, std::move(l.keys), l.wait, l.timeout_s};
            lookups_.emplace(m.id, l.id);
            out.push_back(send{std::move(m)});
          },
          [&](pmix_query_called& q) { on_query(std::move(q), out); },
          // Any rank of any of the launch's jobs on another host (its host answers once the
          // rank has committed its data); a wildcard names no one host.
          [&](pmix_modex_called& m) {
            const auto target = process_of(m.target);
            if (!target) {
              out.push_back(pmix_complete{m.id, pmix::status::not_found, {}});
              return;
            }
            const std::uint64_t link_id = next_modex_++;
            modex_[link_id] = m.id;
            out.push_back(send{link::modex_request{link_id, *target}});
          },
          [&](const pmix_client_connected& c) {
            if (const auto r = process_of(c.who); r && *r < client_state_.size()) {
              client_state_[*r] = 1;
            }
          },
          [&](const pmix_client_finalized& c) {
            if (const auto r = process_of(c.who); r && *r < client_state_.size()) {
              client_state_[*r] = 2;
            }
          },
          [&](pmix_local_modex_answered& a) {
            out.push_back(send{link::modex_reply{a.link_id, a.found, std::move(a.data)}});
          },
          [&](const pmix_server_up&) {
            if (server_ != server_state::not_started) return;
            server_ = server_state::running;
            for (std::size_t i = 0; i < spawned_.size(); ++i) register_spawned(i, out);
            // The server keeps events for ranks that register their handlers later.
            for (const auto& n : early_notices_) notify_server(n, out);
            early_notices_.clear();
          },
          [&](const pmix_server_failed&) {
            server_ = server_state::failed;
            early_notices_.clear();
          },
          [&](pmix_server_said& s) { say(std::move(s.line), out); },
      },
      e);
}

bool pmix_relay::on_message(const link::message& m, std::vector<pmix_action>& out) {
  if (const auto* f = std::get_if<link::fence_result>(&m)) {
    auto it = fences_.find({f->members, f->seq});
    if (it == fences_.end()) return true;
    out.push_back(f->ok ? pmix_complete{it->second, pmix::status::success,
                                        std::vector<char>(f->data.begin(), f->data.end())}
                        : pmix_complete{it->second, pmix::status::error, {}});
    fences_.erase(it);
    return true;
  }
  // Another host asks for the data of one of this host's ranks: only the server knows it.
  if (const auto* q = std::get_if<link::modex_request>(&m)) {
    const auto p = proc_of(q->rank);
    std::uint32_t first = 0;
    const auto* facts = p ? facts_of(p->nspace, first) : nullptr;
    const bool here = facts != nullptr && facts->rank_node.at(p->rank) == facts->node;
    if (!here || server_ == server_state::failed) {
      out.push_back(send{link::modex_reply{q->id, false, {}}});
    } else {
      out.push_back(pmix_serve_modex{q->id, *p});
    }
    return true;
  }
  if (const auto* a = std::get_if<link::modex_reply>(&m)) {
    auto it = modex_.find(a->id);
    if (it == modex_.end()) return true;
    out.push_back(a->found ? pmix_complete{it->second, pmix::status::success,
                                           std::vector<char>(a->data.begin(), a->data.end())}
                           : pmix_complete{it->second, pmix::status::not_found, {}});
    modex_.erase(it);
    return true;
  }
  if (const auto* t = std::get_if<link::proc_table_reply>(&m)) {
    auto it = tables_.find(t->id);
    if (it == tables_.end()) return true;
    answer_query(it->second, t, out);
    tables_.erase(it);
    return true;
  }
  if (const auto* n = std::get_if<link::pmix_notify>(&m)) {
    // Before the server starts, the notices wait for it (the first 64), so that a rank that
    // connects later still learns of them.
    if (server_ == server_state::running) {
      notify_server(*n, out);
    } else if (server_ == server_state::not_started && early_notices_.size() < 64) {
      early_notices_.push_back(*n);
    }
    return true;
  }
  if (const auto* r = std::get_if<link::pmix_spawn_reply>(&m)) {
    auto it = spawns_.find(r->id);
    if (it == spawns_.end()) return true;
    out.push_back(r->ok ? pmix_complete{it->second, pmix::status::success, r->nspace}
                        : pmix_complete{it->second, pmix::status::error, {}});
    spawns_.erase(it);
    return true;
  }
  if (const auto* r = std::get_if<link::pmix_data_reply>(&m)) {
    if (auto it = data_ops_.find(r->id); it != data_ops_.end()) {
      out.push_back(pmix_complete{it->second, status_of(r->status), {}});
      data_ops_.erase(it);
      return true;
    }
    auto it = lookups_.find(r->id);
    if (it == lookups_.end()) return true;
    std::vector<pmix::found_value> found;
    for (const auto& v : r->values) {
      found.push_back(pmix::found_value{v.key,
                                        proc_of(v.rank).value_or(pmix::proc{job_.nspace, v.rank}),
                                        std::vector<char>(v.value.begin(), v.value.end())});
    }
    out.push_back(pmix_complete{it->second, status_of(r->status), std::move(found)});
    lookups_.erase(it);
    return true;
  }
  return false;
}

// The notice names processes; PMIx names ranks of a namespace. The affected ranks' namespace is
// told (its survivors here get the event); a job's end, naming none, goes to every namespace.
void pmix_relay::notify_server(const link::pmix_notify& n, std::vector<pmix_action>& out) const {
  std::map<std::string, std::vector<std::uint32_t>> told;
  if (n.ranks.empty()) {
    told[job_.nspace];
    for (const auto& j : spawned_) {
      if (j.registered) told[j.add.pmix->nspace];
    }
  }
  for (const auto r : n.ranks) {
    if (const auto p = proc_of(r)) told[p->nspace].push_back(p->rank);
  }
  for (auto& [nspace, ranks] : told) {
    out.push_back(pmix_notify_ranks{
        pmix::event_notice{nspace, n.kind, std::move(ranks), n.code, n.host, n.text}});
  }
}

}  // namespace pm::agent
