// Which PCI devices count as GPUs by vendor and class alone (docs/gpus.md, "What counts as a
// GPU", rule 2): shared by the hwloc reader and the agent's cheap check of a host without a
// summary, so that both call the same machines GPU hosts.
#pragma once

namespace pm::topo {

inline constexpr unsigned pci_vendor_nvidia = 0x10de;
inline constexpr unsigned pci_vendor_amd = 0x1002;
inline constexpr unsigned pci_vendor_intel = 0x8086;

/// NVIDIA's VGA (0x0300) and 3D (0x0302) controllers; AMD's and Intel's 3D, "other display"
/// (0x0380: Instinct, Data Center GPU Max) and accelerators (0x1200). Their VGA is left out: on
/// servers it is the BMC's display, and Intel's is the integrated graphics of a laptop.
constexpr bool gpu_by_pci_class(unsigned vendor, unsigned class_id) noexcept {
  switch (vendor) {
    case pci_vendor_nvidia:
      return class_id == 0x0300 || class_id == 0x0302;
    case pci_vendor_amd:
    case pci_vendor_intel:
      return class_id == 0x0302 || class_id == 0x0380 || class_id == 0x1200;
    default:
      return false;
  }
}

}  // namespace pm::topo
