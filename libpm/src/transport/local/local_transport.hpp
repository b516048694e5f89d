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

#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::local {

/// Where pmd is: $PM_AGENT if set; else next to the running executable (/proc/self/exe), next
/// to the object that holds libpm, in ../libexec/ or ../bin/ of either, or on $PATH. Throws
/// pm::error (errc::launch) naming the places it looked if none has an executable pmd.
std::string default_agent_path();

/// An agent started before the job is known, so that its exec overlaps the launcher's own work
/// (parsing, mapping, the environment: pmrun calls this first). It runs with this process's
/// environment less an outer job's identity (pm::is_outer_job_identity), which pmd turns into the
/// ranks' base as it does the job's base environment (the -mca exports come with the job). The next
/// local_transport::open() of this machine with the same agent path adopts it; the job must use
/// early_agent_nonce() as its nonce (job_runner does). At most one is pending; starting it is
/// best effort (nothing happens when pmd cannot be found or started: open() says why later).
/// Not thread-safe: call it before the job's io_context runs.
void start_agent_early(const std::string& path, std::uint64_t nonce);
/// The nonce of the pending early agent, if one is waiting to be adopted.
std::optional<std::uint64_t> early_agent_nonce() noexcept;
/// Kills and reaps a pending early agent nobody adopted (a job on other hosts only, a usage
/// error after the start); blocking, about a millisecond. Harmless when there is none.
void discard_early_agent() noexcept;

struct local_transport_options {
  std::string agent_path;  ///< empty: agent_target::agent_argv[0] if absolute, else the default
  /// After close(), a pmd still running this long is killed (it normally exits within its grace).
  std::chrono::milliseconds kill_after{10000};
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
