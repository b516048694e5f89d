// Control messages of the agent link (launcher <-> pmd), docs/agent-link.md.
//
// A control frame's body is a MessagePack map with a "type" string and the message's fields.
// Unknown extra fields are ignored (a newer peer may add some); a missing or mistyped field, an
// unknown type, nesting deeper than any message needs, or trailing bytes are a pm::error with one
// line. Output and stdin bytes do not travel as messages but as data frames (frame.hpp).
//
// The messages live by concern in link/messages/ (link, launch, io, pmix, pmix_job, tree, stall),
// each with its wire form declared once beside its fields (wire_schema.hpp); this header gathers
// them into `message`. The codec that writes and reads them is link/codec/.
//
// Descriptors: over a link to an agent on this host (a Unix socket), a message may say that `fds`
// descriptors travel with it (SCM_RIGHTS, socket.hpp). Which message may carry how many is part of
// its wire form (`with_fds`): spawn 0 or 1 (the ranks' stdin), started 0..2 (the rank's output
// pipes), others 0. Over any other link (ssh, TCP, the simulator) fds is always 0: output comes
// as data frames.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "link/messages/io.hpp"
#include "link/messages/launch.hpp"
#include "link/messages/link.hpp"
#include "link/messages/pmix.hpp"
#include "link/messages/pmix_job.hpp"
#include "link/messages/stall.hpp"
#include "link/messages/tree.hpp"

namespace pm::link {

/// Every message. A struct listed here without a wire form does not compile (link/codec/).
using message =
    std::variant<hello, heartbeat, ack, job_setup, spawn_request, signal_request, input_closed,
                 suspend, resume, shutdown_request, started, spawn_failed, exited, stream_closed,
                 shutdown_done, agent_error, fence_result, pmix_abort, fence_contribution,
                 modex_request, modex_reply, pmix_unfinalized, agent_notice, child_open, child_data,
                 child_close, child_closed, pmix_server, proc_table_request, proc_table_reply,
                 pmix_notify, job_add, pmix_spawn_reply, pmix_data_reply, pmix_spawn, pmix_publish,
                 pmix_lookup, pmix_unpublish, host_shape, restart_request, restarted, stall_query,
                 host_quiet, stall_report, output_unwanted>;

/// Which side may send a message (its wire form's `sender`).
sender sent_by(const message& m) noexcept;

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
/// Decodes one control frame body. Throws pm::error naming the problem.
envelope decode(std::span<const std::uint8_t> body);
/// The same decoder as decode(). There was once a second one (nlohmann's document, then field
/// checks) to cross-check a hand-written fast path; with one decoder generated from the wire forms
/// there is nothing left to cross-check (docs/agent-link.md, "One decoder"). Kept for callers.
envelope decode_reference(std::span<const std::uint8_t> body);

}  // namespace pm::link
