// The Slurm environment pmrun reads inside an allocation: the input is lines, each the value of
// one variable (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, SLURM_CPUS_PER_TASK, and the step's
// forms; SLURM_JOB_ID is always set); then SLURM_TASKS_PER_NODE alone against node counts from 1
// to 64.
#include "allocation_checks.hpp"
#include "hostlist_size.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  const std::string_view text = text_of(data, size);
  static const char* const variables[] = {
      "SLURM_JOB_NODELIST",  "SLURM_TASKS_PER_NODE",      "SLURM_CPUS_PER_TASK",
      "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE",
      "SLURM_NODELIST"};
  const auto values = split(text, '\n');
  pm::env_map env{{"SLURM_JOB_ID", "7"}};
  for (std::size_t i = 0; i < values.size() && i < std::size(variables); ++i) {
    if (!values[i].empty()) env[variables[i]] = values[i];
    if (std::string_view(variables[i]).ends_with("NODELIST") && !worth_expanding(values[i])) {
      return 0;
    }
  }
  std::optional<pm::allocation> a;
  if (attempt([&] { a = pm::slurm_allocation(env); }) && a) {
    check_hosts(*a);
    pm::allocation_inputs inputs;
    inputs.managed = std::move(a);
    resolve_and_map(inputs);
  }

  // The tasks-per-node grammar on its own, for any node count: a count per node or an error.
  const std::string_view tasks = values.size() > 1 ? std::string_view(values[1]) : text;
  const std::size_t nodes = size == 0 ? 1 : 1 + data[0] % 64;
  std::vector<std::uint32_t> counts;
  if (attempt([&] { counts = pm::parse_tasks_per_node(tasks, nodes); })) {
    check(counts.size() == nodes, "SLURM_TASKS_PER_NODE gave another number of counts than nodes");
  }
  return 0;
}
