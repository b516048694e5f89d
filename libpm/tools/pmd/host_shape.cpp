#include "host_shape.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "agent/host_facts.hpp"
#include "helper_program.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/topology.hpp"

namespace pmd {
namespace {

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

// pmd-helper reads it (pmd links statically and loads nothing): its stdout is the summary, or
// with exit code 1 the line that says why there is none.
pm::link::host_shape run_topology_helper() {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return {"", std::string("topology: pipe: ") + std::strerror(errno)};
  }
  pm::link::owned_fd readable(out[0]), writable(out[1]);
  std::string why;
  const pid_t pid = spawn_helper({"topology"}, {{writable.get(), STDOUT_FILENO}}, why);
  if (pid < 0) return {"", "topology: " + why};
  writable.reset();
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(readable.get(), buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {text, ""};
  if (WIFEXITED(status) && WEXITSTATUS(status) == 1) return {"", text};
  return {"",
          "topology: " + helper_path() +
              (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                   : " exited with code " + std::to_string(WEXITSTATUS(status)))};
}

}  // namespace

pm::link::host_shape read_host_shape() {
  static const pm::link::host_shape shape = run_topology_helper();  // read once per host
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
