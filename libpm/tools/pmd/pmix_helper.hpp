// pmd's side of its ranks' PMIx server (docs/pmix.md, "The server's process"). The server runs in
// pmd-helper, a program pmd starts when a rank first connects: libpmix, its threads and the
// libraries it loads stay out of pmd, which therefore links statically and starts like a small
// static program on every launch.
//
// Until then this listens on 127.0.0.1 (the ranks' PMIx variables name the port) and keeps what
// the agent's relay said for the server (its actions, the ranks' bindings) in order. The first
// connection (or a modex the server must answer) starts the helper with the listening socket and
// one end of a socketpair: it gets the job, then everything kept, then each action as it comes,
// and it reports the server's upcalls (pm::agent::pmix_event) back. A job that never calls PMIx
// costs a socket and never starts the helper. The channel's bodies are pm::agent::pmix_channel's;
// a frame is a 4-byte little-endian length, a kind byte and the body (pmix_helper_frames.hpp).
//
// Order: a rank's PMIx_Finalize is reported by the helper, its exit is seen by pmd (a pidfd), and
// the exit must not overtake the finalize. after_upcalls() runs its callback only once the
// helper has reported every upcall its server had queued when pmd asked (a sync round trip).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "agent/pmix_channel.hpp"
#include "agent/pmix_relay.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"

namespace pmd {

class pmix_helper {
 public:
  /// What the server reported, for the agent's machine (pmd feeds it as an event).
  using reporter = std::function<void(pm::agent::pmix_event)>;

  /// Listens on 127.0.0.1 and names the server's private directories (made by the helper when
  /// its server starts); throws pm::error naming what failed.
  pmix_helper(const pm::link::pmix_job& job, reporter report);
  ~pmix_helper();
  pmix_helper(const pmix_helper&) = delete;
  pmix_helper& operator=(const pmix_helper&) = delete;

  /// pmd's end: the helper is told to stop (its server's connections close and its directories
  /// go), waited for a bounded time, killed after that (pmd then removes the directories).
  void stop();

  /// Where the server will be and what this host has (cores, RDMA devices, GPUs).
  pm::agent::pmix_host_facts facts() const;
  /// Rank `rank` of the first job was started bound to `cpus` (the server registers them).
  void rank_bound(std::uint32_t rank, std::string cpus);
  /// Carries out one of the relay's actions but `send` (pmd's): kept until the helper runs.
  void execute(pm::agent::pmix_action& a);
  /// Runs `then` once every upcall the server queued by now was reported (at once without a
  /// running helper).
  void after_upcalls(std::function<void()> then);
  /// The same, waited for here (2 s at most): every upcall queued by now, and every callback
  /// after_upcalls queued before, has been reported when it returns. A restart's sweep uses it,
  /// since its answer must follow its ranks' ends at once.
  void drain_upcalls();
  /// The helper's pid while it runs (pmd's sweeps leave it alone), else 0.
  pid_t helper_pid() const noexcept { return pid_; }

  /// Readable when there is work: call on_ready().
  int fd() const noexcept { return epoll_.get(); }
  void on_ready();

 private:
  void start_helper();
  void cannot_start(const std::string& why);
  void send_frame(std::uint8_t kind, const std::string& body);
  void send(const pm::agent::pmix_channel::to_helper& m);
  void flush();
  void read_channel();
  void on_frame(std::uint8_t kind, std::string_view body);
  void helper_gone(const std::string& why);
  void run_waiting();

  pm::link::pmix_job job_;
  reporter report_;
  pm::agent::pmix::server_place place_;
  pm::link::owned_fd epoll_;
  pm::link::owned_fd listener_;  // until the helper takes it
  pm::link::owned_fd channel_;   // pmd's end of the socketpair
  pm::link::owned_fd pidfd_;     // the helper's
  pid_t pid_ = 0;
  bool started_ = false;  // the helper was started (it may have ended since)
  bool gone_ = false;     // ... and it ended, or its channel broke
  bool stopped_ = false;
  bool failed_ = false;            // the helper could not be started
  std::string out_;                // frames not written yet
  std::string in_;                 // bytes read, not yet a whole frame
  std::vector<std::string> kept_;  // frames for the helper before it runs
  std::uint64_t next_sync_ = 0;
  std::deque<std::pair<std::uint64_t, std::function<void()>>> waiting_;  // by sync number
};

}  // namespace pmd
