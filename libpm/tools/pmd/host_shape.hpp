// This host's shape for the launcher (docs/gpus.md): read once, when a job first asks, through
// pmd-helper, which loads libpm-topology.so (hwloc), and whether a rank's planned cpus may be
// applied here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "link/messages.hpp"

namespace pmd {

/// The summary's text, or why there is none (no module, hwloc failed). Runs `pmd-helper
/// topology` on the first call; HWLOC_XMLFILE (hwloc's own) gives this host another machine's
/// shape.
pm::link::host_shape read_host_shape();
/// pmd-helper's side: loads libpm-topology.so and reads this host (topology_module_reader.cpp).
pm::link::host_shape read_topology_module();

/// The cpus of a rank's binding (a cpu list) when every one is a cpu this agent may run on;
/// empty when the list is empty or names cpus this machine does not have or allow (a topology
/// from HWLOC_XMLFILE, a cpuset narrower than the summary): then `why` says which.
std::vector<std::uint32_t> bindable_cpus(const std::string& list, std::string& why);

}  // namespace pmd
