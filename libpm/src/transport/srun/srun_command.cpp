#include "transport/srun/srun_command.hpp"

#include <charconv>

#include "pm/error.hpp"
#include "transport/srun/connect_back.hpp"

namespace pm::srun {

std::vector<std::string> srun_argv(const srun_settings& settings,
                                   const std::vector<std::string>& nodes,
                                   const std::vector<std::string>& agent_argv) {
  if (settings.command.empty() || settings.command.front().empty()) {
    throw error(errc::usage, "the srun command is empty");
  }
  if (nodes.empty()) throw error(errc::usage, "an srun step needs at least one node");
  if (agent_argv.empty()) throw error(errc::usage, "an srun step needs the agent's command");
  std::string list;
  for (const auto& n : nodes) {
    if (n.empty() || n.front() == '-' || n.find(',') != std::string::npos) {
      throw error(errc::usage, "'" + n + "' cannot be a Slurm node name");
    }
    list += (list.empty() ? "" : ",") + n;
  }
  const auto count = std::to_string(nodes.size());
  std::vector<std::string> argv = settings.command;
  argv.insert(argv.end(), {settings.external_launcher ? "--external-launcher" : "--overlap",
                           "--mpi=none", "--cpu-bind=none", "--export=ALL", "--kill-on-bad-exit=0",
                           "--input=none", "--quiet", "--nodes=" + count, "--ntasks=" + count,
                           "--ntasks-per-node=1", "--nodelist=" + list});
  argv.insert(argv.end(), settings.extra_args.begin(), settings.extra_args.end());
  argv.insert(argv.end(), agent_argv.begin(), agent_argv.end());
  return argv;
}

bool is_inherited_step_variable(std::string_view name) noexcept {
  if (name.starts_with("PMIX_MCA_")) return false;
  constexpr std::string_view prefixes[] = {"SLURM_STEP_",    "SLURM_CPU_BIND", "SLURM_MEM_BIND",
                                           "PMIX_",          "PMI_",           "SLURM_PMIX",
                                           "SLURM_SRUN_COMM"};
  constexpr std::string_view exact[] = {"SLURM_STEPID",
                                        "SLURM_PROCID",
                                        "SLURM_LOCALID",
                                        "SLURM_NODEID",
                                        "SLURM_TASK_PID",
                                        "SLURM_GTIDS",
                                        "SLURM_NTASKS",
                                        "SLURM_NPROCS",
                                        "SLURM_NTASKS_PER_NODE",
                                        "SLURM_DISTRIBUTION",
                                        "SLURM_EXPORT_ENV",
                                        "SLURM_MPI_TYPE",
                                        "SLURM_KILL_BAD_EXIT",
                                        "SLURM_LAUNCH_NODE_IPADDR",
                                        "SLURM_CPUS_ON_NODE",
                                        "SLURM_TOPOLOGY_ADDR",
                                        "SLURM_TOPOLOGY_ADDR_PATTERN",
                                        "SLURM_PRIO_PROCESS",
                                        "SLURM_UMASK_STEP",
                                        "SLURM_OVERLAP",
                                        "SLURM_EXACT",
                                        "SLURM_NODE_ALIASES_STEP"};
  for (auto p : prefixes) {
    if (name.starts_with(p)) return true;
  }
  for (auto e : exact) {
    if (name == e) return true;
  }
  return false;
}

std::vector<std::string> srun_environment(const std::vector<std::string>& env,
                                          const std::vector<std::string>& addresses,
                                          std::uint16_t port, std::string_view token) {
  std::vector<std::string> out;
  out.reserve(env.size() + 3);
  for (const auto& kv : env) {
    const auto name = std::string_view(kv).substr(0, kv.find('='));
    if (is_inherited_step_variable(name)) continue;
    if (name == env_addresses || name == env_port || name == env_token || name == env_token_file) {
      continue;
    }
    out.push_back(kv);
  }
  std::string list;
  for (const auto& a : addresses) list += (list.empty() ? "" : ",") + a;
  out.push_back(std::string(env_addresses) + "=" + list);
  out.push_back(std::string(env_port) + "=" + std::to_string(port));
  out.push_back(std::string(env_token) + "=" + std::string(token));
  return out;
}

bool has_external_launcher(std::string_view version_output) noexcept {
  // The last word: "23.11.1".
  auto end = version_output.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  auto text = version_output.substr(0, end + 1);
  const auto space = text.find_last_of(" \t");
  if (space != std::string_view::npos) text = text.substr(space + 1);
  unsigned major = 0, minor = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), major);
  if (ec != std::errc() || p == text.data() + text.size() || *p != '.') return false;
  auto [q, ec2] = std::from_chars(p + 1, text.data() + text.size(), minor);
  if (ec2 != std::errc()) return false;
  return major > 23 || (major == 23 && minor >= 11);
}

}  // namespace pm::srun
