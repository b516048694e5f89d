// Stalls (--stall-timeout, docs/resilience.md "Stalls"): what the agents watch and tell about
// their ranks' progress. Each declares its wire form once (wire_schema.hpp). New in the version
// after 10 (the branch that merges them bumps protocol_version).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "link/wire_schema.hpp"

namespace pm::link {

// ---- launcher -> agent ----
/// In the job's setup (job_setup::stall): watch the ranks' progress. A live rank progresses when
/// its CPU time or the bytes it wrote grew since the agent's previous look (every `sample_ms`); the
/// host is quiet when none of its live ranks progressed for `timeout_ms`, and says so
/// (`host_quiet`) on each change. Absent: the agent watches nothing.
struct stall_watch {
  std::uint32_t timeout_ms = 0;
  std::uint32_t sample_ms = 0;
  friend bool operator==(const stall_watch&, const stall_watch&) = default;
  static constexpr auto wire() {
    return wire_map(field("timeout_ms", &stall_watch::timeout_ms),
                    field("sample_ms", &stall_watch::sample_ms));
  }
};

/// How often an agent looks at its ranks for a stall timeout: a tenth of it, at least 100 ms and
/// at most 1 s (a stall is then noticed at most one look after the timeout).
constexpr std::chrono::milliseconds stall_sample_period(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
}

/// Every host with live ranks is quiet: the launcher asks each what its ranks are doing.
struct stall_query {
  std::uint64_t id = 0;
  friend bool operator==(const stall_query&, const stall_query&) = default;
  static constexpr auto wire() {
    return wire_message("stall_query", sender::launcher, field("id", &stall_query::id));
  }
};

// ---- agent -> launcher ----
/// The host turned quiet (none of its `ranks` live ranks progressed for the timeout) or active
/// again (quiet false: a rank progressed or started). Sent on each change only.
struct host_quiet {
  bool quiet = false;
  std::uint32_t ranks = 0;  ///< its live ranks when it turned quiet
  friend bool operator==(const host_quiet&, const host_quiet&) = default;
  static constexpr auto wire() {
    return wire_message("quiet", sender::agent, field("quiet", &host_quiet::quiet),
                        field("ranks", &host_quiet::ranks));
  }
};

/// One live rank as the agent last saw it.
struct rank_activity {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;
  std::string state;         ///< the kernel's state letter ("S", "D", "R", "T", ...); "?" unknown
  std::string wchan;         ///< where it waits in the kernel (/proc/PID/wchan); empty: unknown
  std::uint64_t cpu_ms = 0;  ///< CPU time of the rank and its descendants
  std::int64_t output_ms = -1;   ///< since its written bytes last grew; -1: none since its start
  std::int64_t progress_ms = 0;  ///< since it last progressed (CPU or bytes), or started
  friend bool operator==(const rank_activity&, const rank_activity&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &rank_activity::rank), field("pid", &rank_activity::pid),
                    field("state", &rank_activity::state), field("wchan", &rank_activity::wchan),
                    field("cpu_ms", &rank_activity::cpu_ms),
                    field("output_ms", &rank_activity::output_ms),
                    field("progress_ms", &rank_activity::progress_ms));
  }
};

/// The answer to stall_query: the host's live ranks, ascending.
struct stall_report {
  std::uint64_t id = 0;
  std::vector<rank_activity> ranks;
  friend bool operator==(const stall_report&, const stall_report&) = default;
  static constexpr auto wire() {
    return wire_message("stall_report", sender::agent, field("id", &stall_report::id),
                        field("ranks", &stall_report::ranks));
  }
};

}  // namespace pm::link
