// pmd-helper's topology reading: libpm-topology.so (hwloc) loaded into the helper, never into pmd.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>

#include "host_shape.hpp"
#include "module_path.hpp"
#include "topology/topology_module.hpp"

namespace pmd {
namespace {

namespace tm = pm::topo::module;

// PM_TOPOLOGY_MODULE, else beside pmd's bin directory (as libpm-pmix.so), else the loader's path.
std::string topology_module_path() {
#ifdef PM_TOPOLOGY_MODULE_DIRS
  return module_path("PM_TOPOLOGY_MODULE", PM_TOPOLOGY_MODULE_DIRS, tm::file);
#else
  return module_path("PM_TOPOLOGY_MODULE", "../lib", tm::file);
#endif
}

}  // namespace

pm::link::host_shape read_topology_module() {
  const auto path = topology_module_path();
  // hwloc's display, OpenCL and libxml2 plugins find nothing a placement needs (as the PMIx
  // server's start says); the ranks' environment was taken before.
  ::setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_gl,hwloc_opencl,hwloc_xml_libxml", 0);
  void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    const char* why = ::dlerror();
    return {"", "cannot load " + path + ": " + (why != nullptr ? why : "?")};
  }
  auto read = reinterpret_cast<tm::read_function>(::dlsym(module, tm::read_symbol));
  if (read == nullptr) return {"", path + " has no " + tm::read_symbol};
  int ok = 0;
  std::unique_ptr<char, void (*)(void*)> text(read(&ok), std::free);
  if (!text) return {"", "out of memory reading the topology"};
  // The module stays loaded: hwloc's libraries would cost their loading again for nothing.
  return ok != 0 ? pm::link::host_shape{text.get(), ""}
                 : pm::link::host_shape{"", std::string("topology: ") + text.get()};
}

}  // namespace pmd
