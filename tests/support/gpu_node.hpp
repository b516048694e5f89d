// A hand-built GPU node for the topology tests and benchmarks: 2 sockets (one NUMA node and L3
// each) of `cores_per_socket` cores x 2 threads (PU c and c + cores), `gpus` NVIDIA GPUs and
// `nics` InfiniBand NICs split evenly over the sockets, in PCI order.
#pragma once

#include <cstdint>
#include <string>

#include "pm/topology.hpp"

namespace pm::test {

inline topo::host_topology gpu_node(std::uint32_t cores_per_socket, std::uint32_t gpus,
                                    std::uint32_t nics) {
  using namespace pm::topo;
  host_topology t;
  t.packages = 2;
  t.l3caches = 2;
  t.numa_os_index = {0, 1};
  const auto cores = 2 * cores_per_socket;
  for (std::uint32_t c = 0; c < cores; ++c) {
    const auto s = c / cores_per_socket;
    t.cores.push_back(core{s, s, s, 2 * c, 2});
    t.pu_os_index.push_back(c);
    t.pu_os_index.push_back(c + cores);
  }
  for (std::uint32_t g = 0; g < gpus; ++g) {
    t.gpus.push_back(gpu{gpu_vendor::nvidia, g, "0000:" + std::to_string(16 + g) + ":00.0",
                         "GPU-" + std::to_string(g), 2 * g / gpus, 2 * g / gpus});
  }
  for (std::uint32_t i = 0; i < nics; ++i) {
    t.nics.push_back(nic{"mlx5_" + std::to_string(i), "ib" + std::to_string(i),
                         "mlx5_" + std::to_string(i), nic_kind::infiniband, 2 * i / nics,
                         2 * i / nics});
  }
  return t;
}

}  // namespace pm::test
