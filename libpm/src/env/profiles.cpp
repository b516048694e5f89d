// Env profiles: what each rank is told, per framework (docs/env-contract.md).
#include <nlohmann/json.hpp>
#include <string>

#include "pm/env.hpp"
#include "pm/error.hpp"

namespace pm {

namespace {

struct profile_name {
  std::string_view name;
  env_profile value;
};
constexpr profile_name profile_names[] = {
    {"ompi", env_profile::ompi},       {"torch", env_profile::torch},
    {"tf", env_profile::tf},           {"azureml", env_profile::azureml},
    {"slurm", env_profile::slurm},     {"hydra", env_profile::hydra},
    {"all", env_profile::all},         {"none", env_profile::none},
    {"default", default_env_profiles},
};

}  // namespace

env_profile parse_env_profiles(std::string_view text) {
  env_profile set = env_profile::none;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto word =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const bool remove = !word.empty() && word.front() == '-';
    if (remove) word.remove_prefix(1);
    const profile_name* found = nullptr;
    for (const auto& p : profile_names) {
      if (p.name == word) found = &p;
    }
    if (found == nullptr) {
      throw error(errc::usage,
                  "--env-profiles: unknown profile '" + std::string(word) +
                      "' (known: ompi, torch, tf, azureml, slurm, hydra, all, none, default)");
    }
    set = remove ? (set & ~found->value) : (set | found->value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return set;
}

std::vector<env_var> profile_env(const rank_map& map, std::uint32_t rank, env_profile profiles,
                                 const launch_facts& facts) {
  const auto p = map.at(rank);
  const auto size = std::to_string(map.size());
  const auto r = std::to_string(rank);
  const auto local_rank = std::to_string(p.local_rank);
  const auto local_size = std::to_string(p.local_size);
  const auto node = std::to_string(p.node);
  const auto port = std::to_string(facts.master_port);
  std::vector<env_var> vars;
  vars.reserve(24);
  if (has(profiles, env_profile::ompi)) {
    vars.push_back({"OMPI_COMM_WORLD_SIZE", size});
    vars.push_back({"OMPI_COMM_WORLD_RANK", r});
    vars.push_back({"OMPI_COMM_WORLD_LOCAL_SIZE", local_size});
    vars.push_back({"OMPI_COMM_WORLD_LOCAL_RANK", local_rank});
    // Open MPI's node rank counts this job's ranks on the node: the local rank for one job.
    vars.push_back({"OMPI_COMM_WORLD_NODE_RANK", local_rank});
    vars.push_back({"OMPI_UNIVERSE_SIZE", std::to_string(map.total_slots())});
    vars.push_back({"OMPI_APP_CTX_NUM_PROCS", std::to_string(map.app_size(p.app))});
  }
  if (has(profiles, env_profile::torch)) {
    vars.push_back({"RANK", r});
    vars.push_back({"WORLD_SIZE", size});
    vars.push_back({"LOCAL_RANK", local_rank});
    vars.push_back({"LOCAL_WORLD_SIZE", local_size});
    vars.push_back({"NODE_RANK", node});
    vars.push_back({"GROUP_RANK", node});
    vars.push_back({"MASTER_ADDR", facts.master_addr});
    vars.push_back({"MASTER_PORT", port});
  }
  if (has(profiles, env_profile::slurm)) {
    vars.push_back({"SLURM_PROCID", r});
    vars.push_back({"SLURM_LOCALID", local_rank});
    vars.push_back({"SLURM_NODEID", node});
  }
  if (has(profiles, env_profile::hydra)) {
    vars.push_back({"PMI_RANK", r});
    vars.push_back({"PMI_SIZE", size});
    vars.push_back({"MPI_LOCALRANKID", local_rank});
    vars.push_back({"MPI_LOCALNRANKS", local_size});
  }
  if (has(profiles, env_profile::azureml)) {
    const auto master = map.num_nodes() > 1 ? facts.master_addr + ":" + port : facts.master_addr;
    vars.push_back({"AZ_BATCH_MASTER_NODE", master});
    vars.push_back({"AZ_BATCHAI_MPI_MASTER_NODE", master});
  }
  if (has(profiles, env_profile::tf)) {
    // One worker per rank: its node's address, and a port per local rank above MASTER_PORT.
    nlohmann::json workers = nlohmann::json::array();
    for (std::uint32_t i = 0; i < map.size(); ++i) {
      const auto q = map.at(i);
      const auto& addr =
          q.node < facts.node_addrs.size() ? facts.node_addrs[q.node] : facts.master_addr;
      workers.push_back(addr + ":" + std::to_string(facts.master_port + 1 + q.local_rank));
    }
    nlohmann::json tf = {{"cluster", {{"worker", std::move(workers)}}},
                         {"task", {{"type", "worker"}, {"index", rank}}}};
    vars.push_back({"TF_CONFIG", tf.dump()});
  }
  return vars;
}

}  // namespace pm
