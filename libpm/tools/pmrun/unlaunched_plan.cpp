#include "unlaunched_plan.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "pm/job_plan.hpp"
#include "pm/topology.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pmrun {
namespace {

// This machine's summary as its agent would send it (HWLOC_XMLFILE gives another machine's).
std::string this_host_summary() {
  const auto pmd = pm::local::default_agent_path();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(
      ::popen((pm::ssh::shell_quote(pmd) + " --topology").c_str(), "r"), ::pclose);
  if (!out) throw pm::error(pm::errc::usage, "--do-not-launch: cannot run " + pmd + " --topology");
  std::string text;
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof buffer, out.get())) text.append(buffer, n);
  const int status = ::pclose(out.release());
  if (status != 0 || text.empty()) {
    throw pm::error(pm::errc::usage,
                    "--do-not-launch cannot plan the hosts: " + pmd +
                        " --topology could not read this machine (give --topology-file FILE)");
  }
  return text;
}

}  // namespace

pm::job_plan plan_unlaunched(const pm::run_options& options, const pm::rank_map& map,
                             const pm::mapping_policy& mapping) {
  auto text = options.topology_file.empty() ? this_host_summary()
                                            : pm::read_text_file(options.topology_file);
  pm::topo::host_topology shape;
  try {
    shape = pm::topo::topology_from_text(text);
  } catch (const pm::error& e) {
    const auto from = options.topology_file.empty() ? std::string("this machine's pmd")
                                                    : "--topology-file " + options.topology_file;
    throw pm::error(pm::errc::usage, from + ": " + e.what());
  }
  return pm::plan_job(map, mapping.host,
                      [&](std::uint32_t) -> const pm::topo::host_topology& { return shape; });
}

}  // namespace pmrun
