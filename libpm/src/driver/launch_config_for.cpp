#include "driver/launch_config_for.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "driver/decision_log.hpp"
#include "transport/host_address.hpp"

namespace pm::driver {

namespace {

bool is_open_descriptor(int fd) {
  return fd >= 0 && ::fcntl(fd, F_GETFD) >= 0;
}

}  // namespace

// One getrandom() call: std::random_device probes the CPU (cpuid, which traps in a virtual
// machine) before its first number, on every launch.
std::uint64_t fresh_nonce() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

launch::launch_config launch_config_for(const job_request& req, const job_callbacks& cb,
                                        std::uint64_t nonce, std::string agent_path) {
  launch::launch_config c;
  c.request = req;
  c.request.remote_transport.reset();
  c.request.prestarted.reset();
  c.nonce = nonce;
  c.seed = fresh_nonce();
  c.local_agent_path = std::move(agent_path);
  std::error_code ec;
  c.cwd = std::filesystem::current_path(ec).string();
  char ns[64];
  std::snprintf(ns, sizeof ns, "pmrun.%d.%08llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce & 0xffffffffu));
  c.pmix_namespace = ns;
  c.stdin_of.assign(req.map.size(), launch::stdin_source::none);
  for (std::uint32_t r = 0; r < req.map.size(); ++r) {
    if (!req.per_rank_stdin.empty()) {
      if (r < req.per_rank_stdin.size() && is_open_descriptor(req.per_rank_stdin[r])) {
        c.stdin_of[r] = launch::stdin_source::own;
      }
    } else if (static_cast<std::int64_t>(r) == req.stdin_rank && is_open_descriptor(req.stdin_fd)) {
      c.stdin_of[r] = launch::stdin_source::shared;
    }
  }
  c.embedder_transport = req.remote_transport != nullptr;
  c.claims_spawn_slots = req.remote_transport && req.remote_transport->claims_slots();
  c.pick_address = net::pick_address;
  c.rank_states = static_cast<bool>(cb.on_rank_state);
  c.decisions = driver::decision_log_from_environment();
  // Only prints: called inside the launcher's step.
  if (auto line = cb.on_binding ? cb.on_binding : cb.on_message) {
    c.report_binding = [line = std::move(line)](const std::string& l) { line(l); };
  }
  c.planned = cb.on_planned;
  return c;
}

}  // namespace pm::driver
