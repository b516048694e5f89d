// rank_environment (pm/host_binding.hpp): what a rank is told about its GPUs and NIC.
//
// Indexes are the vendor's PCI-order numbers (host_topology::gpu::index), so the order variables
// are set with them: CUDA numbers fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, Level Zero
// by driver order unless ZE_ENABLE_PCI_ID_DEVICE_ORDER=1. ROCm numbers its GPUs in KFD order,
// which follows the PCI bus on the machines it supports. HIP_VISIBLE_DEVICES is not set: HIP
// applies it inside ROCR_VISIBLE_DEVICES' list, so physical indexes in both would hide GPUs.
#include <algorithm>
#include <string>
#include <vector>

#include "pm/host_binding.hpp"

namespace pm::topo {

std::vector<std::pair<std::string, std::string>> rank_environment(const host_topology& t,
                                                                  const host_plan& plan,
                                                                  std::uint32_t local_rank,
                                                                  const gpu_option& gpus) {
  std::vector<std::pair<std::string, std::string>> env;
  const auto own = plan.gpus(local_rank);
  if (!own.empty()) {
    const gpu_vendor vendor = t.gpus[own[0]].vendor;
    std::vector<std::uint32_t> shown(own.begin(), own.end());
    // Reorder: the rank's own GPUs first, then its host's others, so that CUDA IPC and peer access
    // to the other ranks' GPUs keep working. Level Zero keeps its own order whatever the mask
    // says, so there the rank sees only its own.
    if (gpus.reorder && vendor != gpu_vendor::intel) {
      for (std::uint32_t g = 0; g < t.gpus.size(); ++g) {
        if (t.gpus[g].vendor == vendor && std::find(own.begin(), own.end(), g) == own.end()) {
          shown.push_back(g);
        }
      }
    }
    std::string list;
    for (auto g : shown) {
      if (!list.empty()) list += ',';
      list += std::to_string(t.gpus[g].index);
    }
    switch (vendor) {
      case gpu_vendor::nvidia:
        env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        env.emplace_back("CUDA_VISIBLE_DEVICES", list);
        break;
      case gpu_vendor::amd:
        env.emplace_back("ROCR_VISIBLE_DEVICES", list);
        break;
      case gpu_vendor::intel:
        env.emplace_back("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1");
        env.emplace_back("ZE_AFFINITY_MASK", list);
        break;
      case gpu_vendor::other:
        break;
    }
  }
  // A host with one NIC needs no choice; an Ethernet-only NIC is not named (its locality says
  // nothing about which network it is cabled to).
  const auto n = plan.nic(local_rank);
  if (n != none && t.nics.size() > 1 && !t.nics[n].rdma.empty()) {
    env.emplace_back("NCCL_IB_HCA", "=" + t.nics[n].rdma);  // '=': this one, not a prefix
    env.emplace_back("UCX_NET_DEVICES", t.nics[n].rdma + ":1");
  }
  return env;
}

}  // namespace pm::topo
