// PMIx across hosts (docs/pmix.md): fences, direct modex, abort and unfinalized ranks, events,
// the tools' server and process table, spawned jobs and the launcher's data store. Each message
// declares its wire form once (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "link/messages/launch.hpp"
#include "link/messages/pmix_job.hpp"
#include "link/wire_schema.hpp"
#include "pm/exit_status.hpp"
#include "pm/notice.hpp"

namespace pm::link {

// ---- fences and direct modex ----
/// Which ranks take part in a fence: all of the job's (PMIx's wildcard), or the listed ones.
struct fence_members {
  bool all = true;
  std::vector<std::uint32_t> ranks;  ///< sorted; empty when `all`
  friend bool operator==(const fence_members&, const fence_members&) = default;
  friend auto operator<=>(const fence_members&, const fence_members&) = default;
  static constexpr auto wire() {
    return wire_map(field("all", &fence_members::all), field("ranks", &fence_members::ranks));
  }
  static void check(const fence_members& m, std::string_view type);  ///< sorted, all or listed
};
/// Agent -> launcher: this host's part of a fence among ranks of several hosts (PMIx completes
/// fences among local ranks by itself). The launcher answers every participating host with one
/// fence_result.
struct fence_contribution {
  fence_members members;
  std::uint64_t seq = 0;
  bool collect = false;  ///< PMIX_COLLECT_DATA: the result carries everyone's data
  std::string data;      ///< raw bytes (a 0-byte contribution still counts: a barrier)
  friend bool operator==(const fence_contribution&, const fence_contribution&) = default;
  static constexpr auto wire() {
    return wire_message("fence", sender::agent, field("members", &fence_contribution::members),
                        field("seq", &fence_contribution::seq),
                        field("collect", &fence_contribution::collect),
                        field("data", &fence_contribution::data));
  }
};
/// Launcher -> agent: a fence that spans hosts is complete: every participating host's
/// contribution, concatenated in node order (`ok` false: it failed and the job ends; data is then
/// empty).
struct fence_result {
  fence_members members;
  std::uint64_t seq = 0;  ///< the agent's count of fences with these members, from 0
  bool ok = true;
  std::string data;  ///< raw bytes
  friend bool operator==(const fence_result&, const fence_result&) = default;
  static constexpr auto wire() {
    return wire_message("fence_result", sender::launcher, field("members", &fence_result::members),
                        field("seq", &fence_result::seq), field("ok", &fence_result::ok),
                        field("data", &fence_result::data));
  }
};
/// Direct modex (both ways): an agent asks for the PMIx data of a rank on another host; the
/// launcher forwards it to that rank's agent under an id of its own. `id` names the request on
/// the link it travels.
struct modex_request {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  friend bool operator==(const modex_request&, const modex_request&) = default;
  static constexpr auto wire() {
    return wire_message("modex", sender::either, field("id", &modex_request::id),
                        field("rank", &modex_request::rank));
  }
};
/// The answer to a modex_request of the same id (found false: the rank has no data, or its host
/// could not give it).
struct modex_reply {
  std::uint64_t id = 0;
  bool found = false;
  std::string data;  ///< raw bytes
  friend bool operator==(const modex_reply&, const modex_reply&) = default;
  static constexpr auto wire() {
    return wire_message("modex_reply", sender::either, field("id", &modex_reply::id),
                        field("found", &modex_reply::found), field("data", &modex_reply::data));
  }
};

// ---- ranks that end the job, and events for the survivors ----
/// Agent -> launcher: a rank called PMIx_Abort (MPI_Abort): the job ends with `status`. The
/// caller stays blocked until the launcher signals it (it then ends with the rest of the job).
struct pmix_abort {
  std::uint32_t rank = 0;
  int status = 1;
  std::string message;
  friend bool operator==(const pmix_abort&, const pmix_abort&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_abort", sender::agent, field("rank", &pmix_abort::rank),
                        field("status", &pmix_abort::status, -2147483647, 2147483647),
                        field("message", &pmix_abort::message));
  }
};
/// Agent -> launcher: a rank that connected to PMIx (MPI_Init) ended without PMIx_Finalize, by
/// an exit or a signal: its peers may wait for it in their next fence for ever, so the job ends
/// (as under mpirun), even where the abort policy is off. Encoded as `exited` is: exactly one of
/// `code` and `signal`.
struct pmix_unfinalized {
  std::uint32_t rank = 0;
  exit_status status;
  friend bool operator==(const pmix_unfinalized&, const pmix_unfinalized&) = default;
  static constexpr auto wire() {
    return wire_message("unfinalized", sender::agent, field("rank", &pmix_unfinalized::rank),
                        exit_status_field(&pmix_unfinalized::status));
  }
};
/// Launcher -> agent, where the abort policy is off: other ranks of the job failed, or the job is
/// being ended (the controller's notify_ranks). The agent's PMIx server tells its ranks with a
/// PMIx event (docs/pmix.md, "Events"); an agent whose server did not start yet keeps it for the
/// server.
struct pmix_notify {
  notice_kind kind = notice_kind::rank_exited;
  std::vector<std::uint32_t> ranks;  ///< the affected ranks (empty: the job ends without one)
  int code = 0;                      ///< pm/notice.hpp: exit code, signal, status
  std::string host;                  ///< the affected ranks' host ("" for none)
  std::string text;  ///< the launcher's line, e.g. "rank 1 on node2 exited with code 7"
  friend bool operator==(const pmix_notify&, const pmix_notify&) = default;
  static constexpr auto wire() {
    return wire_message("notify", sender::launcher, field("kind", &pmix_notify::kind),
                        field("ranks", &pmix_notify::ranks),
                        field("code", &pmix_notify::code, -2147483647, 2147483647),
                        field("host", &pmix_notify::host), field("text", &pmix_notify::text));
  }
};
template <>
struct wire_text<notice_kind> {
  static std::string_view to(notice_kind k) { return to_string(k); }
  static std::optional<notice_kind> from(std::string_view s) { return notice_kind_from(s); }
};

// ---- PMIx tools (docs/pmix.md, "Tools") ----
/// Agent -> launcher: where this host's PMIx server is for a PMIx tool on the same host: sent
/// once, when the agent set up its ranks' server (which starts at the first connection, a tool's
/// too). The launcher shows it in `pmrun --ps`.
struct pmix_server {
  std::string uri;     ///< PMIX_SERVER_URI: "pmix-server.<pid>;tcp4://127.0.0.1:<port>"
  std::string tmpdir;  ///< PMIx's server tmpdir (rendezvous files once the server runs)
  friend bool operator==(const pmix_server&, const pmix_server&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_server", sender::agent, field("uri", &pmix_server::uri),
                        field("tmpdir", &pmix_server::tmpdir));
  }
};
/// Agent -> launcher: a PMIx tool asked this host's server for the whole job's process table:
/// the launcher, which knows every rank, answers with a proc_table_reply of the same id.
struct proc_table_request {
  std::uint64_t id = 0;
  friend bool operator==(const proc_table_request&, const proc_table_request&) = default;
  static constexpr auto wire() {
    return wire_message("proc_table_request", sender::agent, field("id", &proc_table_request::id));
  }
};
/// One rank as the launcher knows it.
struct proc_table_entry {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;  ///< on its host; 0: not started
  /// pm::rank_state's name: pending, running, exited, killed, spawn_failed, lost (an agent takes
  /// a name it does not know for "undefined").
  std::string state;
  int code = -1;  ///< its exit code (-1: none)
  int signo = 0;  ///< the signal that ended it (0: none)
  friend bool operator==(const proc_table_entry&, const proc_table_entry&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &proc_table_entry::rank), field("pid", &proc_table_entry::pid),
                    field("state", &proc_table_entry::state),
                    field("code", &proc_table_entry::code, -1, 255),
                    field("signal", &proc_table_entry::signo, 0, max_signal));
  }
};
/// Launcher -> agent: every rank of the job, by rank.
struct proc_table_reply {
  std::uint64_t id = 0;
  std::vector<proc_table_entry> ranks;
  friend bool operator==(const proc_table_reply&, const proc_table_reply&) = default;
  static constexpr auto wire() {
    return wire_message("proc_table_reply", sender::launcher, field("id", &proc_table_reply::id),
                        field("ranks", &proc_table_reply::ranks));
  }
};

// ---- spawned jobs (MPI_Comm_spawn; docs/pmix.md, "Spawn") ----
/// One app of a PMIx_Spawn as the rank asked for it.
struct spawn_app_spec {
  std::vector<std::string> argv;
  std::vector<std::string> env;    ///< "NAME=value" (Open MPI's OMPI_PARENT_PORT, ...)
  std::string wdir;                ///< "" none
  std::uint32_t np = 0;            ///< maxprocs
  std::vector<std::string> hosts;  ///< PMIX_HOST: only these hosts (empty: any)
  friend bool operator==(const spawn_app_spec&, const spawn_app_spec&) = default;
  static constexpr auto wire() {
    return wire_map(field("argv", &spawn_app_spec::argv), field("env", &spawn_app_spec::env),
                    field("hosts", &spawn_app_spec::hosts), field("np", &spawn_app_spec::np),
                    field("wdir", &spawn_app_spec::wdir));
  }
  static void check(const spawn_app_spec& a, std::string_view type);  ///< a program to run
};
/// Agent -> launcher: a local rank or a PMIx tool attached to the agent called PMIx_Spawn: the
/// launcher maps the apps on free slots, sends job_add to every agent, spawns the ranks and
/// answers with a pmix_spawn_reply of the same id.
struct pmix_spawn {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;  ///< the caller: its process number, or its rank in `tool`
  std::vector<spawn_app_spec> apps;
  std::string tool;  ///< "" a rank asks; else the asking tool's namespace
  friend bool operator==(const pmix_spawn&, const pmix_spawn&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_spawn", sender::agent, field("id", &pmix_spawn::id),
                        field("rank", &pmix_spawn::rank), field("tool", &pmix_spawn::tool),
                        field("apps", &pmix_spawn::apps));
  }
  static void check(const pmix_spawn& m, std::string_view type);  ///< at least one app
};
/// Launcher -> agent: a rank's PMIx_Spawn (MPI_Comm_spawn) made a new job: sent to every agent
/// before any of its ranks is spawned. Its ranks are the launcher's processes first .. first +
/// size - 1 (rank_spec and every other message name them so), its apps the agent's apps
/// first_app .. (rank_spec.app counts on from the first job's apps). `pmix`: the job as this
/// host's PMIx server registers it (node no_node where it runs none of the job's ranks).
struct job_add {
  std::uint32_t job = 0;  ///< 1 for the first spawned job, 2 for the next, ...
  std::uint32_t first = 0;
  std::uint32_t first_app = 0;
  std::vector<app_spec> apps;
  std::optional<pmix_job> pmix;
  friend bool operator==(const job_add&, const job_add&) = default;
  static constexpr auto wire() {
    return wire_message("job_add", sender::launcher, field("job", &job_add::job),
                        field("first", &job_add::first), field("first_app", &job_add::first_app),
                        field("apps", &job_add::apps), field("pmix", &job_add::pmix));
  }
  static void check(const job_add& m, std::string_view type);  ///< apps, consistent PMIx facts
};
/// Launcher -> agent: the answer to a pmix_spawn of the same id: the new job's namespace, or why
/// there is none.
struct pmix_spawn_reply {
  std::uint64_t id = 0;
  bool ok = false;
  std::string nspace;
  std::string error;  ///< one line when !ok
  friend bool operator==(const pmix_spawn_reply&, const pmix_spawn_reply&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_spawn_reply", sender::launcher, field("id", &pmix_spawn_reply::id),
                        field("ok", &pmix_spawn_reply::ok),
                        field("nspace", &pmix_spawn_reply::nspace),
                        field("error", &pmix_spawn_reply::error));
  }
};

// ---- the launcher's data store (PMIx_Publish, PMIx_Lookup, PMIx_Unpublish) ----
/// What the launcher's data store answers a pmix_publish, pmix_unpublish or pmix_lookup.
enum class data_status : std::uint8_t { ok, not_found, timeout, error };
std::string_view to_string(data_status s) noexcept;
std::optional<data_status> data_status_from(std::string_view text) noexcept;
template <>
struct wire_text<data_status> {
  static std::string_view to(data_status s) { return to_string(s); }
  static std::optional<data_status> from(std::string_view s) { return data_status_from(s); }
};
/// One published value: its key, who published it (a process of the launcher's), the bytes
/// (PMIx's packed value, opaque to the launcher).
struct published_entry {
  std::string key;
  std::uint32_t rank = 0;
  std::string value;  ///< raw bytes
  friend bool operator==(const published_entry&, const published_entry&) = default;
  static constexpr auto wire() {
    return wire_map(field("key", &published_entry::key), field("rank", &published_entry::rank),
                    field("value", &published_entry::value));
  }
};
/// Launcher -> agent: the store's answer to the request of the same id.
struct pmix_data_reply {
  std::uint64_t id = 0;
  data_status status = data_status::ok;
  std::vector<published_entry> values;  ///< a lookup's finds, in the order asked
  friend bool operator==(const pmix_data_reply&, const pmix_data_reply&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_data_reply", sender::launcher, field("id", &pmix_data_reply::id),
                        field("status", &pmix_data_reply::status),
                        field("values", &pmix_data_reply::values));
  }
};
/// Agent -> launcher: PMIx_Publish of a local rank: kept by the launcher for lookups from any job
/// of the launch.
struct pmix_publish {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<published_entry> values;  ///< entries' rank is ignored (the publisher is `rank`)
  friend bool operator==(const pmix_publish&, const pmix_publish&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_publish", sender::agent, field("id", &pmix_publish::id),
                        field("rank", &pmix_publish::rank), field("values", &pmix_publish::values));
  }
};
/// Agent -> launcher: PMIx_Lookup of a local rank; `wait`: answer once every key is there (or
/// after timeout_s, 0: never).
struct pmix_lookup {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<std::string> keys;
  bool wait = false;
  std::uint32_t timeout_s = 0;
  friend bool operator==(const pmix_lookup&, const pmix_lookup&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_lookup", sender::agent, field("id", &pmix_lookup::id),
                        field("rank", &pmix_lookup::rank), field("keys", &pmix_lookup::keys),
                        field("wait", &pmix_lookup::wait),
                        field("timeout_s", &pmix_lookup::timeout_s));
  }
};
/// Agent -> launcher: PMIx_Unpublish of a local rank.
struct pmix_unpublish {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<std::string> keys;
  friend bool operator==(const pmix_unpublish&, const pmix_unpublish&) = default;
  static constexpr auto wire() {
    return wire_message("pmix_unpublish", sender::agent, field("id", &pmix_unpublish::id),
                        field("rank", &pmix_unpublish::rank), field("keys", &pmix_unpublish::keys));
  }
};

}  // namespace pm::link
