// -x and -mca values and the environment they meet. The input is lines:
//   x VALUE          -x VALUE
//   m KEY<tab>VALUE  -mca KEY VALUE (plm_rsh_agent, plm_rsh_args, oob_tcp_if_include, ... too)
//   e NAME=VALUE     a variable of the launcher's environment (OMPI_MCA_*, PM_RSH_AGENT, ...)
// Lines holding a NUL byte are dropped (no argument or variable can hold one). The command line
// "-x/-mca ... app" is parsed; then the job's environment, two ranks' environments and the remote
// options are made from it as pmrun makes them.
#include <set>

#include "fuzz_support.hpp"
#include "pm/command_line.hpp"
#include "pm/env.hpp"
#include "pm/rank_map.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  std::vector<std::string> args;
  pm::env_map inherited;
  for (const auto& line : split(text_of(data, size), '\n')) {
    if (line.size() < 2 || line[1] != ' ' || line.find('\0') != std::string::npos) continue;
    const std::string rest = line.substr(2);
    if (line[0] == 'x') {
      args.insert(args.end(), {"-x", rest});
    } else if (line[0] == 'm') {
      const auto tab = rest.find('\t');
      args.insert(args.end(), {"-mca", rest.substr(0, tab),
                               tab == std::string::npos ? std::string() : rest.substr(tab + 1)});
    } else if (line[0] == 'e') {
      const auto eq = rest.find('=');
      if (eq != std::string::npos && eq > 0) inherited[rest.substr(0, eq)] = rest.substr(eq + 1);
    }
  }
  args.emplace_back("app");

  pm::run_options opts;
  if (!attempt([&] { opts = pm::parse_command_line(args); })) return 0;
  attempt([&] {
    const auto remote = pm::resolve_remote_options(opts.remote, inherited);
    check(!remote.rsh_agent.empty(), "resolved remote options without an rsh agent");
    for (const auto& word : remote.rsh_agent) check(!word.empty(), "an empty rsh agent word");
  });

  pm::launch_facts facts;
  facts.master_port = 29500;
  facts.node_addrs = {"10.0.0.1"};
  facts.master_addr = "10.0.0.1";
  pm::job_env env;
  if (!attempt([&] { env = pm::make_job_env(inherited, opts.exports, opts.profiles, facts); })) {
    return 0;
  }
  pm::job_spec job;
  job.apps.push_back(pm::app_context{{"app"}, 2, {}, {}});
  pm::allocation alloc;
  alloc.hosts.push_back(pm::host{"node1", 2});
  const pm::rank_map map = pm::map_job(job, alloc);
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    std::set<std::string, std::less<>> names;
    for (const auto& entry : pm::rank_environment(env, map, r)) {
      const auto eq = entry.find('=');
      check(eq != std::string::npos && eq > 0, "a rank's environment entry has no NAME=");
      check(names.insert(entry.substr(0, eq)).second,
            "a rank's environment names a variable twice");
    }
  }
  return 0;
}
