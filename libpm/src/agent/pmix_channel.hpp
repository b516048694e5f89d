// The bodies of the private channel between pmd and the helper it execs to run the ranks' PMIx
// server (pmd-helper pmix): pmd sends the relay's actions for the server (and what the helper
// must know first), the helper sends the server's events back. Framing and I/O are the callers'
// (tools/pmd/pmix_helper_frames.hpp).
//
// The helper is pmd's own child of the same build, so a body is a positional binary archive of
// the fields, with no keys and no version: little-endian fixed-width integers (enums by their
// value), length-prefixed strings and bytes, count-prefixed vectors, a flag byte for an optional,
// an index byte for a variant. A body that does not decode exactly (a bug, or a helper that is
// not ours) is refused, never trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "agent/pmix/predicted_env.hpp"
#include "agent/pmix_relay.hpp"
#include "link/messages/pmix_job.hpp"

namespace pm::agent::pmix_channel {

/// What pmd tells the helper before anything else: the first job and where the server will be.
struct setup {
  link::pmix_job job;
  pmix::server_place place;
};
/// A local rank of the first job was bound to `cpus` (pmix_gateway::rank_bound).
struct rank_bound {
  std::uint32_t rank = 0;
  std::string cpus;
};

/// pmd to the helper: `setup` first, then the relay's actions but `send` (pmd sends those).
using to_helper =
    std::variant<setup, rank_bound, pmix_complete, pmix_serve_modex, pmix_register_job,
                 pmix_host_named, pmix_notify_ranks, pmix_restart, pmix_reregister>;

std::string encode(const to_helper& m);
/// The helper to pmd.
std::string encode(const pmix_event& e);

/// Throw pm::error(errc::launch, "PMIx helper channel: ...") for a body that is not exactly one
/// message: truncated, trailing bytes, an unknown variant index, an enum or flag out of range, a
/// count larger than the bytes left. They allocate no more than the body's size justifies.
to_helper decode_to_helper(std::string_view body);
pmix_event decode_event(std::string_view body);

}  // namespace pm::agent::pmix_channel
