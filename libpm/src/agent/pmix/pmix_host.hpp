// The PMIx server that the node agent (pmd) embeds for its host's ranks (docs/pmix.md).
//
// It wraps libpmix's server side (PMIx 4.2): start it, register a job (namespace), ask for each
// local rank's environment, spawn the ranks yourself, and serve the requests PMIx cannot answer
// on its own (abort, fences and direct modex that span hosts, tools' queries) from your event
// loop; spawn, publish/lookup and connect are the host's too. PMIx tools may attach
// (PMIx_tool_init): each gets a namespace of its own. Who may connect at all is the host's to
// decide before libpmix reads a byte: options::listener_path takes the server off libpmix's TCP
// port (which every local user reaches, and whose clients libpmix believes about their uid).
// It lives in its own static library (pm_pmix) so that libpm never links libpmix: PMIx starts a
// progress thread and needs care with signals, which a library must not impose on the programs
// that embed it. Only pmd and the tests link it.
//
// Threads (what is and is not thread-safe):
//   - One server per process, for the process's whole life: libpmix 4.2.2 crashes when a server
//     starts again after PMIx_server_finalize, so start() refuses a second one even after
//     stop(). A server serves any number of jobs (register_job / deregister_job).
//   - Every member of `server` must be called from ONE thread, the host's (pmd's loop thread).
//     Not thread-safe otherwise. start() may run on another thread (e.g. beside the host's other
//     start-up work) if the server is handed over only once it returned. register_job, rank_env
//     and deregister_job block the host thread while PMIx's progress thread does the work
//     (measured: 1-4 ms per job, 0.03-0.2 ms per rank, 2-20 ms; more on a loaded machine:
//     docs/pmix.md), at most answer_bound each: then they throw (deregister_job gives up).
//   - PMIx calls us ("upcalls") on its own progress thread. We never run host code there: each
//     upcall copies its arguments into a queue, makes event_fd() readable and returns at once.
//     The host polls event_fd() and calls run_pending(), which runs the `callbacks` on the host
//     thread. No callback ever runs on another thread, and none runs outside run_pending().
//     A callback may call the server's members (register a job, ...), but must not destroy the
//     server; an exception it throws leaves run_pending(), and the requests queued behind it
//     complete with status::error.
//   - `completion`, `data_completion`, `query_completion`, `spawn_completion` and
//     `lookup_completion` objects (in every request) may be called from any thread, exactly once,
//     but not concurrently with stop(). One that is destroyed without being called completes with
//     status::error, so a rank or a tool never waits for ever on an answer the host forgot. After
//     stop() they do nothing.
//   - Signals: start() blocks every signal in the calling thread while libpmix creates its
//     threads, so those threads inherit a full mask and never take a process-directed signal (a
//     SIGTERM or SIGCHLD meant for the host's signalfd cannot be lost to them). The host's own
//     mask is restored before start() returns and is left as the host chose. Children spawned by
//     the host must get an empty mask before exec (pm::sys::spawn does that).
//
// Files: start() creates a private 0700 directory (<tmp_root>/pm-pmix.<pid>.XXXXXX); PMIx uses
// its subdirectory "pmix" as server and system tmpdir (rendezvous files, its shared-memory data
// store, the shared topology), and each job gets a subdirectory that Open MPI uses as its session
// directory. A second private directory on /dev/shm holds Open MPI's shared-memory segments per
// job. deregister_job removes a job's directories, stop() the private ones: nothing is left in
// /tmp or /dev/shm, also after an abort or a SIGKILL of the ranks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "pm/notice.hpp"

namespace pm {
class rank_map;
}
namespace pm::link {
struct pmix_job;
}

namespace pm::agent::pmix {

/// PMIx's wildcard rank ("every rank of the namespace"), as in a fence's participant list.
inline constexpr std::uint32_t wildcard_rank = 0xfffffffeu;

/// A process as PMIx names it.
struct proc {
  std::string nspace;
  std::uint32_t rank = 0;  ///< or wildcard_rank
  friend bool operator==(const proc&, const proc&) = default;
};

/// How the host answers a request.
enum class status {
  success,
  error,
  not_supported,
  not_found,
  unreachable,
  timeout,
  partial_success,  ///< a query: some of the keys were answered (PMIX_QUERY_PARTIAL_SUCCESS)
};

/// One PMIx request's answer. Move-only; call it once (see the thread rules at the top).
class completion {
 public:
  completion() = default;
  explicit completion(std::function<void(status)> fn) : fn_(std::move(fn)) {}
  completion(completion&&) noexcept = default;
  completion& operator=(completion&& other) noexcept;
  ~completion();
  void operator()(status s = status::success);
  /// True until called (or moved from).
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

 private:
  std::function<void(status)> fn_;
};

/// A fence's or a direct modex's answer: the status and the bytes to hand to PMIx (copied).
class data_completion {
 public:
  data_completion() = default;
  explicit data_completion(std::function<void(status, std::vector<char>)> fn)
      : fn_(std::move(fn)) {}
  data_completion(data_completion&&) noexcept = default;
  data_completion& operator=(data_completion&& other) noexcept;
  ~data_completion();
  void operator()(status s, std::vector<char> data = {});
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

 private:
  std::function<void(status, std::vector<char>)> fn_;
};

/// A local rank called PMIx_Abort / MPI_Abort. It stays blocked until `release` is called:
/// end the targets first (SIGTERM to their groups...), then release it, and it exits.
struct abort_request {
  proc caller;
  int exit_status = 0;  ///< MPI_Abort's errorcode
  std::string message;
  std::vector<proc> targets;  ///< empty: the caller's whole namespace
  completion release;
};

/// The host's part of a fence whose participants live on other hosts too (PMIx completes a
/// fence among local ranks alone without asking). Every participating host's server contributes
/// `data`; with `collect`, `done` gets the contributions of every host concatenated in node order
/// (the same bytes on every host), otherwise empty bytes. A 0-byte contribution still counts: it
/// is a barrier. Open MPI ignores a failed fence's status: after a failure the host must end the
/// job itself.
struct fence_request {
  std::vector<proc> participants;  ///< may hold wildcard ranks
  bool collect = false;            ///< PMIX_COLLECT_DATA was given
  std::vector<char> data;          ///< this host's contribution
  data_completion done;
};

/// A local rank asks for the published data of a rank this host does not serve: forward it to
/// that rank's host, which answers with its server's modex blob.
struct modex_request {
  proc target;
  data_completion done;
};

/// The query keys a host answers (PMIx's names, checked against pmix_common.h where libpmix is
/// compiled in): pmd answers them without including PMIx's headers.
namespace query_keys {
inline constexpr const char* namespaces = "pmix.qry.ns";             ///< PMIX_QUERY_NAMESPACES
inline constexpr const char* namespace_info = "pmix.qry.nsinfo";     ///< PMIX_QUERY_NAMESPACE_INFO
inline constexpr const char* proc_table = "pmix.qry.ptable";         ///< PMIX_QUERY_PROC_TABLE
inline constexpr const char* local_proc_table = "pmix.qry.lptable";  ///< ..._LOCAL_PROC_TABLE
inline constexpr const char* job_size = "pmix.job.size";             ///< PMIX_JOB_SIZE
inline constexpr const char* num_psets = "pmix.qry.psetnum";         ///< PMIX_QUERY_NUM_PSETS
inline constexpr const char* pset_names = "pmix.qry.psets";          ///< PMIX_QUERY_PSET_NAMES
inline constexpr const char* spawn_support = "pmix.qry.spawn";       ///< PMIX_QUERY_SPAWN_SUPPORT
inline constexpr const char* debug_support = "pmix.qry.debug";       ///< PMIX_QUERY_DEBUG_SUPPORT
inline constexpr const char* supported_keys = "pmix.qry.keys";       ///< PMIX_QUERY_SUPPORTED_KEYS
}  // namespace query_keys

/// A process's state as a tool is told (PMIx's pmix_proc_state_t, the values a host uses).
enum class proc_state : std::uint8_t {
  undefined,         ///< not started yet
  running,           ///< started, not ended
  terminated,        ///< ended by itself with code 0
  exited_nonzero,    ///< ended by itself with another code
  killed_by_signal,  ///< ended by a signal it was not sent by the job
  killed_by_cmd,     ///< ended by the job's abort (the launcher's stop sequence)
  failed_to_start,   ///< could not be started
  comm_lost,         ///< its host was lost
};

/// One process of a job as a tool sees it (pmix_proc_info_t).
struct proc_entry {
  proc who;
  std::string hostname;
  std::string executable;  ///< argv[0] as the user gave it
  std::int64_t pid = 0;    ///< 0: not started (or not known)
  int exit_code = 0;       ///< its code, or 128 + the signal
  proc_state state = proc_state::undefined;
  friend bool operator==(const proc_entry&, const proc_entry&) = default;
};

/// One answer to a tool's query: the key asked (PMIX_QUERY_PROC_TABLE, ...) and its value.
struct query_value {
  std::string key;
  /// A string, a uint32 (job size), a size_t (counts), a bool, or a process table.
  std::variant<std::string, std::uint32_t, std::size_t, bool, std::vector<proc_entry>> value;
};

/// A tool's query's answer: the status and the values (copied into PMIx's form).
class query_completion {
 public:
  query_completion() = default;
  explicit query_completion(std::function<void(status, std::vector<query_value>)> fn)
      : fn_(std::move(fn)) {}
  query_completion(query_completion&&) noexcept = default;
  query_completion& operator=(query_completion&& other) noexcept;
  ~query_completion();
  void operator()(status s, std::vector<query_value> values = {});
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

 private:
  std::function<void(status, std::vector<query_value>)> fn_;
};

/// One pmix_query_t of a tool's (or a rank's) PMIx_Query_info: the keys asked and the
/// qualifiers the host understands.
struct query {
  std::vector<std::string> keys;
  std::optional<std::string> nspace;    ///< PMIX_NSPACE qualifier
  std::optional<std::uint32_t> rank;    ///< PMIX_RANK qualifier
  std::optional<std::string> hostname;  ///< PMIX_HOSTNAME qualifier
};

/// PMIx_Query_info that PMIx could not answer from its own data. Answer with one query_value per
/// key that has an answer (in the order asked); status::not_found when none has one,
/// status::not_supported when no key is one the host knows. `done` unanswered: status::error.
struct query_request {
  proc requester;
  std::vector<query> queries;
  query_completion done;
};
/// One app of a PMIx_Spawn (MPI_Comm_spawn's command).
struct spawn_app {
  /// The command and its arguments (argv[0] = pmix_app_t.cmd as given).
  std::vector<std::string> argv;
  /// "NAME=value" the app's ranks get on top of the job's (OMPI_PARENT_PORT, ...).
  std::vector<std::string> env;
  std::string wdir;             ///< pmix_app_t.cwd or the PMIX_WDIR info; "" none
  std::uint32_t max_procs = 0;  ///< maxprocs
  /// PMIX_HOST (comma-separated, app or job info; the app's wins); empty: anywhere.
  std::vector<std::string> hosts;
};

/// A spawn's answer: the status and the new namespace (copied).
class spawn_completion {
 public:
  spawn_completion() = default;
  explicit spawn_completion(std::function<void(status, std::string)> fn) : fn_(std::move(fn)) {}
  spawn_completion(spawn_completion&&) noexcept = default;
  spawn_completion& operator=(spawn_completion&& other) noexcept;
  ~spawn_completion();
  void operator()(status s, std::string nspace = {});
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

 private:
  std::function<void(status, std::string)> fn_;
};

/// A local rank (or a tool) called PMIx_Spawn: map and start the apps as a new namespace,
/// register it (register_job) on every host of either job BEFORE answering, then answer with
/// the new namespace. Directives the host does not honour are ignored: every app and job info
/// but PMIX_WDIR and PMIX_HOST (Open MPI 4.1 also sends PMIX_PERSONALITY, PMIX_PREFIX, mapping
/// and binding directives).
struct spawn_request {
  proc requester;
  std::vector<spawn_app> apps;
  spawn_completion done;
};

/// PMIx_Publish: data to keep for PMIx_Lookup by any process of the session. The value is
/// opaque to the host: PMIx_Data_pack'ed pmix_value_t bytes the server unpacks again.
struct published_value {
  std::string key;
  std::vector<char> value;
};
/// Directives (PMIX_RANGE, PMIX_PERSISTENCE, PMIX_USERID, ...: keys that start with "pmix") are
/// not data and are not handed over: the host keeps the values for the whole session.
struct publish_request {
  proc publisher;
  std::vector<published_value> values;
  completion done;
};

/// One value a lookup found: the key, who published it, the bytes it published.
struct found_value {
  std::string key;
  proc publisher;
  std::vector<char> value;
};

/// A lookup's answer: the status and the values found (copied; PMIx unpacks them).
class lookup_completion {
 public:
  lookup_completion() = default;
  explicit lookup_completion(std::function<void(status, std::vector<found_value>)> fn)
      : fn_(std::move(fn)) {}
  lookup_completion(lookup_completion&&) noexcept = default;
  lookup_completion& operator=(lookup_completion&& other) noexcept;
  ~lookup_completion();
  void operator()(status s, std::vector<found_value> values = {});
  explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

 private:
  std::function<void(status, std::vector<found_value>)> fn_;
};

/// PMIx_Lookup. `wait`: PMIX_WAIT was given (answer only once every key is published; the
/// host must hold the request, Open MPI's connect/accept relies on it); `timeout_s`: PMIX_TIMEOUT
/// seconds, 0 none (then answer status::timeout). Without `wait`: status::not_found when a key
/// is not published (PMIx's clients want every key they asked for).
struct lookup_request {
  proc requester;
  std::vector<std::string> keys;
  bool wait = false;
  std::uint32_t timeout_s = 0;
  lookup_completion done;
};

/// PMIx_Unpublish: forget these keys of the requester's (empty: all of them).
struct unpublish_request {
  proc requester;
  std::vector<std::string> keys;
  completion done;
};

/// PMIx_Connect / PMIx_Disconnect whose participants are not all local (PMIx completes a
/// local one alone): answer once every participant's host has called it (a collective like a
/// fence without data). Participants may hold wildcard ranks and several namespaces. PMIx
/// counts a namespace as local only when it is registered here with all its ranks local: one
/// registered with node_index no_node (or not at all) sends the call to the host.
struct connect_request {
  std::vector<proc> participants;
  completion done;
};

/// What this host's ranks of `nspace` are told (server::notify): another rank failed, or the job
/// is being ended; the launcher decides, where the abort policy is off (docs/pmix.md, "Events").
struct event_notice {
  std::string nspace;
  pm::notice_kind kind = pm::notice_kind::rank_exited;
  std::vector<std::uint32_t> ranks;  ///< the affected ranks (empty: the job ends without one)
  int code = 0;                      ///< pm/notice.hpp: exit code, signal, status
  std::string host;                  ///< the affected ranks' host ("" for none)
  std::string text;                  ///< the launcher's line
};

/// The PMIx event code a notice is sent with (PMIX_ERR_EXIT_NONZERO_TERM, ...: docs/pmix.md).
int event_code(pm::notice_kind kind) noexcept;

/// What the host wants to hear about. Each runs on the host thread, inside run_pending().
struct callbacks {
  std::function<void(const proc&)> client_connected;  ///< PMIx_Init of a rank (e.g. MPI_Init)
  std::function<void(const proc&)> client_finalized;  ///< its PMIx_Finalize
  /// Unset: the caller is released at once (it then exits with its status).
  std::function<void(abort_request)> abort;
  /// Unset: the fence fails with status::not_supported (one host does not need it).
  std::function<void(fence_request)> fence;
  /// Unset: the request fails with status::not_found.
  std::function<void(modex_request)> direct_modex;
  /// Unset: queries fail with status::not_supported.
  std::function<void(query_request)> query;
  /// Unset (each of the six): the request fails with status::not_supported at once.
  std::function<void(spawn_request)> spawn;
  std::function<void(publish_request)> publish;
  std::function<void(lookup_request)> lookup;
  std::function<void(unpublish_request)> unpublish;
  std::function<void(connect_request)> connect;
  std::function<void(connect_request)> disconnect;
};

struct options {
  /// This host's name for PMIx (PMIX_HOSTNAME); empty: gethostname(). Must equal the name the
  /// job's node list gives this host.
  std::string hostname;
  /// Where the private directory is made; empty: $TMPDIR, else /tmp. Unix socket paths are
  /// limited to 107 bytes: keep it short.
  std::string tmp_root;
  /// A private directory (0700) the host made already, to use instead of making one (pmd makes
  /// it before the server starts, to tell the ranks where it will be). Removed by stop().
  std::string dir;
  /// Likewise for the shared-memory segments (with `dir`; empty: in the job's directory).
  std::string shm_dir;
  /// Where the private directory for Open MPI's shared-memory segments is made; empty:
  /// /dev/shm; "none" (or when it cannot be made): they go into the job's directory.
  std::string shm_root;
  /// Accept PMIx tools (rendezvous files in the private directory).
  bool tool_support = true;
  /// Share the server's hwloc topology with the ranks (without it every rank discovers it again
  /// and MPI_Init gets slower).
  bool share_topology = true;
  /// Where the server takes its connections instead of the TCP port libpmix 4.2.2 listens on,
  /// which every local user reaches (docs/pmix.md, "Who reaches the server"): a Unix socket path
  /// in a private (0700) directory, at most 107 bytes ("/proc/self/fd/N/name" names one in a
  /// directory held open). Right after PMIx_server_init the server's listening socket is
  /// replaced by one listening here (dup2 over its descriptor), the TCP port is shut, and every
  /// connection it took meanwhile is shut too; a tool that connected meanwhile is named
  /// "pm-untrusted.*" and refused whatever it asks. start() throws if that cannot be done.
  /// Empty: the server stays on its TCP port and serves whoever connects (tests that connect
  /// their ranks straight to it; pmd always gives a path and relays the ranks' connections).
  std::string listener_path;
  /// With listener_path: the address ("tcp4://127.0.0.1:PORT", pmd's relay) that the rendezvous
  /// files PMIx writes for tools in its tmpdir give instead of the server's shut TCP port.
  std::string tool_address;
  /// With tool_address: the pid a tool names with PMIX_SERVER_PIDINFO, when the server runs in
  /// another process than the agent users see (pmd-helper for pmd): each rendezvous file PMIx
  /// wrote under the server's own pid is written under this one as well. 0: none.
  std::int64_t agent_pid = 0;
  callbacks on;
};

/// How long the host thread waits for libpmix to answer a call that completes on PMIx's progress
/// thread (register_job, rank_env, deregister_job, start's confinement): a progress thread that
/// is stuck gives the host an error line, never a wait for ever.
inline constexpr std::chrono::seconds answer_bound{10};

/// One rank of the job as every rank of it is told.
struct rank_info {
  std::uint32_t app = 0;         ///< app context index (MPI_APPNUM)
  std::uint32_t node = 0;        ///< index into job_info::node_names
  std::uint16_t local_rank = 0;  ///< among the job's ranks on its node, by global rank
  std::uint16_t node_rank = 0;   ///< among all jobs' ranks on its node (= local_rank for one job)
  /// A rank of this node bound at launch: its cpus as a list ("0-1,4"); the server registers its
  /// PMIX_CPUSET and PMIX_LOCALITY_STRING. Empty: not bound (or not this node's).
  std::string cpus = {};
  friend bool operator==(const rank_info&, const rank_info&) = default;
};

/// job_info::node_index of a host that runs none of the job's ranks but must know the
/// namespace (a parent job's host knows its spawned children's, and they the parent's, for
/// connect and the modex).
inline constexpr std::uint32_t no_node = 0xffffffffu;

/// A job (a PMIx namespace) as seen from one of its nodes. The same for every node of the job
/// except node_index. Sizes, the ranks on each node, app sizes and leaders are derived from
/// `ranks`.
struct job_info {
  std::string nspace;                   ///< [A-Za-z0-9._-], at most 200 bytes; unique per launch
  std::uint32_t universe_size = 0;      ///< MPI_UNIVERSE_SIZE (slots); at least the job size
  std::uint32_t node_index = 0;         ///< this host, an index into node_names, or no_node
  std::vector<std::string> node_names;  ///< every node the job uses, in node order
  std::vector<rank_info> ranks;         ///< index = global rank
  bool spawned = false;                 ///< started by PMIx_Spawn (PMIX_SPAWNED)
  std::optional<proc> parent;           ///< who called PMIx_Spawn (PMIX_PARENT_ID)
};

/// The job as node `node_index` sees it, from libpm's rank map: nodes named as the allocation
/// names them, local and node ranks from the map, universe = the allocation's slots.
job_info make_job_info(const pm::rank_map& map, std::string nspace, std::uint32_t node_index);

/// The job as the agent link carries it (link::pmix_job), and back. The link does not carry
/// `spawned` and `parent` (yet): job_info_of leaves them at their defaults.
job_info job_info_of(const pm::link::pmix_job& facts);
pm::link::pmix_job pmix_job_of(const job_info& job);

/// Throws pm::error(errc::usage) naming the first problem (bad namespace, a node or app index
/// out of range, an unused app, duplicate local ranks on a node, no nodes, no ranks).
void check_job_info(const job_info& job);

class server {
 public:
  /// PMIx_server_init (about 20 ms with the shared topology, docs/pmix.md): creates the private
  /// directory, starts PMIx's threads with every signal blocked. Throws pm::error(errc::system)
  /// with one line when PMIx or the directory fails, or when this process started one before.
  static std::unique_ptr<server> start(options opts);

  ~server();  ///< stop()
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Readable when upcalls are queued: add it to the host's poll set (level-triggered), and
  /// call run_pending() when it is readable.
  int event_fd() const noexcept;
  /// Runs the queued upcalls' callbacks on this thread; returns how many ran.
  std::size_t run_pending();

  /// PMIx_server_setup_application, _register_nspace (job, node, app and per-rank info for every
  /// rank of the job, node and proc maps), _setup_local_support; creates the job's directory.
  /// With node_index no_node the namespace is registered with no local ranks and without this
  /// node's keys (a spawned job's parent host, or the children's for the parent): rank_env
  /// refuses every rank then. Throws pm::error (usage for bad job info, system for PMIx
  /// failures).
  void register_job(const job_info& job);
  /// The variables to add to local rank `rank`'s environment ("NAME=value"; they win over
  /// anything of the same name): PMIx's (PMIx_server_register_client + _setup_fork:
  /// PMIX_NAMESPACE, PMIX_RANK, the server URIs, ...) and what Open MPI 4.1 needs for a direct
  /// launch (OMPI_MCA_schizo=^orte, OMPI_MCA_ess=pmi, OMPI_MCA_orte_tmpdir_base=<job dir>).
  /// Call it for each local rank before spawning that rank. Throws pm::error.
  std::vector<std::string> rank_env(const std::string& nspace, std::uint32_t rank);
  /// The modex data of local rank `target` (PMIx_server_dmodex_request), for a request another
  /// host's server made (its direct_modex upcall, forwarded by the launcher). PMIx answers once
  /// the rank has committed its data; `done` then runs on the host thread, inside
  /// run_pending(), with the bytes to hand to the asking server (or a failure status).
  void local_modex(const proc& target, std::function<void(status, std::vector<char>)> done);
  /// PMIx_Notify_event to this host's ranks of the notice's namespace that registered a handler
  /// for its code (range namespace; never to default handlers: PMIX_EVENT_NON_DEFAULT, because
  /// Open MPI 4.1's default handler calls MPI_Abort on any event). Affected ranks, exit code,
  /// host and text travel as PMIX_EVENT_AFFECTED_PROC(S), PMIX_EXIT_CODE, PMIX_HOSTNAME and
  /// PMIX_EVENT_TEXT_MESSAGE. Returns at once (PMIx delivers on its progress thread, and keeps
  /// the event for ranks that register later). Throws pm::error when PMIx refuses it.
  void notify(const event_notice& notice);
  /// PMIx_server_deregister_nspace and removal of the job's directory. Unknown: nothing.
  void deregister_job(const std::string& nspace);
  /// Completes queued requests with status::error, finalizes PMIx (its threads end), removes
  /// the private directory. Idempotent; the destructor calls it.
  void stop();

  /// The private directory (0700). PMIx's server and system tmpdir is its subdirectory "pmix"
  /// (PMIx makes that one 0755), each job's directory is <tmpdir>/<nspace>.
  const std::string& tmpdir() const noexcept;
  /// The job's directory (Open MPI's session directory base), under tmpdir().
  std::string job_tmpdir(const std::string& nspace) const;
  /// How long PMIx_server_init took.
  std::chrono::nanoseconds init_time() const noexcept;
  /// Lines the host should show, once each: connections made to the server's TCP port before it
  /// was shut, tools that connected through it.
  std::vector<std::string> take_notices();

  struct impl;

 private:
  explicit server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace pm::agent::pmix
