// The PMIx server as pmd-helper loads it: a shared module (libpm-pmix.so) that pmd-helper opens
// with dlopen the first time a rank connects (docs/pmix.md, "The server's process"). pmd itself
// neither links nor loads libpmix: it is static and starts pmd-helper only for a job whose ranks
// call PMIx (libpmix pulls in hwloc, libevent, munge). The module and pmd-helper are built
// together, from the same sources and compiler, so the interface is a C++ class; nothing throws
// across it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agent/pmix/pmix_host.hpp"

namespace pm::agent::pmix {

/// pmix_host.hpp's `server`, behind virtual calls. Every member is called on pmd-helper's thread.
class hosted_server {
 public:
  virtual ~hosted_server() = default;  ///< stops the server
  virtual int event_fd() const noexcept = 0;
  /// Runs the queued upcalls' callbacks (which must not throw); "" or what failed.
  virtual std::string run_pending() noexcept = 0;
  virtual std::string register_job(const job_info& job) noexcept = 0;
  /// Registers local rank `rank` as a client and gives its variables; "" or what failed.
  virtual std::string rank_env(const std::string& nspace, std::uint32_t rank,
                               std::vector<std::string>& env) noexcept = 0;
  /// server::local_modex: `done` runs inside a later run_pending().
  virtual void local_modex(const proc& target,
                           std::function<void(status, std::vector<char>)> done) noexcept = 0;
  /// server::notify; "" or what failed.
  virtual std::string notify(const event_notice& notice) noexcept = 0;
  virtual std::chrono::nanoseconds init_time() const noexcept = 0;
  /// server::take_notices (empty if that failed).
  virtual std::vector<std::string> take_notices() noexcept = 0;
  /// server::deregister_job (PMIx_server_deregister_nspace: the namespace and its clients; its
  /// directories removed); "" or what failed.
  virtual std::string deregister_job(const std::string& nspace) noexcept = 0;
};

/// The module's one exported function: starts the server, or returns null and says why.
using start_function = hosted_server* (*)(const options& opts, std::string& error) noexcept;
/// v2: options::on grew the spawn, publish/lookup and connect callbacks; v3: options grew
/// listener_path and tool_address, hosted_server take_notices; v4: hosted_server deregister_job
/// (restarts in place). An older module is refused.
inline constexpr const char* start_symbol = "pm_pmix_start_v4";
/// The module's file name; pmd looks beside its own lib directory (PM_PMIX_MODULE overrides).
inline constexpr const char* module_file = "libpm-pmix.so";

}  // namespace pm::agent::pmix
