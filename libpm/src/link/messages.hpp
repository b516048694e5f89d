// Control messages of the agent link (launcher <-> pmd), docs/agent-link.md.
//
// A control frame's body is a MessagePack map with a "type" string and the message's fields.
// Unknown extra fields are ignored (a newer peer may add some); a missing or mistyped field, an
// unknown type, nesting deeper than any message needs, or trailing bytes are a pm::error with one
// line. Output and stdin bytes do not travel as messages but as data frames (frame.hpp).
//
// Descriptors: over a link to an agent on this host (a Unix socket), a message may say that `fds`
// descriptors travel with it (SCM_RIGHTS, socket.hpp). Which message may carry how many:
//   spawn    0 or 1: the stdin the ranks with `stdin` read (required if any rank has it)
//   started  0..2 : the rank's output pipe read ends, stdout then stderr (1: merged; 0: none)
//   others   0
// Over any other link (ssh, TCP, the simulator) fds is always 0: output comes as data frames.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pm/exit_status.hpp"
#include "pm/notice.hpp"
#include "pm/output.hpp"

namespace pm::link {

/// Bumped on any incompatible change; both sides refuse a peer with another version.
// 3: magic, nonce, job setup, data frames; 4: PMIx (job facts, abort, fences); 5: the tree launch
// (child_open, child_data, child_close, child_closed); 6: PMIx tools (pmix_server,
// proc_table_request, proc_table_reply) and events (notify); 7: spawned jobs (job_add,
// pmix_spawn, pmix_spawn_reply) and the launcher's data store (pmix_publish, pmix_lookup,
// pmix_unpublish, pmix_data_reply)
inline constexpr std::uint32_t protocol_version = 7;

/// A pmix_job's `node` for a host that runs none of the job's ranks but must know the namespace
/// (the parents' hosts know their children's, and the other way round).
inline constexpr std::uint32_t no_node = 0xffffffffu;

// ---- both ways ----
/// First message each way, right after the magic. The nonce is the job's: the launcher hands it
/// to the agent when it starts it (its command line), and each side refuses a hello with another
/// nonce (a stray process, a stale agent). The agent adds what the launcher needs to know of its
/// host: its pid and name, addresses other hosts reach, and a TCP port free there (MASTER_PORT
/// when rank 0 runs there).
struct hello {
  std::uint32_t version = protocol_version;
  std::uint64_t nonce = 0;
  std::int64_t pid = 0;
  std::string hostname;            ///< the agent's: its gethostname()
  std::vector<std::string> addrs;  ///< the agent's: non-loopback addresses, the best first
  std::uint16_t port = 0;          ///< the agent's: a port free on addrs.front() (0: none)
  friend bool operator==(const hello&, const hello&) = default;
};
/// "Still here": lets a silent peer (a dead host, a cut link, which close no socket) be noticed.
struct heartbeat {
  friend bool operator==(const heartbeat&, const heartbeat&) = default;
};
/// Credit: the receiver consumed `bytes` of data frames (output toward the launcher, input toward
/// the agent), so the sender may send that much more (docs/agent-link.md, flow control).
struct ack {
  std::uint64_t bytes = 0;
  friend bool operator==(const ack&, const ack&) = default;
};

// ---- launcher -> agent ----
/// One app context as the agent needs it to start that app's ranks.
struct app_spec {
  std::vector<std::string> argv;  ///< argv[0] as the user gave it; the agent resolves it
  std::string wdir;               ///< empty: the agent's working directory
  std::vector<std::string> env;   ///< "NAME=value" the app's ranks get on top of everything
  friend bool operator==(const app_spec&, const app_spec&) = default;
};
/// What the agent's PMIx server tells the ranks about the whole job (docs/pmix.md): every rank's
/// node, app and local rank, so that each host registers the same namespace.
struct pmix_job {
  std::string nspace;                     ///< the job's PMIx namespace
  std::uint32_t universe = 0;             ///< MPI_UNIVERSE_SIZE: the allocation's slots
  std::uint32_t node = 0;                 ///< this host's index into `nodes`
  std::vector<std::string> nodes;         ///< the job's hosts in node order (as the map names them)
  std::vector<std::uint32_t> rank_node;   ///< per global rank: its index into `nodes`
  std::vector<std::uint32_t> rank_app;    ///< per global rank: its app context
  std::vector<std::uint32_t> rank_local;  ///< per global rank: its local rank on its node
  /// A spawned job (MPI_Comm_spawn): the namespace and rank that spawned it (PMIX_PARENT_ID);
  /// empty for the first job.
  std::string parent_nspace;
  std::uint32_t parent_rank = 0;
  friend bool operator==(const pmix_job&, const pmix_job&) = default;
};
/// Everything about the job the agent needs before the first spawn; sent once, after hello.
/// The agent composes each rank's environment on its own host: its own environment minus an outer
/// job's identity, plus `base` (the -mca exports), the rank's profile variables, `overrides` (-x),
/// its app's variables. The launcher's environment itself never crosses the link.
struct job_setup {
  std::uint32_t host = 0;          ///< this agent's host index in the allocation
  std::uint32_t grace_ms = 3000;   ///< the stop sequence: SIGTERM, this grace, SIGKILL
  std::uint32_t heartbeat_ms = 0;  ///< send a heartbeat this often (0: never)
  std::uint32_t silence_ms = 0;    ///< the launcher silent this long is lost (0: never)
  bool forward_output = true;      ///< false: output pipes travel as descriptors (local socket)
  std::uint8_t streams = 2;        ///< per rank: 2 stdout+stderr, 1 merged, 0 /dev/null
  /// The launcher's working directory: where an app without its own wdir runs, as mpirun does;
  /// a host that has no such directory runs it in the home directory instead.
  std::string cwd;
  std::vector<std::string> base;       ///< "NAME=value" added to the agent's own environment
  std::vector<std::string> overrides;  ///< "NAME=value" that win over the profile variables
  std::vector<app_spec> apps;
  std::optional<pmix_job> pmix;  ///< absent: no PMIx server for the ranks (--no-pmix)
  friend bool operator==(const job_setup&, const job_setup&) = default;
};
/// One rank to start.
struct rank_spec {
  std::uint32_t rank = 0;
  std::uint32_t app = 0;
  std::vector<std::string> env;      ///< the rank's profile variables ("NAME=value")
  bool stdin_from_launcher = false;  ///< local: the spawn's descriptor; remote: input frames
  friend bool operator==(const rank_spec&, const rank_spec&) = default;
};
struct spawn_request {
  std::vector<rank_spec> ranks;
  friend bool operator==(const spawn_request&, const spawn_request&) = default;
};
/// A rank's PMIx_Spawn (MPI_Comm_spawn) made a new job: sent to every agent before any of its
/// ranks is spawned. Its ranks are the launcher's processes first .. first + size - 1 (rank_spec
/// and every other message name them so), its apps the agent's apps first_app .. (rank_spec.app
/// counts on from the first job's apps). `pmix`: the job as this host's PMIx server registers it
/// (node no_node where it runs none of the job's ranks).
struct job_add {
  std::uint32_t job = 0;  ///< 1 for the first spawned job, 2 for the next, ...
  std::uint32_t first = 0;
  std::uint32_t first_app = 0;
  std::vector<app_spec> apps;
  std::optional<pmix_job> pmix;
  friend bool operator==(const job_add&, const job_add&) = default;
};
/// The answer to a pmix_spawn of the same id: the new job's namespace, or why there is none.
struct pmix_spawn_reply {
  std::uint64_t id = 0;
  bool ok = false;
  std::string nspace;
  std::string error;  ///< one line when !ok
  friend bool operator==(const pmix_spawn_reply&, const pmix_spawn_reply&) = default;
};
/// What the launcher's data store answers a pmix_publish, pmix_unpublish or pmix_lookup.
enum class data_status : std::uint8_t { ok, not_found, timeout, error };
/// One published value: its key, who published it (a process of the launcher's), the bytes
/// (PMIx's packed value, opaque to the launcher).
struct published_entry {
  std::string key;
  std::uint32_t rank = 0;
  std::string value;  ///< raw bytes
  friend bool operator==(const published_entry&, const published_entry&) = default;
};
std::string_view to_string(data_status s) noexcept;
std::optional<data_status> data_status_from(std::string_view text) noexcept;
struct pmix_data_reply {
  std::uint64_t id = 0;
  data_status status = data_status::ok;
  std::vector<published_entry> values;  ///< a lookup's finds, in the order asked
  friend bool operator==(const pmix_data_reply&, const pmix_data_reply&) = default;
};
/// Signal each listed rank's process group.
struct signal_request {
  std::vector<std::uint32_t> ranks;
  int signo = 0;
  friend bool operator==(const signal_request&, const signal_request&) = default;
};
/// No more stdin for this rank (its pipe is closed).
struct input_closed {
  std::uint32_t rank = 0;
  friend bool operator==(const input_closed&, const input_closed&) = default;
};
/// The launcher is being stopped (^Z) or continues: silence while suspended is not a loss.
struct suspend {
  friend bool operator==(const suspend&, const suspend&) = default;
};
struct resume {
  friend bool operator==(const resume&, const resume&) = default;
};
/// Which ranks take part in a fence: all of the job's (PMIx's wildcard), or the listed ones.
struct fence_members {
  bool all = true;
  std::vector<std::uint32_t> ranks;  ///< sorted; empty when `all`
  friend bool operator==(const fence_members&, const fence_members&) = default;
  friend auto operator<=>(const fence_members&, const fence_members&) = default;
};
/// A fence that spans hosts is complete: every participating host's contribution, concatenated
/// in node order (`ok` false: it failed and the job ends; data is then empty).
struct fence_result {
  fence_members members;
  std::uint64_t seq = 0;  ///< the agent's count of fences with these members, from 0
  bool ok = true;
  std::string data;  ///< raw bytes
  friend bool operator==(const fence_result&, const fence_result&) = default;
};
/// Direct modex (both ways): an agent asks for the PMIx data of a rank on another host; the
/// launcher forwards it to that rank's agent under an id of its own. `id` names the request on
/// the link it travels.
struct modex_request {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  friend bool operator==(const modex_request&, const modex_request&) = default;
};
/// The answer to a modex_request of the same id (found false: the rank has no data, or its host
/// could not give it).
struct modex_reply {
  std::uint64_t id = 0;
  bool found = false;
  std::string data;  ///< raw bytes
  friend bool operator==(const modex_reply&, const modex_reply&) = default;
};
/// Where the abort policy is off: other ranks of the job failed, or the job is being ended
/// (the controller's notify_ranks). The agent's PMIx server tells its ranks with a PMIx event
/// (docs/pmix.md, "Events"); an agent whose server did not start yet keeps it for the server.
struct pmix_notify {
  notice_kind kind = notice_kind::rank_exited;
  std::vector<std::uint32_t> ranks;  ///< the affected ranks (empty: the job ends without one)
  int code = 0;                      ///< pm/notice.hpp: exit code, signal, status
  std::string host;                  ///< the affected ranks' host ("" for none)
  std::string text;  ///< the launcher's line, e.g. "rank 1 on node2 exited with code 7"
  friend bool operator==(const pmix_notify&, const pmix_notify&) = default;
};
/// The job is over: kill whatever is left of the ranks and their descendants, then exit.
struct shutdown_request {
  friend bool operator==(const shutdown_request&, const shutdown_request&) = default;
};

// ---- the tree launch (docs/multihost.md, "The tree launch") ----
/// Launcher -> agent: run `argv` (the complete ssh command line the launcher built for host
/// `host`, whose plan parent this agent is) and relay its stdin and stdout as child_data.
struct child_open {
  std::uint32_t host = 0;
  std::vector<std::string> argv;
  friend bool operator==(const child_open&, const child_open&) = default;
};
/// Both ways: bytes of the byte stream between the launcher and the agent of `host` (a link of
/// its own, relayed unread: launcher -> agent goes to the child's stdin, agent -> launcher came
/// from its stdout).
struct child_data {
  std::uint32_t host = 0;
  std::string bytes;  ///< raw bytes
  friend bool operator==(const child_data&, const child_data&) = default;
};
/// Launcher -> agent: the link of `host` is over: close its stdin and end what carries it.
struct child_close {
  std::uint32_t host = 0;
  friend bool operator==(const child_close&, const child_close&) = default;
};
/// Agent -> launcher: what carried the link of `host` ended (every child_data of it came first).
struct child_closed {
  std::uint32_t host = 0;
  int code = 0;      ///< its exit code, or -1 when killed by `signo`
  int signo = 0;     ///< the signal that killed it (0: it exited)
  std::string said;  ///< the last line it printed on stderr ("Connection refused"), may be empty
  friend bool operator==(const child_closed&, const child_closed&) = default;
};

// ---- agent -> launcher ----
struct started {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;
  friend bool operator==(const started&, const started&) = default;
};
struct spawn_failed {
  std::uint32_t rank = 0;
  int code = 127;      ///< shell-style: 127 not found, 126 not executable
  std::string reason;  ///< one line
  friend bool operator==(const spawn_failed&, const spawn_failed&) = default;
};
struct exited {
  std::uint32_t rank = 0;
  exit_status status;
  friend bool operator==(const exited&, const exited&) = default;
};
/// A forwarded output stream reached end-of-stream after `bytes` bytes (every output frame of it
/// was sent before this message).
struct stream_closed {
  std::uint32_t rank = 0;
  output_stream stream = output_stream::out;
  std::uint64_t bytes = 0;
  friend bool operator==(const stream_closed&, const stream_closed&) = default;
};
/// A rank called PMIx_Abort (MPI_Abort): the job ends with `status`. The caller stays blocked
/// until the launcher signals it (it then ends with the rest of the job).
struct pmix_abort {
  std::uint32_t rank = 0;
  int status = 1;
  std::string message;
  friend bool operator==(const pmix_abort&, const pmix_abort&) = default;
};
/// A rank that connected to PMIx (MPI_Init) ended without PMIx_Finalize, by an exit or a signal:
/// its peers may wait for it in their next fence for ever, so the job ends (as under mpirun), even
/// where the abort policy is off. Encoded as `exited` is: exactly one of `code` and `signal`.
struct pmix_unfinalized {
  std::uint32_t rank = 0;
  exit_status status;
  friend bool operator==(const pmix_unfinalized&, const pmix_unfinalized&) = default;
};
/// This host's part of a fence among ranks of several hosts (PMIx completes fences among local
/// ranks by itself). The launcher answers every participating host with one fence_result.
struct fence_contribution {
  fence_members members;
  std::uint64_t seq = 0;
  bool collect = false;  ///< PMIX_COLLECT_DATA: the result carries everyone's data
  std::string data;      ///< raw bytes (a 0-byte contribution still counts: a barrier)
  friend bool operator==(const fence_contribution&, const fence_contribution&) = default;
};
/// Where this host's PMIx server is for a PMIx tool on the same host (docs/pmix.md, "Tools"):
/// sent once, when the agent set up its ranks' server (which starts at the first connection, a
/// tool's too). The launcher shows it in `pmrun --ps`.
struct pmix_server {
  std::string uri;     ///< PMIX_SERVER_URI: "pmix-server.<pid>;tcp4://127.0.0.1:<port>"
  std::string tmpdir;  ///< PMIx's server tmpdir (rendezvous files once the server runs)
  friend bool operator==(const pmix_server&, const pmix_server&) = default;
};
/// A PMIx tool asked this host's server for the whole job's process table: the launcher, which
/// knows every rank, answers with a proc_table_reply of the same id.
struct proc_table_request {
  std::uint64_t id = 0;
  friend bool operator==(const proc_table_request&, const proc_table_request&) = default;
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
};
/// Launcher -> agent: every rank of the job, by rank.
struct proc_table_reply {
  std::uint64_t id = 0;
  std::vector<proc_table_entry> ranks;
  friend bool operator==(const proc_table_reply&, const proc_table_reply&) = default;
};
/// One app of a PMIx_Spawn as the rank asked for it.
struct spawn_app_spec {
  std::vector<std::string> argv;
  std::vector<std::string> env;    ///< "NAME=value" (Open MPI's OMPI_PARENT_PORT, ...)
  std::string wdir;                ///< "" none
  std::uint32_t np = 0;            ///< maxprocs
  std::vector<std::string> hosts;  ///< PMIX_HOST: only these hosts (empty: any)
  friend bool operator==(const spawn_app_spec&, const spawn_app_spec&) = default;
};
/// A local rank or a PMIx tool attached to the agent called PMIx_Spawn: the launcher maps the
/// apps on free slots, sends job_add to every agent, spawns the ranks and answers with a
/// pmix_spawn_reply of the same id.
struct pmix_spawn {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;  ///< the caller: its process number, or its rank in `tool`
  std::vector<spawn_app_spec> apps;
  std::string tool;  ///< "" a rank asks; else the asking tool's namespace
  friend bool operator==(const pmix_spawn&, const pmix_spawn&) = default;
};
/// PMIx_Publish of a local rank: kept by the launcher for lookups from any job of the launch.
struct pmix_publish {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<published_entry> values;  ///< entries' rank is ignored (the publisher is `rank`)
  friend bool operator==(const pmix_publish&, const pmix_publish&) = default;
};
/// PMIx_Lookup of a local rank; `wait`: answer once every key is there (or after timeout_s,
/// 0: never).
struct pmix_lookup {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<std::string> keys;
  bool wait = false;
  std::uint32_t timeout_s = 0;
  friend bool operator==(const pmix_lookup&, const pmix_lookup&) = default;
};
struct pmix_unpublish {
  std::uint64_t id = 0;
  std::uint32_t rank = 0;
  std::vector<std::string> keys;
  friend bool operator==(const pmix_unpublish&, const pmix_unpublish&) = default;
};
/// Everything is cleared; the agent exits right after.
struct shutdown_done {
  friend bool operator==(const shutdown_done&, const shutdown_done&) = default;
};
/// A line for the user from the agent that is not a failure of the agent (its PMIx server
/// could not start, ...): the launcher shows it with the host's name.
struct agent_notice {
  std::string text;
  friend bool operator==(const agent_notice&, const agent_notice&) = default;
};
/// The agent gives up (bad message, version mismatch); it clears everything and exits.
struct agent_error {
  std::string text;
  friend bool operator==(const agent_error&, const agent_error&) = default;
};

using message =
    std::variant<hello, heartbeat, ack, job_setup, spawn_request, signal_request, input_closed,
                 suspend, resume, shutdown_request, started, spawn_failed, exited, stream_closed,
                 shutdown_done, agent_error, fence_result, pmix_abort, fence_contribution,
                 modex_request, modex_reply, pmix_unfinalized, agent_notice, child_open, child_data,
                 child_close, child_closed, pmix_server, proc_table_request, proc_table_reply,
                 pmix_notify, job_add, pmix_spawn_reply, pmix_data_reply, pmix_spawn, pmix_publish,
                 pmix_lookup, pmix_unpublish>;

/// Which side may send a message.
enum class sender : std::uint8_t { launcher, agent, either };
sender sent_by(const message& m) noexcept;

/// A decoded message and the number of descriptors that travel with it.
struct envelope {
  message msg;
  std::uint32_t fds = 0;
  friend bool operator==(const envelope&, const envelope&) = default;
};

/// The wire name of a message type ("spawn", "exited", ...).
std::string_view type_name(const message& m) noexcept;

/// The MessagePack body of a message. Throws pm::error if `fds` is not allowed for its type.
std::vector<std::uint8_t> encode(const message& m, std::uint32_t fds = 0);
/// Appends the framed message to `out`.
void append_message(std::vector<std::uint8_t>& out, const message& m, std::uint32_t fds = 0);
/// Decodes one control frame body. Throws pm::error naming the problem.
envelope decode(std::span<const std::uint8_t> body);
/// The reference decoder: nlohmann's MessagePack reader into a document, then strict field checks.
/// decode() reads well-formed bodies directly (no document: ~20x faster) and falls back to this
/// one for anything else, so that both accept the same bodies and every error reads the same;
/// tests compare the two.
envelope decode_reference(std::span<const std::uint8_t> body);

}  // namespace pm::link
