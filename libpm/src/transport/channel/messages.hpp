// Messages of the agent channel (launcher <-> pmd), docs/agent.md.
//
// A frame body is a MessagePack map with a "type" string and the message's fields. Unknown
// extra fields are ignored (a newer peer may add some); a missing or mistyped field, an unknown
// type, nesting deeper than any message needs, or trailing bytes are a pm::error with one line.
//
// Descriptors: a message may say that `fds` descriptors travel with it (local mode only, as
// SCM_RIGHTS ancillary data sent with the frame's bytes). The receiver queues the descriptors
// it receives in order and hands the next `fds` of them to the message once it is decoded
// (receiver.hpp). Which message may carry how many, and what they are:
//   spawn    0 or 1: the stdin the ranks with `stdin` read (required if any rank has it)
//   started  0..2 : the rank's output pipe read ends, stdout then stderr (1: merged; 0: none)
//   others   0
// Over a channel that cannot pass descriptors (ssh), fds is always 0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pm/exit_status.hpp"
#include "transport/channel/frame.hpp"

namespace pm::channel {

/// Bumped on any incompatible change; both sides refuse a peer with another version.
inline constexpr std::uint32_t protocol_version = 2;  // 2: heartbeat

/// One rank to start.
struct rank_spec {
  std::uint32_t rank = 0;
  std::string path;                  ///< resolved executable
  std::vector<std::string> argv;     ///< argv[0] as the user gave it
  std::vector<std::string> env;      ///< "NAME=value", complete
  std::string wdir;                  ///< empty: the agent's working directory
  bool stdin_from_launcher = false;  ///< read the descriptor attached to the spawn message
  std::uint8_t streams = 2;  ///< 2: stdout and stderr pipes; 1: one pipe for both; 0: /dev/null
  friend bool operator==(const rank_spec&, const rank_spec&) = default;
};

// ---- launcher -> agent ----
/// First message each way. From the launcher: its version (pid 0); from the agent: its pid too.
struct hello {
  std::uint32_t version = protocol_version;
  std::int64_t pid = 0;
  friend bool operator==(const hello&, const hello&) = default;
};
struct spawn_request {
  std::vector<rank_spec> ranks;
  friend bool operator==(const spawn_request&, const spawn_request&) = default;
};
/// Signal each listed rank's process group.
struct signal_request {
  std::vector<std::uint32_t> ranks;
  int signo = 0;
  friend bool operator==(const signal_request&, const signal_request&) = default;
};
/// The job is over: kill whatever is left of the ranks and their descendants, then exit.
struct shutdown_request {
  friend bool operator==(const shutdown_request&, const shutdown_request&) = default;
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
/// Everything is cleared; the agent exits right after.
struct shutdown_done {
  friend bool operator==(const shutdown_done&, const shutdown_done&) = default;
};
/// The agent gives up (bad message, version mismatch); it clears everything and exits.
struct agent_error {
  std::string text;
  friend bool operator==(const agent_error&, const agent_error&) = default;
};

// ---- both ways ----
/// "Still here": sent when nothing else was, so that a silent peer (a dead host, a cut link,
/// which close no socket) is noticed after the heartbeat timeout. Used by remote transports.
struct heartbeat {
  friend bool operator==(const heartbeat&, const heartbeat&) = default;
};

using message = std::variant<hello, spawn_request, signal_request, shutdown_request, started,
                             spawn_failed, exited, shutdown_done, agent_error, heartbeat>;

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
/// Decodes one frame body. Throws pm::error naming the problem.
envelope decode(std::span<const std::uint8_t> body);

/// frame_decoder + decode: feed bytes, take messages out.
class message_decoder {
 public:
  void feed(std::span<const std::uint8_t> bytes) { frames_.feed(bytes); }
  std::optional<envelope> next();
  void finish() const { frames_.finish(); }

 private:
  frame_decoder frames_;
};

}  // namespace pm::channel
