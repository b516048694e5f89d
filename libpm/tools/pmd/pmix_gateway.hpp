// pmd's PMIx side (docs/pmix.md): the PMIx server of this host's ranks, started only when one of
// them connects.
//
// When the job's setup says the ranks get PMIx, the gateway names the private directories and
// listens on 127.0.0.1; each rank is told at exec where its server is (predicted_env.hpp). A job
// that never calls PMIx costs a socket. The first connection of the job's owner that sends a
// whole PMIx handshake loads libpm-pmix.so (pmd does not link libpmix), makes the directories,
// starts the server (about 20 ms) on a Unix socket in the private directory instead of libpmix's
// TCP port, registers the job and every local rank; every connection is relayed there
// (tcp_relay.hpp: the owner check, the handshake buffering).
//
// What the server cannot answer alone goes to the launcher through `hooks`: an abort, and the
// fences that span hosts (the launcher gathers every host's part and answers each with one
// fence_result). Everything runs on pmd's thread: the gateway's descriptors are in an epoll set
// of its own, which pmd watches as one descriptor (fd()) and serves with on_ready().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/pmix/pmix_module.hpp"
#include "agent/pmix/predicted_env.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"
#include "tcp_relay.hpp"

namespace pmd {

class pmix_gateway {
 public:
  struct hooks {
    /// A rank called PMIx_Abort: end the job with `status`; release_abort() when done.
    std::function<void(std::uint32_t rank, int status, const std::string& message)> abort;
    /// This host's part of a fence among ranks of several hosts.
    std::function<void(pm::link::fence_contribution)> fence;
    /// A direct modex for a rank of another host (ask), or the answer to one asked of this host.
    std::function<void(pm::link::modex_request)> modex_ask;
    std::function<void(pm::link::modex_reply)> modex_answer;
    /// Something the user should read (a server that cannot start, ...): one line.
    std::function<void(const std::string& line)> notice;
    /// A tool asked for the whole job's process table: ask the launcher (proc_table_done).
    std::function<void(pm::link::proc_table_request)> proc_table;
    /// A rank's PMIx_Spawn, PMIx_Publish, PMIx_Lookup, PMIx_Unpublish: the launcher decides
    /// (spawn_done, data_done).
    std::function<void(pm::link::pmix_spawn)> spawn;
    std::function<void(pm::link::pmix_publish)> publish;
    std::function<void(pm::link::pmix_lookup)> lookup;
    std::function<void(pm::link::pmix_unpublish)> unpublish;
  };

  /// Makes the private directories and the listener; throws pm::error naming what failed.
  /// `executables`: each app's argv[0], as a tool's process table names them.
  pmix_gateway(const pm::link::pmix_job& job, std::vector<std::string> executables, hooks h);
  /// stop() unless it ran (its result ignored: pmd calls stop() itself).
  ~pmix_gateway();
  /// pmd's end: closes every relayed connection, fails what is pending and removes the
  /// directories. The server itself (if it started) is not finalized: libpmix 4.2.2's
  /// PMIx_server_finalize has deadlocked (issue 20) and crashed (SIGSEGV inside it, and heap
  /// corruption, in about one in 30 runs of PmrunMpi.APmixToolSeesTheJobsRanksAndSpawns), and at
  /// pmd's end it would release nothing the process's exit does not (PMIx's files are in the
  /// directories removed here; its sockets and threads go with the process). Returns false when
  /// the server ran: its threads still do, so the process must end with std::_Exit (static
  /// destructors and libpmix's atexit handlers would meet them).
  bool stop();
  pmix_gateway(const pmix_gateway&) = delete;
  pmix_gateway& operator=(const pmix_gateway&) = delete;

  /// Readable when the gateway has work: call on_ready().
  int fd() const noexcept { return epoll_.get(); }
  void on_ready();

  /// What local process `rank` (a rank of the first job, or of a spawned one: the launcher's
  /// numbering) gets in its environment ("NAME=value", winning over the job's).
  std::vector<std::string> rank_env(std::uint32_t rank) const;
  /// A job a rank spawned: its namespace is registered with the server (now, or when it starts),
  /// and so are its ranks on this host.
  void add_job(const pm::link::job_add& job);
  /// The launcher's answers to spawn, publish, lookup and unpublish requests.
  void spawn_done(const pm::link::pmix_spawn_reply& reply);
  void data_done(const pm::link::pmix_data_reply& reply);
  /// More of this host's ranks than cores: Open MPI should yield when idle (mpirun sets it too).
  bool oversubscribed() const noexcept { return oversubscribed_; }
  /// No RDMA device on this host (no /sys/class/infiniband or /sys/class/cxi entry): Open MPI
  /// would select ob1 over self, vader and tcp anyway, after opening every other component.
  bool tcp_only_host() const noexcept { return tcp_only_; }

  /// Where a tool on this host reaches the server (its URI points at the gateway's port, so a
  /// tool's connection starts the server like a rank's), and PMIx's tmpdir.
  pm::link::pmix_server server_info() const;
  /// A local rank started, or ended: what a tool's process table says of it.
  void rank_started(std::uint32_t rank, std::int64_t pid);
  void rank_ended(std::uint32_t rank, pm::exit_status status);
  /// The launcher's answer to a proc_table_request.
  void proc_table_done(const pm::link::proc_table_reply& reply);

  /// The launcher's answer to a fence this host contributed to.
  void fence_done(const pm::link::fence_result& result);
  /// The launcher forwards another host's direct modex for one of this host's ranks.
  void serve_modex(const pm::link::modex_request& request);
  /// The answer to a direct modex this host asked for.
  void modex_done(const pm::link::modex_reply& reply);
  /// The launcher's notice (abort policy off): other ranks failed, or the job is being ended.
  /// The server tells this host's ranks with a PMIx event; before it starts, the notices wait
  /// for it (the first 64), so that a rank that connects later still learns of them.
  void notify(const pm::link::pmix_notify& notice);
  /// The launcher acted on an abort (the job is being stopped): the caller may return.
  void release_abort(std::uint32_t rank);
  void release_aborts();

  bool server_started() const noexcept { return server_ != nullptr; }
  /// The rank connected to its server (PMIx_Init) and has not called PMIx_Finalize.
  bool unfinalized(std::uint32_t rank) const noexcept {
    return rank < client_state_.size() && client_state_[rank] == 1;
  }

 private:
  void accept_all();
  bool ensure_server();
  void start_server();
  void on_fence(pm::agent::pmix::fence_request r);
  void on_connect(pm::agent::pmix::connect_request r);
  void on_spawn(pm::agent::pmix::spawn_request r);
  /// The process number of a PMIx proc of one of the jobs (nullopt: none, or a wildcard).
  std::optional<std::uint32_t> process_of(const pm::agent::pmix::proc& p) const;
  /// Whether `nspace` is one of the launch's jobs' (else it is a tool's).
  bool launch_nspace(const std::string& nspace) const;
  /// The facts of one of the launch's namespaces and its first process (null: none of them).
  const pm::link::pmix_job* facts_of(const std::string& nspace, std::uint32_t& first) const;
  /// The PMIx name of a process of one of the jobs (nullopt: none).
  std::optional<pm::agent::pmix::proc> proc_of(std::uint32_t process) const;
  /// A fence's or a connect's participants as the launcher names them; false (and `why`) when
  /// one is of no job the launch has.
  bool members_of(const std::vector<pm::agent::pmix::proc>& participants,
                  pm::link::fence_members& members, std::string& why) const;
  void register_spawned(std::size_t index);
  void arm_timer();
  void take_server_notices();
  void contribute(pm::link::fence_members members, bool collect, std::vector<char> data,
                  pm::agent::pmix::data_completion done);
  void on_query(pm::agent::pmix::query_request r);
  void answer_query(pm::agent::pmix::query_request r, const pm::link::proc_table_reply* table);
  /// A rank of the job as a tool is told it (its host and executable from the job's facts).
  pm::agent::pmix::proc_entry entry_of(std::uint32_t rank, std::int64_t pid,
                                       const std::optional<pm::exit_status>& status) const;
  void make_dirs();
  void say(const std::string& text);
  void send_notice(const pm::link::pmix_notify& notice);

  pm::link::pmix_job job_;
  std::vector<std::string> executables_;
  hooks hooks_;
  pm::agent::pmix::server_place place_;
  std::vector<std::uint32_t> local_ranks_;
  bool oversubscribed_ = false;
  bool tcp_only_ = false;
  pm::link::owned_fd epoll_;
  pm::link::owned_fd listener_;
  pm::link::owned_fd timer_;   // the relay's deadlines (a timerfd in epoll_)
  pm::link::owned_fd dir_fd_;  // place_.dir, made and held open once the server starts
  pm::link::owned_fd shm_fd_;  // place_.shm_dir, likewise (none without /dev/shm)
  std::string server_path_;    // the server's Unix socket (in place_.dir)
  bool made_dir_ = false;      // place_.dir and place_.shm_dir were made here: ours to remove
  bool made_shm_ = false;
  bool stopped_ = false;
  std::optional<std::string> start_failure_;  // set once the server could not start
  void* module_ = nullptr;                    // dlopen handle (kept: the server's code lives there)
  std::unique_ptr<pm::agent::pmix::hosted_server> server_;
  tcp_relay relay_;
  std::map<std::uint32_t, pm::agent::pmix::completion> aborts_;
  std::map<pm::link::fence_members, std::uint64_t> fence_seq_;
  std::vector<std::uint8_t> client_state_;  // per process: 0 never, 1 connected, 2 finalized
  // Jobs the ranks spawned, in order: the launcher's job_add (their first process, apps, facts).
  struct spawned_job {
    pm::link::job_add add;
    std::vector<std::uint32_t> local;  // its ranks on this host
    bool registered = false;
  };
  std::vector<spawned_job> spawned_;
  std::uint64_t next_request_ = 0;
  std::map<std::uint64_t, pm::agent::pmix::spawn_completion> spawns_;
  // A publish or unpublish waits for a status, a lookup for values too.
  std::map<std::uint64_t, pm::agent::pmix::completion> data_ops_;
  std::map<std::uint64_t, pm::agent::pmix::lookup_completion> lookups_;
  std::vector<pm::link::pmix_notify> early_notices_;  // before the server started
  std::uint64_t next_modex_ = 0;
  std::map<std::uint64_t, pm::agent::pmix::data_completion> modex_;
  std::map<std::pair<pm::link::fence_members, std::uint64_t>, pm::agent::pmix::data_completion>
      fences_;
  struct local_rank {
    std::int64_t pid = 0;
    std::optional<pm::exit_status> status;
  };
  std::map<std::uint32_t, local_rank> local_state_;  // what pmd saw of its ranks
  std::uint64_t next_table_ = 0;
  std::map<std::uint64_t, pm::agent::pmix::query_request> tables_;  // waiting for the launcher
};

}  // namespace pmd
