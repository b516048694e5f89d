// The launch plan: who starts which host's agent (docs/agent-link.md, "The launch plan").
//
// Pure: a shape and the job's host count in, for each host its parent (the launcher, or the agent
// of an earlier host), its index among its parent's children (the order its parent starts them)
// and its depth (1: started by the launcher). Flat: the launcher starts every agent. Tree with
// fan-out k: the launcher starts the first k hosts, each of those the next k, and so on, level by
// level (breadth first), so a host's parent always comes before it and the depth grows as
// log_k(hosts). The launcher runs this plan, and so does the simulator, with the same function.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace pm::link {

enum class launch_shape : std::uint8_t { flat, tree };

struct launch_plan_options {
  launch_shape shape = launch_shape::flat;
  std::uint32_t fanout = 32;  ///< tree: children per agent (and the launcher's); at least 1
};

/// Parent of a host the launcher starts itself.
inline constexpr std::uint32_t by_launcher = std::numeric_limits<std::uint32_t>::max();

struct launch_step {
  std::uint32_t parent = by_launcher;  ///< a host index of the plan, or by_launcher
  std::uint32_t child = 0;             ///< its index among its parent's children
  std::uint32_t depth = 1;             ///< 1: started by the launcher
  friend bool operator==(const launch_step&, const launch_step&) = default;
};

struct launch_plan {
  std::vector<launch_step> hosts;  ///< indexed like the job's hosts (node indices)
  /// The deepest level (0 for no host).
  std::uint32_t depth() const noexcept;
  /// The hosts `parent` starts, in order (by_launcher: the launcher's own).
  std::vector<std::uint32_t> children_of(std::uint32_t parent) const;
};

/// The plan for `hosts` hosts. Throws pm::error(errc::usage) for a tree with fan-out 0.
launch_plan plan_launch(std::uint32_t hosts, const launch_plan_options& options);

/// One host's step of the same plan, in O(depth) time and no memory (for 100,000-host launches
/// that need one host at a time).
launch_step plan_step(std::uint32_t host, const launch_plan_options& options);

}  // namespace pm::link
