// report_bindings (pm/host_binding.hpp): Open MPI 4's --report-bindings line, so that scripts
// that read mpirun's output read pmrun's. Its shape, as mpirun 4.1 prints it:
//   [HOST:PID] MCW rank R bound to socket S[core C[hwt H]], socket S[core C[hwt H-K]]: MAP
// with C the core's logical index on the whole host, H its threads within the core, and MAP one
// [...] per package, cores separated by '/', a character per thread ('B' bound, '.' not).
#include <algorithm>
#include <string>
#include <vector>

#include "pm/host_binding.hpp"

namespace pm::topo {

std::string binding_text(const host_topology& t, std::span<const std::uint32_t> cpus) {
  std::vector<std::uint32_t> sorted(cpus.begin(), cpus.end());
  std::sort(sorted.begin(), sorted.end());
  const auto bound = [&](std::uint32_t os) {
    return std::binary_search(sorted.begin(), sorted.end(), os);
  };
  if (sorted.empty() || std::all_of(t.pu_os_index.begin(), t.pu_os_index.end(), bound)) return {};
  std::string line;
  for (std::uint32_t c = 0; c < t.cores.size(); ++c) {
    const core& k = t.cores[c];
    std::vector<std::uint32_t> hwts;
    for (std::uint32_t p = 0; p < k.pu_count; ++p) {
      if (bound(t.pu_os_index[k.first_pu + p])) hwts.push_back(p);
    }
    if (hwts.empty()) continue;
    if (!line.empty()) line += ", ";
    line += "socket " + std::to_string(k.package == none ? 0 : k.package) + "[core " +
            std::to_string(c) + "[hwt " + cpu_list(hwts) + "]]";
  }
  line += ":";
  // The map: packages in order (a host without packages is one), cores in order within each.
  const std::uint32_t packages = std::max<std::uint32_t>(t.packages, 1);
  for (std::uint32_t s = 0; s < packages; ++s) {
    std::string cores;
    for (const core& k : t.cores) {
      if ((k.package == none ? 0 : k.package) != s) continue;
      if (!cores.empty()) cores += '/';
      for (std::uint32_t p = 0; p < k.pu_count; ++p) {
        cores += bound(t.pu_os_index[k.first_pu + p]) ? 'B' : '.';
      }
    }
    if (!cores.empty()) line += "[" + cores + "]";
  }
  return line;
}

std::string report_bindings(const host_topology& t, std::string_view host, std::uint32_t pid,
                            std::uint32_t rank, std::span<const std::uint32_t> cpus) {
  std::string line =
      "[" + std::string(host) + ":" + std::to_string(pid) + "] MCW rank " + std::to_string(rank);
  auto where = binding_text(t, cpus);
  if (where.empty()) return line + " is not bound (or bound to all available processors)";
  // --report-bindings puts a space after the colon; --display-map does not (Open MPI 4.1).
  if (const auto colon = where.rfind(':'); colon != std::string::npos) where.insert(colon + 1, " ");
  return line + " bound to " + where;
}

}  // namespace pm::topo
