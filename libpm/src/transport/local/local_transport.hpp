// local_transport: the agent of this machine, a pmd started over a Unix socket pair
// (docs/agent.md, docs/agent-link.md).
//
// open() starts pmd with one end of a socket pair as its stdin and stdout and hands the other end
// to the link; pmd is a child subreaper that spawns the ranks, passes their output pipes back as
// descriptors, reports starts and exits, and kills every rank and every descendant when the job
// ends or when this process dies (the socket closes). The launcher process therefore installs no
// SIGCHLD handler and has no rank as a child: its only children are pmds, reaped through pidfds.
// Not thread-safe; callbacks are posted to the io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::local {

/// Where pmd is: $PM_AGENT if set; else next to the running executable (/proc/self/exe), next
/// to the object that holds libpm, in ../libexec/ or ../bin/ of either, or on $PATH. Throws
/// pm::error (errc::launch) naming the places it looked if none has an executable pmd.
std::string default_agent_path();

struct local_transport_options {
  std::string agent_path;  ///< empty: agent_target::agent_argv[0] if absolute, else the default
  /// After close(), a pmd still running this long is killed (it normally exits within its grace).
  std::chrono::milliseconds kill_after{10000};
  /// Started before the job (pm::early_agent): the first open() of this machine whose command
  /// line is the one it was started with adopts it instead of starting another pmd.
  std::shared_ptr<early_agent> early;
};

class local_transport final : public transport {
 public:
  explicit local_transport(boost::asio::io_context& io, local_transport_options options = {});
  /// A pmd still running is given a moment to finish its clean-up, then killed and reaped
  /// (blocking), so that nothing outlives the transport.
  ~local_transport() override;
  local_transport(const local_transport&) = delete;
  local_transport& operator=(const local_transport&) = delete;

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override;
  void close(std::uint32_t host, std::function<void(agent_end)> done) override;

  /// The pmd serving `host` (0 if none), for tests and diagnostics.
  std::int64_t agent_pid(std::uint32_t host) const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::local
