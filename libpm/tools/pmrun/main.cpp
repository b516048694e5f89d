// pmrun: the command-line front end. Parse, validate, then hand the job to libpm.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/messages.hpp"
#include "pm/command_line.hpp"
#include "pm/error.hpp"
#include "pm/job_map.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"
#include "pm/version.hpp"

namespace {

bool root_allowed(const pm::run_options& options, const pm::env_map& env) {
  if (geteuid() != 0 || options.allow_run_as_root) return true;
  auto is_one = [&](const char* name) {
    auto it = env.find(name);
    return it != env.end() && it->second == "1";
  };
  return is_one("OMPI_ALLOW_RUN_AS_ROOT") && is_one("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
}

void write_map_json(const std::string& target, const std::string& json) {
  if (target == "-") {
    std::cout << json << std::flush;
    return;
  }
  std::ofstream out(target);
  out << json;
  if (!out.flush())
    throw pm::error(pm::errc::system, "--display-map-json: cannot write '" + target + "'");
}

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const auto options = pm::parse_command_line(args);
  if (options.help) {
    std::cout << pm::help_text();
    return 0;
  }
  if (options.version) {
    std::cout << "pmrun (libpm) " << pm::version_string() << "\n";
    return 0;
  }
  const auto env = pm::current_environment();
  if (!root_allowed(options, env)) throw pm::error(pm::errc::usage, pm::cli::refuse_root());

  const auto me = pm::local_host_info();
  const auto resolved = pm::resolve_job(options, env, me, pm::read_text_file);
  const auto map = pm::map_job(resolved.job, resolved.alloc);
  const auto jobid = static_cast<std::uint32_t>(getpid() % 65535 + 1);
  if (options.display_map) std::cout << pm::format_job_map(map, jobid) << std::flush;
  if (!options.display_map_json.empty())
    write_map_json(options.display_map_json, pm::job_map_json(map, jobid));
  if (options.do_not_launch) return 0;
  throw pm::error(pm::errc::launch,
                  "launching is not available in this build yet (use --do-not-launch)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const pm::error& e) {
    std::fprintf(stderr, "pmrun: %s\n", e.what());
    return e.code() == pm::errc::launch || e.code() == pm::errc::system ||
                   e.code() == pm::errc::internal
               ? pm::exit_codes::launch_failed
               : pm::exit_codes::usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmrun: internal error: %s\n", e.what());
    return pm::exit_codes::launch_failed;
  }
}
