// The summary's small helpers and its invariants (pm/topology.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/topology.hpp"

namespace pm::topo {

namespace {

[[noreturn]] void broken(const std::string& what) {
  throw pm::error(errc::parse, "host topology: " + what);
}

void check_index(std::uint32_t value, std::uint32_t count, const char* what, std::size_t owner,
                 const char* owner_kind) {
  if (value != none && value >= count) {
    broken(std::string(owner_kind) + " " + std::to_string(owner) + " names " + what + " " +
           std::to_string(value) + " of " + std::to_string(count));
  }
}

}  // namespace

std::uint32_t host_topology::gpus_of(gpu_vendor vendor) const noexcept {
  return static_cast<std::uint32_t>(
      std::count_if(gpus.begin(), gpus.end(), [&](const gpu& g) { return g.vendor == vendor; }));
}

std::string_view to_string(gpu_vendor vendor) noexcept {
  switch (vendor) {
    case gpu_vendor::nvidia:
      return "nvidia";
    case gpu_vendor::amd:
      return "amd";
    case gpu_vendor::intel:
      return "intel";
    case gpu_vendor::other:
      break;
  }
  return "other";
}

std::string_view to_string(nic_kind kind) noexcept {
  switch (kind) {
    case nic_kind::infiniband:
      return "infiniband";
    case nic_kind::ethernet:
      return "ethernet";
    case nic_kind::other:
      break;
  }
  return "other";
}

void check(const host_topology& t) {
  std::uint32_t next_pu = 0;
  for (std::size_t i = 0; i < t.cores.size(); ++i) {
    const core& c = t.cores[i];
    check_index(c.package, t.packages, "package", i, "core");
    check_index(c.numa, t.numa_nodes(), "NUMA node", i, "core");
    check_index(c.l3, t.l3caches, "L3 cache", i, "core");
    if (c.pu_count == 0) broken("core " + std::to_string(i) + " has no PU");
    if (c.first_pu != next_pu) broken("core " + std::to_string(i) + "'s PUs are not contiguous");
    if (c.pu_count > t.pu_os_index.size() - next_pu) {
      broken("core " + std::to_string(i) + " names PUs beyond the PU list");
    }
    next_pu += c.pu_count;
  }
  if (next_pu != t.pu_os_index.size()) broken("PUs outside every core");
  std::vector<std::uint32_t> sorted = t.pu_os_index;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) broken("a PU twice");
  std::uint32_t seen[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const gpu& g = t.gpus[i];
    check_index(g.numa, t.numa_nodes(), "NUMA node", i, "GPU");
    check_index(g.package, t.packages, "package", i, "GPU");
    auto& expected = seen[static_cast<int>(g.vendor) & 3];
    if (g.index != expected) {
      broken("GPU " + std::to_string(i) + " has index " + std::to_string(g.index) + ", expected " +
             std::to_string(expected) + " (its vendor's GPUs are numbered in order)");
    }
    ++expected;
    if (i > 0 && t.gpus[i - 1].vendor > g.vendor) broken("GPUs not grouped by vendor");
  }
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    const nic& n = t.nics[i];
    check_index(n.numa, t.numa_nodes(), "NUMA node", i, "NIC");
    check_index(n.package, t.packages, "package", i, "NIC");
    if (n.name.empty()) broken("NIC " + std::to_string(i) + " has no name");
  }
}

}  // namespace pm::topo
