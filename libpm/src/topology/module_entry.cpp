// The entry point of libpm-topology.so (topology_module.hpp): no C++ crosses it.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "topology/read_hwloc.hpp"
#include "topology/topology_module.hpp"

extern "C" __attribute__((visibility("default"))) char* pm_topology_read(int* ok) noexcept {
  std::string out;
  try {
    out = pm::topo::to_text(pm::topo::read_this_host());
    *ok = 1;
  } catch (const std::exception& e) {
    out = e.what();
    *ok = 0;
  }
  return ::strdup(out.c_str());
}
