// pmix_relay's answers to queries the server could not answer from its own data (a tool's,
// mostly: docs/pmix.md, "Tools"). The whole job's process table needs the launcher (it knows
// every host's ranks); the rest is known here.
#include "agent/pmix_relay.hpp"

namespace pm::agent {

pmix::proc_entry pmix_relay::entry_of(std::uint32_t rank, std::int64_t pid,
                                      const std::optional<exit_status>& status) const {
  pmix::proc_entry e;
  e.who = {job_.nspace, rank};
  e.hostname = job_.nodes.at(job_.rank_node.at(rank));
  const std::uint32_t app = job_.rank_app.at(rank);
  if (app < executables_.size()) e.executable = executables_[app];
  e.pid = pid;
  if (status) {
    e.exit_code = status->shell_code();
    e.state = status->is_signal()   ? pmix::proc_state::killed_by_signal
              : status->code() == 0 ? pmix::proc_state::terminated
                                    : pmix::proc_state::exited_nonzero;
  } else {
    e.state = pid != 0 ? pmix::proc_state::running : pmix::proc_state::undefined;
  }
  return e;
}

void pmix_relay::on_query(pmix_query_called q, std::vector<pmix_action>& out) {
  bool needs_table = false;
  for (const auto& one : q.queries) {
    for (const auto& k : one.keys) {
      if (k == pmix::query_keys::proc_table && one.nspace.value_or(job_.nspace) == job_.nspace) {
        needs_table = true;
      }
    }
  }
  if (needs_table) {
    const std::uint64_t id = next_table_++;
    tables_.emplace(id, std::move(q));
    out.push_back(send{link::proc_table_request{id}});
    return;
  }
  answer_query(q, nullptr, out);
}

void pmix_relay::answer_query(const pmix_query_called& q, const link::proc_table_reply* table,
                              std::vector<pmix_action>& out) const {
  namespace keys = pmix::query_keys;
  std::vector<pmix::query_value> values;
  std::size_t unknown_nspace = 0;
  for (const auto& one : q.queries) {
    const bool ours = one.nspace.value_or(job_.nspace) == job_.nspace;
    for (const auto& k : one.keys) {
      if (k == keys::namespaces) {
        // Every namespace of the launch: the first job's and those its ranks or tools spawned.
        std::string all = job_.nspace;
        for (const auto& j : spawned_) {
          if (j.add.pmix) all += "," + j.add.pmix->nspace;
        }
        values.push_back({k, std::move(all)});
      } else if (k == keys::spawn_support) {
        // The spawn attributes honoured (pmix_common.h's PMIX_HOST, PMIX_WDIR); the rest of a
        // spawn's directives are ignored (docs/pmix.md, "Tools").
        values.push_back({k, std::string("pmix.host,pmix.wdir")});
      } else if (k == keys::debug_support) {
        // No debugger attribute is supported.
        values.push_back({k, std::string()});
      } else if (k == keys::num_psets) {
        values.push_back({k, std::size_t{0}});
      } else if (k == keys::pset_names) {
        values.push_back({k, std::string()});
      } else if (k == keys::supported_keys) {
        values.push_back({k, std::string(keys::namespaces) + "," + keys::proc_table + "," +
                                 keys::local_proc_table + "," + keys::job_size + "," +
                                 keys::num_psets + "," + keys::pset_names + "," +
                                 keys::spawn_support + "," + keys::debug_support});
      } else if (!ours &&
                 (k == keys::proc_table || k == keys::local_proc_table || k == keys::job_size)) {
        ++unknown_nspace;
      } else if (k == keys::job_size) {
        values.push_back({k, static_cast<std::uint32_t>(job_.rank_node.size())});
      } else if (k == keys::local_proc_table) {
        std::vector<pmix::proc_entry> entries;
        for (const std::uint32_t rank : local_ranks_) {
          const auto it = local_state_.find(rank);
          entries.push_back(it == local_state_.end()
                                ? entry_of(rank, 0, std::nullopt)
                                : entry_of(rank, it->second.pid, it->second.status));
        }
        values.push_back({k, std::move(entries)});
      } else if (k == keys::proc_table && table != nullptr) {
        std::vector<pmix::proc_entry> entries;
        for (const auto& t : table->ranks) {
          if (t.rank >= job_.rank_node.size()) continue;
          std::optional<exit_status> status;
          if (t.signo != 0) status = exit_status::signaled(t.signo);
          if (t.code >= 0) status = exit_status::exited(t.code);
          pmix::proc_entry e = entry_of(t.rank, t.pid, status);
          // What only the launcher knows: the job's own stop, a failed start, a lost host.
          if (t.state == "killed") e.state = pmix::proc_state::killed_by_cmd;
          if (t.state == "spawn_failed") e.state = pmix::proc_state::failed_to_start;
          if (t.state == "lost") e.state = pmix::proc_state::comm_lost;
          entries.push_back(std::move(e));
        }
        values.push_back({k, std::move(entries)});
      }
    }
  }
  if (values.empty()) {
    out.push_back(pmix_complete{
        q.id, unknown_nspace > 0 ? pmix::status::not_found : pmix::status::not_supported, {}});
  } else {
    // Some keys unanswered: success all the same, the answered keys present and the others
    // absent. PMIx 4.2.2's client drops every value of a PMIX_QUERY_PARTIAL_SUCCESS answer.
    out.push_back(pmix_complete{q.id, pmix::status::success, std::move(values)});
  }
}

}  // namespace pm::agent
