// transport: how a driver reaches hosts to carry out the controller's spawn and signal actions.
//
// A transport never decides policy: it starts what it is told, signals what it is told, and
// reports what happened as controller events. Every report is posted to the io_context (never a
// nested call into the caller), so the controller is never re-entered.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pm/controller.hpp"

namespace pm {

/// Everything needed to start one rank (decided by the launcher before any rank starts).
struct rank_launch {
  std::uint32_t rank = 0;
  std::string path;               ///< resolved executable
  std::vector<std::string> argv;  ///< argv[0] as the user gave it
  std::vector<std::string> env;   ///< "NAME=value", complete
  std::string wdir;               ///< empty: the launcher's working directory
  bool stdin_from_launcher = false;  ///< true: its stdin is the descriptor the launcher passes
  /// Output pipes: 2 stdout and stderr; 1 one pipe for both (merged, on_output_fd with `out`);
  /// 0 none (/dev/null). Matches controller_options::streams_per_rank.
  std::uint8_t streams = 2;
};

/// Where a rank's output goes: a transport that can hand over the pipe itself (local) gives the
/// read ends to the output layer; a remote one forwards bytes.
struct transport_callbacks {
  std::function<void(event)> on_event;  ///< rank_started, rank_spawn_failed, rank_exited, host_lost
  /// A rank's stdout (and stderr unless merged) pipe read end, owned by the receiver from now on.
  std::function<void(std::uint32_t rank, stream_kind stream, int fd)> on_output_fd;
};

class transport {
 public:
  virtual ~transport() = default;
  /// Starts ranks on a host. `stdin_fd` (or -1) is given to the ranks with stdin_from_launcher.
  virtual void spawn(std::uint32_t host, std::vector<rank_launch> ranks, int stdin_fd) = 0;
  /// Sends a signal to each listed rank's process group.
  virtual void signal(std::uint32_t host, const std::vector<std::uint32_t>& ranks, int signo) = 0;
  /// The job is over: clear everything the ranks left behind (process groups, reparented
  /// descendants), stop the agents, then call `done`. Idempotent.
  virtual void shutdown(std::function<void()> done) = 0;
};

}  // namespace pm
