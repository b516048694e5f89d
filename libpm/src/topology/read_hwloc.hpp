// Reading a host's topology with hwloc: the one place in libpm that links hwloc (the library
// pm_hwloc, libpm/CMakeLists.txt), so the launcher and the simulator never need it.
//
// What counts as a GPU and a NIC, and how they are numbered, is docs/gpus.md's "What the agent
// reads"; in short: a PCI device is a GPU when a compute backend (CUDA, NVML, RSMI, Level Zero,
// OpenCL) names it, or by class (NVIDIA 0x0300/0x0302; AMD and Intel 0x0302/0x0380/0x1200, not
// their VGA 0x0300, which on servers is the BMC's display). NICs are the PCI functions carrying a
// network or OpenFabrics device.
#pragma once

#include <string>

#include "pm/topology.hpp"

namespace pm::topo {

/// This machine as hwloc sees it (online, allowed PUs only), or the machine described by the XML
/// file named in HWLOC_XMLFILE when that is set (hwloc's own rule; the tests' fake hosts use it).
/// Throws pm::error(errc::system) when hwloc cannot load a topology.
host_topology read_this_host();

/// The machine an hwloc XML export describes (lstopo -of xml, hwloc's test machines).
host_topology read_topology_xml(const std::string& path);

}  // namespace pm::topo
