// Env profiles: what each rank is told, per framework (docs/env-contract.md).
//
// profile_env answers from one placement (map.at) and a few O(1) counts, so the cost of a rank's
// variables does not grow with the job — except TF_CONFIG, which lists every rank by design.
#include <charconv>
#include <string>

#include "pm/env.hpp"
#include "pm/error.hpp"
#include "text/json_writer.hpp"
#include "text/printable.hpp"

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string number(std::uint64_t n) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, n).ptr;
  return std::string(buf, end);
}

// "addr:port", with brackets around an IPv6 address so that the last ':' splits it.
std::string endpoint(const std::string& addr, std::uint64_t port) {
  const bool v6 = addr.find(':') != std::string::npos;
  return (v6 ? "[" + addr + "]" : addr) + ":" + number(port);
}

}  // namespace

env_profile parse_env_profiles(std::string_view text) {
  env_profile set = env_profile::none;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = text.find(',', pos);
    auto word = trim(
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    const bool remove = !word.empty() && word.front() == '-';
    if (remove) word.remove_prefix(1);
    const profile_name* found = nullptr;
    for (const auto& p : profile_names) {
      if (p.name == word) found = &p;
    }
    if (found == nullptr) {
      throw error(errc::usage,
                  "--env-profiles: unknown profile '" + text::printable(word) +
                      "' (known: ompi, torch, tf, azureml, slurm, hydra, all, none, default)");
    }
    // Words apply left to right: "all,-tf" and "-tf,all" differ, as a user reading them expects;
    // "none" clears what came before it ("none,slurm" is slurm alone).
    if (remove) {
      set = set & ~found->value;
    } else if (found->value == env_profile::none) {
      set = env_profile::none;
    } else {
      set = set | found->value;
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return set;
}

std::vector<env_var> profile_env(const rank_map& map, std::uint32_t rank, env_profile profiles,
                                 const launch_facts& facts) {
  const auto p = map.at(rank);  // throws pm::error for a rank outside the job
  const auto size = number(map.size());
  const auto r = number(rank);
  const auto local_rank = number(p.local_rank);
  const auto local_size = number(p.local_size);
  const auto node = number(p.node);
  const auto port = number(facts.master_port);
  std::vector<env_var> vars;
  vars.reserve(30);
  if (has(profiles, env_profile::ompi)) {
    vars.push_back({"OMPI_COMM_WORLD_SIZE", size});
    vars.push_back({"OMPI_COMM_WORLD_RANK", r});
    vars.push_back({"OMPI_COMM_WORLD_LOCAL_SIZE", local_size});
    vars.push_back({"OMPI_COMM_WORLD_LOCAL_RANK", local_rank});
    // Open MPI's node rank counts the ranks of every job on the node; with one job it is the
    // local rank. The host index is NODE_RANK / SLURM_NODEID.
    vars.push_back({"OMPI_COMM_WORLD_NODE_RANK", local_rank});
    vars.push_back({"OMPI_UNIVERSE_SIZE", number(map.total_slots())});  // cached, O(1)
    vars.push_back({"OMPI_APP_CTX_NUM_PROCS", number(map.app_size(p.app))});
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
    if (facts.max_restarts > 0) {
      vars.push_back({"TORCHELASTIC_RESTART_COUNT", number(facts.restart_count)});
      vars.push_back({"TORCHELASTIC_MAX_RESTARTS", number(facts.max_restarts)});
      vars.push_back({"TORCHELASTIC_RUN_ID", facts.run_id});
    }
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
    vars.push_back({"MPI_LOCALNRANKS", local_size});  // hydra sets it beside MPI_LOCALRANKID
  }
  if (has(profiles, env_profile::azureml)) {
    const auto master =
        map.num_nodes() > 1 ? endpoint(facts.master_addr, facts.master_port) : facts.master_addr;
    vars.push_back({"AZ_BATCH_MASTER_NODE", master});
    vars.push_back({"AZ_BATCHAI_MPI_MASTER_NODE", master});
  }
  if (has(profiles, env_profile::tf)) {
    // One worker per rank: its node's address, and port MASTER_PORT + 1 + its local rank, so the
    // workers of one host never collide with each other or with MASTER_PORT.
    json_writer tf;  // compact, keys in alphabetical order (as nlohmann::json wrote them)
    tf.begin_object().key("cluster").begin_object().key("worker").begin_array();
    for (std::uint32_t i = 0; i < map.size(); ++i) {
      const auto q = map.at(i);
      const auto& addr = q.node < facts.node_addrs.size() && !facts.node_addrs[q.node].empty()
                             ? facts.node_addrs[q.node]
                             : facts.master_addr;
      const std::uint64_t worker_port = std::uint64_t{facts.master_port} + 1 + q.local_rank;
      if (worker_port > 65535) {
        throw error(errc::env, "TF_CONFIG: rank " + number(i) + " would need port " +
                                   number(worker_port) + " (MASTER_PORT " + port +
                                   " + 1 + local rank " + number(q.local_rank) +
                                   "); choose a lower --master-port");
      }
      tf.value(endpoint(addr, worker_port));
    }
    tf.end_array().end_object();
    tf.key("task").begin_object().member("index", rank).member("type", "worker").end_object();
    tf.end_object();
    vars.push_back({"TF_CONFIG", tf.take()});
  }
  return vars;
}

}  // namespace pm
