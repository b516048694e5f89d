// The simulated hosts' shapes (docs/simulator.md, "Topologies"): what each agent answers when the
// job asks for its host's topology, and how a scenario prints its binding options back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pm/sim/scenario.hpp"

namespace pm::sim {

/// Throws pm::error(errc::usage) when a summary does not parse or names a host at or above
/// `hosts`, or a host is named twice.
void check_topologies(const scenario& s, std::uint32_t hosts);

/// "--map-by" for the scenario's mapping: the within-host form when one was given, else the
/// across-hosts one; empty for the default (slot).
std::string map_by_arg(const mapping_policy& m);

/// Appends --rank-by, --bind-to, --cpus-per-rank, --gpus-per-rank, --report-bindings, --topology
/// and --host-topology as they differ from the defaults.
void append_topology_args(const scenario& s, std::vector<std::string>& args);

}  // namespace pm::sim
