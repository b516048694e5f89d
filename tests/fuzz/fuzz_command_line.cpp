// pmrun's command line: the input is argv[1..], the words separated by NUL bytes (as the kernel
// hands them over). Parsed; when it parses, resolved in a fixed environment (a hostfile read
// returns a small fixed file), mapped, and given its environment, as pmrun does before a launch.
#include <set>

#include "allocation_checks.hpp"
#include "pm/command_line.hpp"
#include "pm/env.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  const auto args = split(text_of(data, size), '\0');
  pm::run_options opts;
  if (!attempt([&] { opts = pm::parse_command_line(args); })) return 0;
  if (opts.help || opts.version) return 0;

  const pm::local_host me = fixed_local_host();
  const pm::file_reader read = [](const std::string&) {
    return std::string("node1 slots=2\nnode2 slots=2 max_slots=4\nbob@node3\n");
  };
  pm::resolved_job job;
  if (!attempt([&] { job = pm::resolve_job(opts, {{"HOME", "/home/u"}}, me, read); })) return 0;
  check(!job.remote.rsh_agent.empty(), "resolved remote options without an rsh agent");
  check(job.remote.rsh_args.has_value(), "resolved remote options without rsh args");

  std::uint64_t ranks = 0;
  for (const auto& app : job.job.apps) ranks += app.np.value_or(job.alloc.total_slots());
  if (ranks > max_mapped_ranks) return 0;
  pm::rank_map map;
  if (!attempt([&] { map = pm::map_job(job.job, job.alloc); })) return 0;

  pm::launch_facts facts;
  facts.master_port = 29500;
  pm::job_env env;
  if (!attempt([&] {
        env = pm::make_job_env({{"PATH", "/bin"}, {"OMPI_MCA_x", "1"}}, opts.exports, opts.profiles,
                               facts);
      })) {
    return 0;
  }
  for (std::uint32_t r = 0; r < map.size() && r < 4; ++r) {
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
