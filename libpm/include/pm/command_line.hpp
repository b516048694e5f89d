// pmrun's command line: mpirun-compatible spelling (Open MPI 4 and 5), parsed into a value.
//
// parse_command_line() is pure: it checks syntax and values, never the file system or the
// environment. Anything wrong is one pm::error(errc::usage) line naming the option and the value,
// e.g. "-np 'abc': not a number". The option table (and so `pmrun --help`) lives in
// libpm/src/cli/options.cpp; docs/cli.md holds the same text.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/env.hpp"
#include "pm/export.hpp"
#include "pm/job.hpp"

namespace pm {

/// Where pmrun's standard input goes: one rank (default 0), every rank, or nowhere.
struct stdin_target {
  enum kind_t { rank, all, none } kind = rank;
  std::uint32_t rank_index = 0;
  friend bool operator==(const stdin_target&, const stdin_target&) = default;
};

struct run_options {
  // What to run and where.
  job_spec job;                         ///< apps (MPMD segments) and the mapping policy
  std::vector<std::string> host_lists;  ///< every -H value, for the allocation
  std::optional<std::string> hostfile;  ///< --hostfile / --machinefile
  // What the ranks are told.
  env_exports exports;  ///< -x and the -mca keys that reach ranks
  env_profile profiles = default_env_profiles;
  std::optional<std::uint16_t> master_port;
  // Output.
  bool tag_output = false;
  bool timestamp_output = false;
  bool merge_stderr = false;
  bool json_lines = false;
  std::string output_dir;      ///< --output-filename DIR (Open MPI 4.1 layout)
  bool output_nocopy = false;  ///< --output-filename DIR:nocopy
  stdin_target input;
  // Failure policy.
  bool abort_on_failure = true;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds kill_grace{3000};
  std::string report_file;  ///< --report FILE: the JSON report
  // Map display.
  bool display_map = false;
  std::string display_map_json;  ///< --display-map-json FILE ("-" = stdout)
  bool do_not_launch = false;
  // Misc.
  bool allow_run_as_root = false;
  std::vector<std::pair<std::string, std::string>> launcher_mca;  ///< plm_*: for transports
  bool help = false;
  bool version = false;
};

/// Parses argv[1..] (without the program name).
PM_API run_options parse_command_line(std::span<const std::string> args);

/// The allocation and job a command line asks for, in the environment it runs in: a Slurm/PBS
/// allocation when inside one, the hostfile and -H lists (read through `read`), this machine
/// otherwise. Each MPMD segment's -H hosts become that app's host filter, by allocation name.
struct resolved_job {
  allocation alloc;
  job_spec job;
};
PM_API resolved_job resolve_job(const run_options& options, const env_map& env,
                                const local_host& me, const file_reader& read);

/// The text `pmrun --help` prints.
PM_API std::string help_text();

}  // namespace pm
