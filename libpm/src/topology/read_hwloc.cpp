// hwloc → host_topology (read_hwloc.hpp). Everything hwloc-specific stays in this file.
#include "topology/read_hwloc.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pm/error.hpp"
#include "topology/gpu_pci_class.hpp"

namespace pm::topo {

namespace {

using topology_ptr = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

constexpr unsigned short vendor_nvidia = pci_vendor_nvidia;
constexpr unsigned short vendor_amd = pci_vendor_amd;
constexpr unsigned short vendor_intel = pci_vendor_intel;

gpu_vendor vendor_of(unsigned short pci_vendor) {
  switch (pci_vendor) {
    case vendor_nvidia:
      return gpu_vendor::nvidia;
    case vendor_amd:
      return gpu_vendor::amd;
    case vendor_intel:
      return gpu_vendor::intel;
    default:
      return gpu_vendor::other;
  }
}

gpu_vendor vendor_from_text(const char* text) {
  const std::string_view s = text ? text : "";
  if (s.find("NVIDIA") != s.npos || s.find("nVidia") != s.npos) return gpu_vendor::nvidia;
  if (s.find("AMD") != s.npos || s.find("Advanced Micro Devices") != s.npos) {
    return gpu_vendor::amd;
  }
  if (s.find("Intel") != s.npos) return gpu_vendor::intel;
  return gpu_vendor::other;
}

bool starts_with(const char* s, std::string_view prefix) {
  return s && std::string_view(s).substr(0, prefix.size()) == prefix;
}

/// The compute backends whose devices are GPUs a rank can be given, best first (used to pick one
/// backend when osdevs have no PCI device to group them by).
int backend_rank(hwloc_obj_t osdev) {
  if (osdev->type != HWLOC_OBJ_OS_DEVICE) return -1;
  const auto type = osdev->attr->osdev.type;
  if (type != HWLOC_OBJ_OSDEV_COPROC && type != HWLOC_OBJ_OSDEV_GPU) return -1;
  const char* backend = hwloc_obj_get_info_by_name(osdev, "Backend");
  const auto is = [&](const char* b, std::string_view prefix) {
    return (backend && std::strcmp(backend, b) == 0) || starts_with(osdev->name, prefix);
  };
  if (is("NVML", "nvml")) return 0;
  if (is("CUDA", "cuda")) return 1;
  if (is("RSMI", "rsmi")) return 2;
  if (is("LevelZero", "ze")) return 3;
  if (is("OpenCL", "opencl")) {
    const char* kind = hwloc_obj_get_info_by_name(osdev, "OpenCLDeviceType");
    return kind && std::strcmp(kind, "GPU") == 0 ? 4 : -1;
  }
  return -1;  // a DRM card ("card0") alone says nothing: the BMC's VGA has one too
}

/// The first "...UUID" info of a compute osdev (NVIDIAUUID, AMDUUID, LevelZeroUUID, ...).
std::string uuid_of(hwloc_obj_t osdev) {
  for (unsigned i = 0; i < osdev->infos_count; ++i) {
    const std::string_view name = osdev->infos[i].name;
    if (name.size() >= 4 && name.substr(name.size() - 4) == "UUID") return osdev->infos[i].value;
  }
  return {};
}

/// The nearest NUMA node: the first memory child of the object or of its closest ancestor that
/// has one (memory-side caches skipped). none when none is attached below the root.
std::uint32_t nearest_numa(hwloc_obj_t obj) {
  for (; obj; obj = obj->parent) {
    for (hwloc_obj_t m = obj->memory_first_child; m; m = m->memory_first_child) {
      if (m->type == HWLOC_OBJ_NUMANODE) return m->logical_index;
    }
  }
  return none;
}

std::uint32_t enclosing(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_type_t type) {
  if (obj->type == type) return obj->logical_index;
  const auto* a = hwloc_get_ancestor_obj_by_type(topo, type, obj);
  return a ? a->logical_index : none;
}

std::string bus_id(hwloc_obj_t pci) {
  char text[32];
  const auto& p = pci->attr->pcidev;
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", p.domain, p.bus, p.dev, p.func);
  return text;
}

/// Whether a PCI device with no compute osdev is a GPU by its class (read_hwloc.hpp says why).
bool gpu_by_class(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  return gpu_by_pci_class(p.vendor_id, p.class_id);
}

void read_cpus(hwloc_topology_t topo, host_topology& t) {
  t.packages =
      static_cast<std::uint32_t>(std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE)));
  t.l3caches =
      static_cast<std::uint32_t>(std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE)));
  const int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa; ++i) {
    t.numa_os_index.push_back(
        hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i))->os_index);
  }
  // PUs in logical order: a core's PUs are consecutive. A PU outside any Core object (some
  // exports have none) counts as a core of its own.
  const int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  hwloc_obj_t current = nullptr;
  for (int i = 0; i < pus; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    hwloc_obj_t owner = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
    if (!owner || owner != current) {
      hwloc_obj_t where = owner ? owner : pu;
      core c;
      c.package = enclosing(topo, where, HWLOC_OBJ_PACKAGE);
      c.numa = nearest_numa(where);
      c.l3 = enclosing(topo, where, HWLOC_OBJ_L3CACHE);
      c.first_pu = static_cast<std::uint32_t>(t.pu_os_index.size());
      t.cores.push_back(c);
      current = owner;
    }
    t.pu_os_index.push_back(pu->os_index);
    ++t.cores.back().pu_count;
  }
}

void read_gpus(hwloc_topology_t topo, host_topology& t) {
  // By PCI device: a compute osdev makes it a GPU, else its class may.
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo, pci));) {
    hwloc_obj_t best = nullptr;
    for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
      const int r = backend_rank(child);
      if (r >= 0 &&
          (!best || r < backend_rank(best) || (uuid_of(best).empty() && !uuid_of(child).empty()))) {
        best = child;
      }
    }
    if (!best && !gpu_by_class(pci->attr->pcidev)) continue;
    hwloc_obj_t home = hwloc_get_non_io_ancestor_obj(topo, pci);
    gpu g;
    g.vendor = vendor_of(pci->attr->pcidev.vendor_id);
    g.pci_bus_id = bus_id(pci);
    for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
      if (backend_rank(child) >= 0 && g.uuid.empty()) g.uuid = uuid_of(child);
    }
    g.numa = nearest_numa(home);
    g.package = enclosing(topo, home, HWLOC_OBJ_PACKAGE);
    t.gpus.push_back(std::move(g));
  }
  // Compute osdevs hwloc attached to no PCI device (PCI discovery off): one backend per vendor,
  // the best present, so that cuda0, nvml0 and opencl0d0 of one GPU count once.
  std::map<std::pair<gpu_vendor, int>, std::vector<hwloc_obj_t>> loose;
  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo, os));) {
    const int r = backend_rank(os);
    if (r < 0 || (os->parent && os->parent->type == HWLOC_OBJ_PCI_DEVICE)) continue;
    loose[{vendor_from_text(hwloc_obj_get_info_by_name(os, "GPUVendor")), r}].push_back(os);
  }
  gpu_vendor done = gpu_vendor::other;
  bool any = false;
  for (const auto& [key, devices] : loose) {
    if (any && key.first == done) continue;  // a worse backend of a vendor already taken
    any = true;
    done = key.first;
    for (hwloc_obj_t os : devices) {
      hwloc_obj_t home = hwloc_get_non_io_ancestor_obj(topo, os);
      gpu g;
      g.vendor = key.first;
      const char* busid = hwloc_obj_get_info_by_name(os, "PCIBusID");
      g.pci_bus_id = busid ? busid : "";
      g.uuid = uuid_of(os);
      g.numa = nearest_numa(home);
      g.package = enclosing(topo, home, HWLOC_OBJ_PACKAGE);
      t.gpus.push_back(std::move(g));
    }
  }
  std::stable_sort(t.gpus.begin(), t.gpus.end(), [](const gpu& a, const gpu& b) {
    return a.vendor != b.vendor ? a.vendor < b.vendor : a.pci_bus_id < b.pci_bus_id;
  });
  std::uint32_t per_vendor[4] = {0, 0, 0, 0};
  for (auto& g : t.gpus) g.index = per_vendor[static_cast<int>(g.vendor)]++;
}

nic_kind kind_of(hwloc_obj_t pci, const nic& n) {
  if (starts_with(n.netdev.c_str(), "hsn") || starts_with(n.rdma.c_str(), "cxi")) {
    return nic_kind::other;
  }
  if (starts_with(n.netdev.c_str(), "ib")) return nic_kind::infiniband;
  if (pci && pci->type == HWLOC_OBJ_PCI_DEVICE) {
    if (pci->attr->pcidev.class_id == 0x0207) return nic_kind::infiniband;
    if (pci->attr->pcidev.class_id == 0x0200) return nic_kind::ethernet;
  }
  if (starts_with(n.netdev.c_str(), "eth") || starts_with(n.netdev.c_str(), "en")) {
    return nic_kind::ethernet;
  }
  return nic_kind::other;
}

void read_nics(hwloc_topology_t topo, host_topology& t) {
  // One NIC per parent of network/OpenFabrics osdevs (a PCI function), in hwloc's order.
  t.nics.clear();
  std::map<std::size_t, bool> ipoib;
  std::vector<hwloc_obj_t> parents;
  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo, os));) {
    const auto type = os->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    const auto at = std::find(parents.begin(), parents.end(), os->parent);
    const std::size_t i = static_cast<std::size_t>(at - parents.begin());
    if (at == parents.end()) {
      parents.push_back(os->parent);
      t.nics.emplace_back();
    }
    nic& n = t.nics[i];
    std::string& slot = type == HWLOC_OBJ_OSDEV_NETWORK ? n.netdev : n.rdma;
    if (slot.empty() && os->name) slot = os->name;
    // A VPI adapter has an IPoIB port and an Ethernet one: the IB port says what it is.
    if (type == HWLOC_OBJ_OSDEV_NETWORK && starts_with(os->name, "ib")) ipoib[i] = true;
  }
  for (std::size_t i = 0; i < parents.size(); ++i) {
    nic& n = t.nics[i];
    n.name = n.rdma.empty() ? n.netdev : n.rdma;
    n.kind = ipoib[i] ? nic_kind::infiniband : kind_of(parents[i], n);
    hwloc_obj_t home = hwloc_get_non_io_ancestor_obj(topo, parents[i]);
    n.numa = nearest_numa(home);
    n.package = enclosing(topo, home, HWLOC_OBJ_PACKAGE);
  }
}

host_topology read(const char* xml_path) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw pm::error(errc::system, "hwloc: cannot start");
  topology_ptr topo(raw, &hwloc_topology_destroy);
  // Every PCI device and OS device: GPUs and NICs are found among them here, not by hwloc's idea
  // of "important".
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (xml_path && hwloc_topology_set_xml(raw, xml_path) != 0) {
    throw pm::error(errc::system,
                    std::string("hwloc: cannot read the topology file '") + xml_path + "'");
  }
  if (hwloc_topology_load(raw) != 0) {
    throw pm::error(errc::system, std::string("hwloc: cannot load the topology") +
                                      (xml_path ? std::string(" of '") + xml_path + "'" : ""));
  }
  host_topology t;
  read_cpus(raw, t);
  read_gpus(raw, t);
  read_nics(raw, t);
  check(t);
  return t;
}

}  // namespace

host_topology read_this_host() {
  return read(nullptr);
}

host_topology read_topology_xml(const std::string& path) {
  return read(path.c_str());
}

}  // namespace pm::topo
