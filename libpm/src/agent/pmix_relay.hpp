// What a host's agent decides about its ranks' PMIx requests (docs/pmix.md), as a sans-I/O part
// of the agent: what crosses hosts goes to the launcher, the launcher's answers complete the
// requests they answer, and what the server needs to hear (a spawned namespace, an event) is said.
//
// Inputs: what the local PMIx server reported (an upcall: a fence, an abort, a spawn, ...), each
// named by an id its driver chose, and the launcher's PMIx messages. Outputs (pmix_action): a
// message to send, a pending request to complete (the driver holds each request's completion
// under its id), a question for the server (a local rank's modex data), a namespace to register,
// an event to notify. No descriptor, no clock, no libpmix: pmd drives it with its embedded
// server (tools/pmd/pmix_gateway); a simulator can drive it with a modelled PMIx client.
//
// Numbering: a "process" is the launcher's number for a rank of any job of the launch (the first
// job's ranks are 0..n-1, a spawned job's follow from its job_add's `first`); PMIx names a rank
// by namespace and rank within it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "agent/agent.hpp"
#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/predicted_env.hpp"
#include "link/messages.hpp"
#include "pm/exit_status.hpp"

namespace pm::agent {

/// Names one request the server handed to the driver until it is completed.
using pmix_request_id = std::uint64_t;

/// What the driver knows of its host for the ranks' PMIx variables.
struct pmix_host_facts {
  pmix::server_place place;  ///< where the server will be (named before it starts)
  unsigned cores = 0;        ///< online cores (0: unknown)
  bool rdma = false;         ///< an RDMA device (/sys/class/infiniband, /sys/class/cxi) is there
  bool gpus = false;         ///< a GPU is there (the driver's look, or the summary the agent sent)
};

// ---- events: what the server reported ----
/// A rank called PMIx_Abort; it stays blocked until its request is completed.
struct pmix_abort_called {
  pmix_request_id id = 0;
  pmix::proc caller;
  int status = 0;
  std::string message;
};
/// A fence with participants on other hosts (the server completes local ones itself).
struct pmix_fence_called {
  pmix_request_id id = 0;
  std::vector<pmix::proc> participants;
  bool collect = false;
  std::vector<char> data;
};
/// PMIx_Connect or PMIx_Disconnect across hosts.
struct pmix_connect_called {
  pmix_request_id id = 0;
  std::vector<pmix::proc> participants;
};
struct pmix_spawn_called {
  pmix_request_id id = 0;
  pmix::proc requester;
  std::vector<pmix::spawn_app> apps;
};
struct pmix_publish_called {
  pmix_request_id id = 0;
  pmix::proc publisher;
  std::vector<pmix::published_value> values;
};
struct pmix_lookup_called {
  pmix_request_id id = 0;
  pmix::proc requester;
  std::vector<std::string> keys;
  bool wait = false;
  std::uint32_t timeout_s = 0;
};
struct pmix_unpublish_called {
  pmix_request_id id = 0;
  pmix::proc requester;
  std::vector<std::string> keys;
};
/// A tool's (or a rank's) query the server could not answer from its own data.
struct pmix_query_called {
  pmix_request_id id = 0;
  pmix::proc requester;
  std::vector<pmix::query> queries;
};
/// A local rank wants the data of a rank this host does not serve.
struct pmix_modex_called {
  pmix_request_id id = 0;
  pmix::proc target;
};
/// PMIx_Init and PMIx_Finalize of a client.
struct pmix_client_connected {
  pmix::proc who;
};
struct pmix_client_finalized {
  pmix::proc who;
};
/// The server's answer to a pmix_serve_modex (`found` false: no data, or no server).
struct pmix_local_modex_answered {
  std::uint64_t link_id = 0;
  bool found = false;
  std::string data;
};
/// The server runs now (its first job registered), or it could not start.
struct pmix_server_up {};
struct pmix_server_failed {};
/// A line for the user from the server's side (a connection refused, a server that cannot
/// start, ...): the launcher shows it.
struct pmix_server_said {
  std::string line;
};

using pmix_event =
    std::variant<pmix_abort_called, pmix_fence_called, pmix_connect_called, pmix_spawn_called,
                 pmix_publish_called, pmix_lookup_called, pmix_unpublish_called, pmix_query_called,
                 pmix_modex_called, pmix_client_connected, pmix_client_finalized,
                 pmix_local_modex_answered, pmix_server_up, pmix_server_failed, pmix_server_said>;

// ---- actions ----
/// What a completed request hands back besides its status: fence or modex bytes, a spawned
/// namespace, a lookup's finds, a query's answers.
using pmix_payload = std::variant<std::monostate, std::vector<char>, std::string,
                                  std::vector<pmix::found_value>, std::vector<pmix::query_value>>;
/// Complete request `id` (once; the id is gone afterwards).
struct pmix_complete {
  pmix_request_id id = 0;
  pmix::status status = pmix::status::success;
  pmix_payload payload;
};
/// Ask the server for local rank `target`'s modex data (starting the server if need be); answer
/// with pmix_local_modex_answered{link_id}.
struct pmix_serve_modex {
  std::uint64_t link_id = 0;
  pmix::proc target;
};
/// Register a spawned job's namespace with the running server, and its ranks on this host.
struct pmix_register_job {
  pmix::job_info job;
  std::vector<std::uint32_t> local_ranks;
};
/// This host's name for PMIx, learnt from a spawned job (a host that runs none of the first
/// job's ranks): the server is started with it.
struct pmix_host_named {
  std::string hostname;
};
/// PMIx_Notify_event to this host's ranks of the notice's namespace.
struct pmix_notify_ranks {
  pmix::event_notice notice;
};

/// A restart in place is complete (docs/pmix.md, "Restarts"): deregister `dropped` (the
/// namespaces the relay served: the first job's and the spawned jobs', with their clients) from
/// the server where it runs, and take `job` as the first job from now on: registered with its
/// local ranks as the first job is (when the server starts, or with a running server before the
/// next client is let in). Every request of the jobs before was completed (failed) just before.
struct pmix_restart {
  std::vector<std::string> dropped;
  link::pmix_job job;
};

/// --enable-recovery: a local rank of the first job starts again alone (docs/resilience.md):
/// where the server runs and registered the job, its client is registered again (deregistered
/// first), so that the new process connects as that rank of the same namespace.
struct pmix_reregister {
  std::string nspace;
  std::uint32_t rank = 0;
};

using pmix_action = std::variant<send, pmix_complete, pmix_serve_modex, pmix_register_job,
                                 pmix_host_named, pmix_notify_ranks, pmix_restart, pmix_reregister>;

class pmix_relay {
 public:
  /// `executables`: each app's argv[0], as a tool's process table names them.
  pmix_relay(link::pmix_job job, std::vector<std::string> executables, pmix_host_facts facts);

  void handle(pmix_event e, std::vector<pmix_action>& out);
  /// A launcher message for the PMIx side (fence_result, modex_request, modex_reply,
  /// proc_table_reply, pmix_notify, pmix_spawn_reply, pmix_data_reply); false: not one of them.
  bool on_message(const link::message& m, std::vector<pmix_action>& out);
  /// A job a rank spawned: its namespace is registered with the server (now, or when it starts).
  void add_job(const link::job_add& job, std::vector<pmix_action>& out);
  /// A restart in place is complete (no rank of the jobs before is left): every request still
  /// pending fails, everything about those jobs is dropped, and `job` (the new incarnation's
  /// facts for this host) is the first job from now on (pmix_restart). The link's request ids go
  /// on counting: a late answer to a dropped request completes nothing.
  void restart(link::pmix_job job, std::vector<pmix_action>& out);

  /// The server is up and serving (it said so, and has not failed since).
  bool server_running() const noexcept { return server_ == server_state::running; }
  /// Where a tool on this host reaches the server, sent once when the relay starts.
  link::pmix_server server_info() const;
  /// The variables process `rank` gets on top of its job's ("NAME=value"): what the server will
  /// tell it, and Open MPI's settings for this host unless the rank's environment has them
  /// (`has(name)`: the job sets that variable, even empty).
  template <class Has>
  std::vector<std::string> rank_variables(std::uint32_t rank, Has&& has) const;

  void rank_started(std::uint32_t rank, std::int64_t pid);
  /// A local rank ended: one that connected (PMIx_Init) and did not finalize is reported, since
  /// its peers may wait for it in a fence for ever.
  void rank_ended(std::uint32_t rank, exit_status status, std::vector<pmix_action>& out);
  /// --enable-recovery: a local rank of the first job starts again (its process ended): it is a
  /// client that has not connected yet, and the server registers it again (pmix_reregister).
  void rank_respawned(std::uint32_t rank, std::vector<pmix_action>& out);
  /// The launcher acted on an abort (the job is being stopped): the caller may return.
  void release_abort(std::uint32_t rank, std::vector<pmix_action>& out);
  void release_aborts(std::vector<pmix_action>& out);

  bool unfinalized(std::uint32_t rank) const noexcept {
    return rank < client_state_.size() && client_state_[rank] == 1;
  }
  bool finalized(std::uint32_t rank) const noexcept {
    return rank < client_state_.size() && client_state_[rank] == 2;
  }
  /// More of the job's ranks here than cores; neither RDMA devices nor GPUs here (docs/pmix.md).
  bool oversubscribed() const noexcept { return oversubscribed_; }
  bool tcp_only_host() const noexcept { return !facts_.rdma && !facts_.gpus; }
  /// Where a rank of one of the launch's jobs is in PMIx's terms (nullopt: of none).
  std::optional<pmix::proc> proc_of(std::uint32_t process) const;
  /// The launcher's number of a PMIx rank of one of the jobs (nullopt: none, or a wildcard).
  std::optional<std::uint32_t> process_of(const pmix::proc& p) const;
  /// The first job's facts, and this host's ranks of it.
  const link::pmix_job& job() const noexcept { return job_; }
  const std::vector<std::uint32_t>& local_ranks() const noexcept { return local_ranks_; }

 private:
  std::vector<std::string> predicted_variables(std::uint32_t rank) const;
  const link::pmix_job* facts_of(const std::string& nspace, std::uint32_t& first) const;
  bool launch_nspace(const std::string& nspace) const;
  bool members_of(const std::vector<pmix::proc>& participants, link::fence_members& members,
                  std::string& why) const;
  void contribute(link::fence_members members, bool collect, std::vector<char> data,
                  pmix_request_id id, std::vector<pmix_action>& out);
  void on_query(pmix_query_called q, std::vector<pmix_action>& out);
  void answer_query(const pmix_query_called& q, const link::proc_table_reply* table,
                    std::vector<pmix_action>& out) const;
  pmix::proc_entry entry_of(std::uint32_t rank, std::int64_t pid,
                            const std::optional<exit_status>& status) const;
  void register_spawned(std::size_t index, std::vector<pmix_action>& out);
  void notify_server(const link::pmix_notify& n, std::vector<pmix_action>& out) const;
  static void say(std::string line, std::vector<pmix_action>& out);

  link::pmix_job job_;
  std::vector<std::string> executables_;
  pmix_host_facts facts_;
  std::vector<std::uint32_t> local_ranks_;
  bool oversubscribed_ = false;
  enum class server_state { not_started, running, failed } server_ = server_state::not_started;
  std::vector<std::uint8_t> client_state_;  // per process: 0 never, 1 connected, 2 finalized
  // Jobs the ranks spawned, in order: the launcher's job_add (their first process, apps, facts).
  struct spawned_job {
    link::job_add add;
    std::vector<std::uint32_t> local;  // its ranks on this host
    bool registered = false;
  };
  std::vector<spawned_job> spawned_;
  std::map<std::uint32_t, pmix_request_id> aborts_;  // by the caller's process number
  std::map<link::fence_members, std::uint64_t> fence_seq_;
  std::map<std::pair<link::fence_members, std::uint64_t>, pmix_request_id> fences_;
  std::uint64_t next_request_ = 0;  // spawn, publish, lookup, unpublish ids on the link
  std::map<std::uint64_t, pmix_request_id> spawns_;
  std::map<std::uint64_t, pmix_request_id> data_ops_;  // publish, unpublish: a status
  std::map<std::uint64_t, pmix_request_id> lookups_;   // a status and values
  std::uint64_t next_modex_ = 0;
  std::map<std::uint64_t, pmix_request_id> modex_;
  std::uint64_t next_table_ = 0;
  std::map<std::uint64_t, pmix_query_called> tables_;  // waiting for the launcher's table
  std::vector<link::pmix_notify> early_notices_;       // before the server started
  struct local_rank {
    std::int64_t pid = 0;
    std::optional<exit_status> status;
  };
  std::map<std::uint32_t, local_rank> local_state_;  // what the agent saw of its ranks
};

template <class Has>
std::vector<std::string> pmix_relay::rank_variables(std::uint32_t rank, Has&& has) const {
  std::vector<std::string> extra = predicted_variables(rank);
  // This host's Open MPI settings (predicted_env.hpp) where the rank's environment has none.
  for (auto& setting : pmix::host_settings({oversubscribed_, facts_.rdma, facts_.gpus})) {
    if (!has(std::string_view(setting).substr(0, setting.find('=')))) {
      extra.push_back(std::move(setting));
    }
  }
  return extra;
}

}  // namespace pm::agent
