// libpm-topology.so: the hwloc reader as `pmd-helper topology` loads it (dlopen), only when a job
// asks for its host's shape. hwloc and libudev then never load for a plain job (docs/gpus.md,
// "Cost").
#pragma once

namespace pm::topo::module {

inline constexpr const char* file = "libpm-topology.so";
/// extern "C" char* pm_topology_read(int* ok): this host's summary as to_text writes it (*ok = 1)
/// or one line saying why there is none (*ok = 0); malloc'd, the caller frees it.
inline constexpr const char* read_symbol = "pm_topology_read";
using read_function = char* (*)(int* ok);

}  // namespace pm::topo::module
