// The shape of one host: a compact, plain-data summary of what hwloc found there.
//
// An agent reads its host once (libpm/src/topology/read_hwloc.hpp, the one place that links
// hwloc) and the summary travels as a short string (to_text / topology_from_text), so that the
// launcher, the simulator and the tests decide placements without hwloc (docs/gpus.md).
//
// Indexes: packages, NUMA nodes, L3 caches and cores are numbered by hwloc's logical order (what
// `hwloc-calc` and `lstopo -l` call L#); PUs keep their OS index (P#), the number
// sched_setaffinity, /proc/<pid>/status and Open MPI's cpu lists use. Only PUs that are online and
// allowed appear.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pm/export.hpp"

namespace pm::topo {

/// "No such object": a core outside any L3 cache, a GPU whose locality hwloc does not know.
inline constexpr std::uint32_t none = 0xffffffffu;

/// One core: where it sits and its hardware threads (PUs), which are stored contiguously.
struct core {
  std::uint32_t package = none;  ///< logical package index
  std::uint32_t numa = none;     ///< logical index of its first local NUMA node
  std::uint32_t l3 = none;       ///< logical L3 cache index
  std::uint32_t first_pu = 0;    ///< index into host_topology::pu_os_index
  std::uint32_t pu_count = 0;    ///< online, allowed PUs of this core (at least 1)

  friend bool operator==(const core&, const core&) = default;
};

enum class gpu_vendor : std::uint8_t { nvidia, amd, intel, other };

/// One GPU. `index` is its number among the host's GPUs of the same vendor in PCI bus order, which
/// is what CUDA (with CUDA_DEVICE_ORDER=PCI_BUS_ID), NVML, ROCm and Level Zero (with
/// ZE_ENABLE_PCI_ID_DEVICE_ORDER=1) call it.
struct gpu {
  gpu_vendor vendor = gpu_vendor::other;
  std::uint32_t index = 0;
  std::string pci_bus_id;     ///< "0000:84:00.0"
  std::string uuid;           ///< "GPU-d3977428-..." when hwloc's NVML/RSMI/... backend knew it
  std::uint32_t numa = none;  ///< logical index of the closest NUMA node
  std::uint32_t package = none;

  friend bool operator==(const gpu&, const gpu&) = default;
};

enum class nic_kind : std::uint8_t {
  infiniband,  ///< an InfiniBand HCA (PCI class 0x0207, or an IPoIB interface)
  ethernet,    ///< an Ethernet NIC (possibly RDMA-capable: RoCE, iWARP, usNIC)
  other,       ///< anything else: Slingshot (hsn*, cxi*), Omni-Path, ...
};

/// One network adapter (a PCI function with a network or OpenFabrics device on it).
struct nic {
  std::string name;    ///< what NCCL_IB_HCA and UCX name it: the RDMA device, else the interface
  std::string netdev;  ///< the kernel interface ("ib0", "eth0"); empty when it has none
  std::string rdma;    ///< the RDMA device ("mlx5_0"); empty when it is not RDMA-capable
  nic_kind kind = nic_kind::other;
  std::uint32_t numa = none;
  std::uint32_t package = none;

  friend bool operator==(const nic&, const nic&) = default;
};

/// The summary of one host. Small (a few hundred bytes as text for a 2-socket node) and plain:
/// copy it, compare it, serialise it.
struct host_topology {
  std::uint32_t packages = 0;
  std::uint32_t l3caches = 0;
  /// OS index (P#) of each NUMA node, by logical index; memory-only nodes (no core) included.
  std::vector<std::uint32_t> numa_os_index;
  std::vector<core> cores;                 ///< by logical index
  std::vector<std::uint32_t> pu_os_index;  ///< OS index of every PU, grouped by core, logical order
  std::vector<gpu> gpus;                   ///< by vendor, then PCI bus id
  std::vector<nic> nics;                   ///< in hwloc's order (PCI order)

  std::uint32_t numa_nodes() const noexcept {
    return static_cast<std::uint32_t>(numa_os_index.size());
  }
  /// Number of GPUs of one vendor.
  std::uint32_t gpus_of(gpu_vendor vendor) const noexcept;

  friend bool operator==(const host_topology&, const host_topology&) = default;
};

PM_API std::string_view to_string(gpu_vendor vendor) noexcept;
PM_API std::string_view to_string(nic_kind kind) noexcept;

/// The summary as one printable line (no spaces, no newline), versioned ("pmtopo1;..."): what the
/// agent's hello carries and what tests and JSON embed. Stable: a later version reads it.
PM_API std::string to_text(const host_topology& topology);

/// Reads to_text's line back (a trailing line end is ignored). Throws pm::error(errc::parse)
/// naming the field for anything it did
/// not write (it comes from another host: sizes and indexes are checked, never trusted).
PM_API host_topology topology_from_text(std::string_view text);

/// Checks the summary's invariants (every index in range, each core's PUs inside pu_os_index, no
/// PU twice); throws pm::error(errc::parse) naming the first broken one. topology_from_text calls
/// it; the hwloc reader's output and hand-built summaries in tests pass it.
PM_API void check(const host_topology& topology);

}  // namespace pm::topo
