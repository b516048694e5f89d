// local_transport: ranks on this host, started and watched by a local pmd (docs/agent.md).
//
// The transport starts `pmd --local 0` with one end of a Unix socket pair as its stdin and talks
// the agent channel over the other end. pmd is a child subreaper that spawns the ranks, passes
// their output pipe read ends back (SCM_RIGHTS), reports starts and exits, and kills every rank
// and every descendant when the job ends or when this process dies (the channel closes).
// The launcher process therefore installs no SIGCHLD handler and has no rank as a child: the only
// child it gets is pmd, reaped through a pidfd.
//
// Everything runs on the caller's io_context (one thread). Reports are posted to it, never
// called from inside spawn/signal/shutdown. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::local {

/// Where pmd is: $PM_AGENT if set; else next to the running executable (/proc/self/exe), next
/// to the object that holds libpm, in ../libexec/ or ../bin/ of either, or on $PATH. Throws
/// pm::error (errc::launch) naming the places it looked if none has an executable pmd.
std::string default_agent_path();

struct local_transport_options {
  std::string agent_path;  ///< empty: default_agent_path()
  /// When this process dies without a shutdown: pmd's SIGTERM-to-SIGKILL grace for the ranks.
  std::chrono::milliseconds lost_grace{1000};
};

class local_transport final : public transport {
 public:
  /// Starts pmd. Throws pm::error (errc::launch) if it cannot be started.
  local_transport(boost::asio::io_context& io, transport_callbacks callbacks,
                  local_transport_options options = {});
  /// If shutdown did not finish: asks pmd to clear everything, closes the channel and waits
  /// (blocking, normally milliseconds) for pmd to exit, so that nothing outlives the transport.
  ~local_transport() override;
  local_transport(const local_transport&) = delete;
  local_transport& operator=(const local_transport&) = delete;

  /// Only host 0 (this host). `stdin_fd` is duplicated; the caller keeps its descriptor.
  void spawn(std::uint32_t host, std::vector<rank_launch> ranks, int stdin_fd) override;
  void signal(std::uint32_t host, const std::vector<std::uint32_t>& ranks, int signo) override;
  void shutdown(std::function<void()> done) override;

  /// pmd's pid (for tests and diagnostics).
  std::int64_t agent_pid() const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::local
