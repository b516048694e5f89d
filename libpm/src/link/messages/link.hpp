// The link's own messages: the handshake, liveness, flow-control credit, suspension, and the
// agent's lines for the user (docs/agent-link.md). Each declares its wire form once
// (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "link/wire_schema.hpp"

namespace pm::link {

/// Bumped on any incompatible change; both sides refuse a peer with another version.
// 3: magic, nonce, job setup, data frames; 4: PMIx (job facts, abort, fences); 5: the tree launch
// (child_open, child_data, child_close, child_closed); 6: PMIx tools (pmix_server,
// proc_table_request, proc_table_reply) and events (notify); 7: spawned jobs (job_add,
// pmix_spawn, pmix_spawn_reply) and the launcher's data store (pmix_publish, pmix_lookup,
// pmix_unpublish, pmix_data_reply); 8: child_data travels as a relay frame (frame.hpp), no
// longer as a MessagePack message; 9: hosts' topologies and bindings (job.topology, the agent's
// `topology` answer, rank_spec.binding); 10: started, exited and stream_closed
// name lists of ranks, what happened in one turn of the agent's loop; 11: restarts in place
// (restart, restarted) and --stall-timeout (job.stall, stall_query, quiet, stall_report); 12:
// heartbeats hop by hop in the tree launch (a parent times its children and reports a silent one,
// child_closed.silent_ms; the launcher times only the hosts it reaches itself); 13:
// output_unwanted (a rank whose output has nowhere to go gets SIGPIPE, as a local one does)
inline constexpr std::uint32_t protocol_version = 13;

/// First message each way, right after the magic. The nonce is the job's: the launcher hands it
/// to the agent when it starts it (its command line), and each side refuses a hello with another
/// nonce (a stray process, a stale agent). The agent adds what the launcher needs to know of its
/// host: its pid and name, addresses other hosts reach, and a TCP port free there (MASTER_PORT
/// when rank 0 runs there).
struct hello {
  std::uint32_t version = protocol_version;
  std::uint64_t nonce = 0;
  std::int64_t pid = 0;
  std::string hostname;            ///< the agent's: its gethostname()
  std::vector<std::string> addrs;  ///< the agent's: non-loopback addresses, the best first
  std::uint16_t port = 0;          ///< the agent's: a port free on addrs.front() (0: none)
  friend bool operator==(const hello&, const hello&) = default;
  static constexpr auto wire() {
    return wire_message("hello", sender::either, field("version", &hello::version),
                        field("nonce", &hello::nonce), field("pid", &hello::pid),
                        field("hostname", &hello::hostname), field("addrs", &hello::addrs),
                        field("port", &hello::port, 0, 65535));
  }
  /// A hello of another version is read only as far as its version (the first field): its other
  /// fields may differ, and the endpoint refuses it by its version.
  static constexpr bool read_only_first(const hello& h) { return h.version != protocol_version; }
};
/// "Still here": lets a silent peer (a dead host, a cut link, which close no socket) be noticed.
struct heartbeat {
  friend bool operator==(const heartbeat&, const heartbeat&) = default;
  static constexpr auto wire() { return wire_message("heartbeat", sender::either); }
};
/// Credit: the receiver consumed `bytes` of data frames (output toward the launcher, input toward
/// the agent), so the sender may send that much more (docs/agent-link.md, flow control).
struct ack {
  std::uint64_t bytes = 0;
  friend bool operator==(const ack&, const ack&) = default;
  static constexpr auto wire() {
    return wire_message("ack", sender::either, field("bytes", &ack::bytes));
  }
};
/// The launcher is being stopped (^Z) or continues: silence while suspended is not a loss.
struct suspend {
  friend bool operator==(const suspend&, const suspend&) = default;
  static constexpr auto wire() { return wire_message("suspend", sender::launcher); }
};
struct resume {
  friend bool operator==(const resume&, const resume&) = default;
  static constexpr auto wire() { return wire_message("resume", sender::launcher); }
};
/// A line for the user from the agent that is not a failure of the agent (its PMIx server
/// could not start, ...): the launcher shows it with the host's name.
struct agent_notice {
  std::string text;
  friend bool operator==(const agent_notice&, const agent_notice&) = default;
  static constexpr auto wire() {
    return wire_message("notice", sender::agent, field("text", &agent_notice::text));
  }
};
/// The agent gives up (bad message, version mismatch); it clears everything and exits.
struct agent_error {
  std::string text;
  friend bool operator==(const agent_error&, const agent_error&) = default;
  static constexpr auto wire() {
    return wire_message("error", sender::agent, field("text", &agent_error::text));
  }
};

}  // namespace pm::link
