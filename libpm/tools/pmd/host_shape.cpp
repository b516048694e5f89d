#include "host_shape.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "agent/host_facts.hpp"
#include "module_path.hpp"
#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/topology.hpp"
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

// The cpus this process may run on, once.
const std::vector<bool>& allowed_cpus() {
  static const std::vector<bool> allowed = [] {
    std::vector<bool> out;
    for (int n = 1024; n <= (1 << 16); n *= 2) {
      std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(n),
                                                           [](cpu_set_t* s) { CPU_FREE(s); });
      const auto size = CPU_ALLOC_SIZE(n);
      if (::sched_getaffinity(0, size, set.get()) != 0) continue;  // EINVAL: a bigger mask
      out.resize(static_cast<std::size_t>(n));
      for (int c = 0; c < n; ++c)
        out[static_cast<std::size_t>(c)] = CPU_ISSET_S(c, size, set.get());
      break;
    }
    return out;
  }();
  return allowed;
}

pm::link::host_shape read_shape() {
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

}  // namespace

pm::link::host_shape read_host_shape() {
  static const pm::link::host_shape shape = read_shape();  // read once per host
  return shape;
}

std::vector<std::uint32_t> bindable_cpus(const std::string& list, std::string& why) {
  if (list.empty()) return {};
  std::vector<std::uint32_t> cpus;
  try {
    cpus = pm::topo::parse_cpu_list(list);
  } catch (const pm::error& e) {
    why = e.what();
    return {};
  }
  const auto& allowed = allowed_cpus();
  for (const auto c : cpus) {
    if (c >= allowed.size() || !allowed[c]) {
      why = "cpu " + std::to_string(c) + " of " + list + " is not one this host lets pmd use";
      return {};
    }
  }
  return cpus;
}

}  // namespace pmd
