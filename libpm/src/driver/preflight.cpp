#include "driver/preflight.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "env/compose.hpp"
#include "pm/error.hpp"
#include "sys/executable.hpp"
#include "text/printable.hpp"

namespace pm::driver {

namespace {

bool all_local(const job_request& req) {
  for (std::uint32_t n = 0; n < req.map.num_nodes(); ++n) {
    if (!req.map.allocation().hosts.at(req.map.host_of_node(n)).local) return false;
  }
  return true;
}

// An app's working directory on this machine, before any rank starts: else the ranks of the apps
// before it would start and be aborted when its first rank's chdir failed.
void check_working_directory(const std::string& wdir) {
  if (wdir.empty()) return;
  const std::string shown = "working directory '" + text::printable(wdir) + "'";
  struct stat st {};
  if (::stat(wdir.c_str(), &st) != 0) {
    const int e = errno;
    throw error(e == ENOENT ? errc::not_found : errc::not_executable,
                shown + (e == ENOENT ? " does not exist" : std::string(": ") + std::strerror(e)));
  }
  if (!S_ISDIR(st.st_mode)) throw error(errc::not_executable, shown + " is not a directory");
  if (::access(wdir.c_str(), X_OK) != 0) {
    throw error(errc::not_executable, shown + " cannot be entered: " + std::strerror(errno));
  }
}

}  // namespace

void check_programs(const job_request& req) {
  const char* path = std::getenv("PATH");
  const std::string search = path != nullptr ? path : "/usr/bin:/bin";
  const bool local = all_local(req);
  if (!local && !req.remote_transport && req.remote.launcher == agent_launcher::srun) {
    const std::string srun =
        req.remote.srun_command.empty() ? "srun" : req.remote.srun_command.front();
    try {
      sys::resolve_executable(srun, search, "");
    } catch (const pm::error& e) {
      throw error(errc::launch,
                  std::string("cannot start the agents of the other nodes with srun: ") + e.what() +
                      " (use --launcher ssh to reach them with ssh)");
    }
  } else if (!local && !req.remote_transport) {
    const std::string agent = req.remote.rsh_agent.empty() ? "ssh" : req.remote.rsh_agent.front();
    try {
      sys::resolve_executable(agent, search, "");
    } catch (const pm::error& e) {
      throw error(errc::launch, std::string("the remote shell command: ") + e.what() +
                                    " (set plm_rsh_agent or PM_RSH_AGENT)");
    }
  }
  for (std::uint32_t i = 0; i < req.apps.size(); ++i) {
    const auto& app = req.apps[i];
    if (app.argv.empty()) throw error(errc::launch, "an app context has no program");
    if (!local) continue;
    check_working_directory(app.wdir);
    sys::resolve_executable(app.argv[0], program_path(req.env, i), app.wdir);
  }
}

void anchor_working_directories(job_request& request) {
  std::error_code ec;
  const auto here = std::filesystem::current_path(ec);
  if (ec) return;  // this process's own directory is gone: left as given
  for (auto& app : request.apps) {
    if (app.wdir.empty() || app.wdir.front() == '/') continue;
    app.wdir = (here / app.wdir).lexically_normal().string();
  }
}

void check_request_shape(const job_request& request) {
  const auto& map = request.map;
  if (map.size() == 0) throw error(errc::usage, "the job request's rank map has no rank");
  if (request.apps.size() != map.num_apps()) {
    throw error(errc::usage, "the job request has " + std::to_string(request.apps.size()) +
                                 " app contexts for a rank map of " +
                                 std::to_string(map.num_apps()) +
                                 " (job_request::apps must be the mapped job's apps)");
  }
  for (std::size_t i = 0; i < request.apps.size(); ++i) {
    if (request.apps[i].argv.empty() || request.apps[i].argv.front().empty()) {
      throw error(errc::usage, "the job request's app " + std::to_string(i) + " has no program");
    }
  }
}

void check_restart_policy(const job_request& request) {
  const auto& r = request.restarts;
  if (!r.host_discovery.empty() && r.max_restarts == 0) {
    throw error(errc::usage,
                "--host-discovery-script needs --max-restarts: hosts join when the job restarts");
  }
  if (!r.host_discovery.empty() && r.per_rank) {
    throw error(errc::usage,
                "--host-discovery-script goes with whole-job restarts; --enable-recovery restarts "
                "single ranks where they ran");
  }
  if (r.min_hosts == 0) return;
  if (r.max_restarts == 0) {
    throw error(errc::usage, "--min-hosts " + std::to_string(r.min_hosts) +
                                 " needs --max-restarts: the job goes on with fewer hosts only "
                                 "when it restarts");
  }
  if (r.per_rank) {
    throw error(errc::usage, "--min-hosts " + std::to_string(r.min_hosts) +
                                 " goes with whole-job restarts; --enable-recovery restarts "
                                 "single ranks and never shrinks the job");
  }
  const auto nodes = request.map.num_nodes();
  if (r.min_hosts > nodes) {
    throw error(errc::usage, "--min-hosts " + std::to_string(r.min_hosts) + " is above the " +
                                 std::to_string(nodes) + (nodes == 1 ? " host" : " hosts") +
                                 " the job runs on");
  }
}

}  // namespace pm::driver
