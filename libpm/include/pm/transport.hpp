// Transports: how the launcher reaches a host's agent (pmd). A transport starts the agent and
// hands back a byte stream to it; the agent link (hello, messages, heartbeats, output) runs over
// that stream and is the same for every transport (docs/agent-link.md). A transport decides
// nothing about the job: it opens streams, and says how what carried a stream ended.
//
// libpm brings two: the local one (pmd started on this machine over a Unix socket pair) and ssh
// (the system ssh runs `pmd --stdio` on the remote host). A routing layer picks one per host: a
// host that is this machine is local, every other host goes to the remote transport. An embedding
// scheduler can bring its own remote transport (job_request::remote_transport), e.g. one that
// starts agents through its own daemons: it implements this interface.
//
// Threads: a transport is called on the job's io_context thread only, and calls back there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/export.hpp"

namespace pm {

/// What a transport needs to start one host's agent.
struct agent_target {
  std::uint32_t host = 0;  ///< index in the allocation
  pm::host info;           ///< its name, user, port, whether it is this machine
  /// The agent's command line on that host: the pmd path and its arguments (--stdio, --nonce N).
  /// Everything else about the job travels over the link after the hello, never on this line.
  std::vector<std::string> agent_argv;
  /// An agent started on this machine gets this environment (the job's base environment, also
  /// when it is empty); nullopt: this process's own. A transport that starts agents elsewhere
  /// must ignore it: the launcher's environment never reaches another host.
  std::optional<std::vector<std::string>> environment;
};

/// The launcher's ends of a byte stream to an agent. The receiver owns the descriptors.
struct agent_stream {
  int read_fd = -1;   ///< bytes from the agent
  int write_fd = -1;  ///< bytes to the agent (the same descriptor as read_fd for a socket)
  bool socket =
      false;  ///< a Unix stream socket to an agent on this machine: descriptors may travel
  std::int64_t pid = 0;  ///< the local process carrying the stream (pmd, ssh), for messages
};

/// How what carried a stream ended.
struct agent_end {
  /// One line, e.g. "ssh exited with code 255: Connection refused" or "pmd was killed by SIGKILL";
  /// empty when it ended normally.
  std::string how;
  /// True when trying again may work (ssh's 255 before the agent answered: a connection refused
  /// under a burst, MaxStartups). The link layer retries with backoff, a bounded number of times.
  bool retryable = false;
};

class PM_API transport {
 public:
  virtual ~transport() = default;
  /// Starts the agent of `target` and opens a stream to it. Calls `opened` with the stream, or
  /// `failed` with one line; both posted to the io_context, never called from inside open().
  virtual void open(const agent_target& target, std::function<void(agent_stream)> opened,
                    std::function<void(std::string reason)> failed) = 0;
  /// The agent of `host` answered its hello (a transport that caps concurrent connection set-ups
  /// may start the next one now).
  virtual void established(std::uint32_t host) { (void)host; }
  /// The stream of `host` is over (the link closed its descriptors, or gave up on it): end what
  /// carried it if it still runs (after a short grace) and call `done` (posted) once it has ended.
  virtual void close(std::uint32_t host, std::function<void(agent_end)> done) = 0;
  /// True when the hosts' slots are shared with other jobs (a DVM's, docs/dvm.md): the slots an
  /// MPI_Comm_spawn places ranks on are claimed with claim_slots first.
  virtual bool claims_slots() const { return false; }
  /// Claims `slots` (host name, count) for this job, all or nothing (`share`: only what is free,
  /// sharing the rest). Calls `done` (posted) with "" once they are this job's, else with one
  /// line why not. Called only when claims_slots(); the default (never called) refuses at once.
  virtual void claim_slots(std::vector<std::pair<std::string, std::uint32_t>> slots, bool share,
                           std::function<void(std::string refusal)> done) {
    (void)slots;
    (void)share;
    done("this transport claims no slots");
  }
};

}  // namespace pm
