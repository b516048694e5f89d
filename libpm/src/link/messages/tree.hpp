// The tree launch's relay (docs/multihost.md, "The tree launch"): an agent starts the agents of
// its plan children and relays their links' bytes. Each declares its wire form once
// (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "link/wire_schema.hpp"

namespace pm::link {

/// Launcher -> agent: run `argv` (the complete ssh command line the launcher built for host
/// `host`, whose plan parent this agent is) and relay its stdin and stdout as child_data.
struct child_open {
  std::uint32_t host = 0;
  std::vector<std::string> argv;
  friend bool operator==(const child_open&, const child_open&) = default;
  static constexpr auto wire() {
    return wire_message("child_open", sender::launcher, field("host", &child_open::host),
                        field("argv", &child_open::argv));
  }
  static void check(const child_open& m, std::string_view type);  ///< a command line
};
/// Both ways: bytes of the byte stream between the launcher and the agent of `host` (a link of
/// its own, relayed unread: launcher -> agent goes to the child's stdin, agent -> launcher came
/// from its stdout). On the wire it is a relay frame (frame.hpp: the host and the raw bytes, no
/// MessagePack): append_message() writes one for it, and the agent's endpoint hands it back as
/// this message; the launcher's endpoint hands it out as a view (relay_in, endpoint.hpp). The
/// MessagePack form below is its declaration (name, sender) and is still read if it comes.
struct child_data {
  std::uint32_t host = 0;
  std::string bytes;  ///< raw bytes
  friend bool operator==(const child_data&, const child_data&) = default;
  static constexpr auto wire() {
    return wire_message("child_data", sender::either, field("host", &child_data::host),
                        field("bytes", &child_data::bytes));
  }
};
/// Launcher -> agent: the link of `host` is over: close its stdin and end what carries it.
struct child_close {
  std::uint32_t host = 0;
  friend bool operator==(const child_close&, const child_close&) = default;
  static constexpr auto wire() {
    return wire_message("child_close", sender::launcher, field("host", &child_close::host));
  }
};
/// Agent -> launcher: what carried the link of `host` ended (every child_data of it came first).
/// With `silent_ms` (version 12): the agent heard nothing from that host's agent for so long
/// (heartbeats go hop by hop: the parent times its children, the launcher does not) and ends its
/// ssh; nothing more of it comes.
struct child_closed {
  std::uint32_t host = 0;
  int code = 0;      ///< its exit code, or -1 when killed by `signo`
  int signo = 0;     ///< the signal that killed it (0: it exited)
  std::string said;  ///< the last line it printed on stderr ("Connection refused"), may be empty
  std::uint32_t silent_ms = 0;  ///< 0: it was not silent
  friend bool operator==(const child_closed&, const child_closed&) = default;
  static constexpr auto wire() {
    return wire_message("child_closed", sender::agent, field("host", &child_closed::host),
                        field("code", &child_closed::code, -1, 255),
                        field("signal", &child_closed::signo, 0, max_signal),
                        field("said", &child_closed::said),
                        field("silent_ms", &child_closed::silent_ms));
  }
};

}  // namespace pm::link
