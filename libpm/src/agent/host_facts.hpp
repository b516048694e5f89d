// What an agent tells the launcher about its host in its hello: its name, the addresses other
// hosts may reach it at, and a TCP port free there (MASTER_PORT when rank 0 runs on it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pm::agent {

/// gethostname(), or "localhost" if it fails.
std::string host_name();

/// Non-loopback IPv4 addresses of interfaces that are up, as "ADDR%IFNAME". The address an ssh
/// session reached this host on (SSH_CONNECTION's third field) comes first: the launcher reached
/// it there, so the other hosts most likely can too.
std::vector<std::string> reachable_addresses();

/// An RDMA device is there (/sys/class/infiniband, /sys/class/cxi): Open MPI may use more than TCP.
bool has_rdma_devices();

/// A GPU is there, by a cheap look where no hwloc summary was read (docs/pmix.md, "GPU hosts"):
/// an NVIDIA device node (/dev/nvidia0, ...; a container shows only its own), AMD's compute
/// driver (/dev/kfd), or a DRM device whose PCI vendor and class make it a GPU
/// (topo::gpu_by_pci_class: not a BMC's display, not Intel's integrated graphics).
bool has_gpu_devices();

/// A TCP port free on the first of `addrs` (bound to port 0, read, released); 0 if none.
std::uint16_t free_port(const std::vector<std::string>& addrs);

}  // namespace pm::agent
