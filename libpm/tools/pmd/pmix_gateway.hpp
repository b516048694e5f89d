// The ranks' PMIx server as pmd-helper runs it (docs/pmix.md, "The server's process"): started
// only when one of them connects, and the libpmix calls. What to make of each request is decided
// by the agent's PMIx relay (libpm/src/agent/pmix_relay.hpp) in pmd; pmd's pmix_helper carries
// the relay's actions here and the server's upcalls back.
//
// pmd named the private directories and listens on 127.0.0.1 (the ranks were told where); the
// helper gets that listener. The first connection of the job's owner that sends a whole PMIx
// handshake loads libpm-pmix.so, makes the directories, starts the server (about 20 ms) on a
// Unix socket in the private directory instead of libpmix's TCP port, registers the job and
// every local rank; every connection is relayed there (tcp_relay.hpp: the owner check, the
// handshake buffering). A restart in place (pm::agent::pmix_restart) deregisters the namespaces
// served so far and registers the new incarnation's like the first job's, when the next
// connection comes (its ranks' bindings known by then).
//
// Each request the server hands over (an upcall) is kept here under an id and reported as a
// pm::agent::pmix_event; the relay's actions (complete a request, serve a modex, register a
// namespace, notify) are carried out by execute(). Everything runs on the helper's thread: the
// gateway's descriptors are in an epoll set of its own, watched as one descriptor (fd()) and
// served with on_ready().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/pmix/pmix_module.hpp"
#include "agent/pmix/predicted_env.hpp"
#include "agent/pmix_relay.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"
#include "tcp_relay.hpp"

namespace pmd {

class pmix_gateway {
 public:
  /// What the server reported, for the agent's machine (pmd feeds it as an event).
  using reporter = std::function<void(pm::agent::pmix_event)>;

  /// Serves the ranks that connect to `listener` (pmd made it and named the private
  /// directories in `place`: the ranks were told); throws pm::error naming what failed.
  /// `await_agent` returns once pmd acted on pmix_server_up (registered the spawned jobs it
  /// knows, notified early events): only then does the first connection reach the server.
  pmix_gateway(const pm::link::pmix_job& job, pm::agent::pmix::server_place place,
               pm::link::owned_fd listener, reporter report, std::function<void()> await_agent);
  /// stop() unless it ran.
  ~pmix_gateway();
  /// The helper's end: closes every relayed connection, fails what is pending and removes the
  /// directories. The server itself (if it started) is not finalized: libpmix 4.2.2's
  /// PMIx_server_finalize has deadlocked (issue 20) and crashed (SIGSEGV inside it, and heap
  /// corruption, in about one in 30 runs of PmrunMpi.APmixToolSeesTheJobsRanksAndSpawns), and at
  /// the helper's end it would release nothing the process's exit does not (PMIx's files are in the
  /// directories removed here; its sockets and threads go with the process). Its threads still
  /// run afterwards, so pmd-helper ends with std::_Exit (static destructors and libpmix's atexit
  /// handlers would meet them).
  void stop();
  pmix_gateway(const pmix_gateway&) = delete;
  pmix_gateway& operator=(const pmix_gateway&) = delete;

  /// Rank `rank` of the first job was started bound to `cpus` (a cpu list): the server registers
  /// its cpuset and locality string (docs/pmix.md, "Locality"). Ranks spawned with the job's
  /// spawn requests are known before any of them can reach the server, but for a request that
  /// came later (said once).
  void rank_bound(std::uint32_t rank, std::string cpus);

  /// Readable when the gateway has work: call on_ready().
  int fd() const noexcept { return epoll_.get(); }
  void on_ready();
  /// Carries out one of the relay's actions but `send` (pmd's).
  void execute(pm::agent::pmix_action& a);

 private:
  void accept_all();
  bool ensure_server();
  void start_server();
  void arm_timer();
  void take_server_notices();
  void make_dirs();
  void register_spawned(const pm::agent::pmix_register_job& r);
  void register_first_job();
  void register_restarted();
  void restart(pm::agent::pmix_restart& r);
  void complete(pm::agent::pmix_complete& c);
  void say(const std::string& text);
  /// Keeps a request's completion and reports the request under its id.
  template <class Completion>
  pm::agent::pmix_request_id keep(Completion done);

  pm::link::pmix_job job_;
  reporter report_;
  std::function<void()> await_agent_;
  pm::agent::pmix::server_place place_;
  std::vector<std::uint32_t> local_ranks_;
  std::map<std::uint32_t, std::string> bound_;  // local ranks' applied cpus, until registered
  bool told_late_binding_ = false;
  // job_ is registered with the running server (false after a restart until the next
  // connection or modex lets the server in again).
  bool first_registered_ = false;
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
  // Requests the server handed over, until the relay completes them (a destroyed completion
  // fails its request, so none waits for ever).
  using pending =
      std::variant<pm::agent::pmix::completion, pm::agent::pmix::data_completion,
                   pm::agent::pmix::spawn_completion, pm::agent::pmix::lookup_completion,
                   pm::agent::pmix::query_completion>;
  pm::agent::pmix_request_id next_id_ = 0;
  std::map<pm::agent::pmix_request_id, pending> pending_;
};

}  // namespace pmd
