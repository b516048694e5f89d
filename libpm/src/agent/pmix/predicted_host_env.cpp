// What a rank's host adds at launch, predicted before the launch (pm::predicted_host_env, for
// pm_rank_env): pmd's PMIx variables (predicted_env.hpp) and its Open MPI settings. Beside the
// agent that adds them, so that the prediction and the launch share their code.
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "agent/host_facts.hpp"
#include "agent/pmix/predicted_env.hpp"
#include "pm/env.hpp"

namespace pm {

namespace {

// What pmd decides when it starts (its pid, the port it listens on, its private directories
// with a random part) and the launcher when it starts (the namespace, after its pid and a
// nonce): every variable made from them is known only then.
constexpr std::string_view decided_names[] = {
    "PMIX_NAMESPACE",
    "PMIX_SERVER_URI41",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_TMPDIR",
    "PMIX_SYSTEM_TMPDIR",
    "OMPI_MCA_orte_tmpdir_base",
    "OMPI_MCA_btl_vader_backing_directory",
};

std::vector<env_var> as_vars(const std::vector<std::string>& entries) {
  std::vector<env_var> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    const auto eq = e.find('=');
    if (eq != std::string::npos) out.push_back({e.substr(0, eq), e.substr(eq + 1)});
  }
  return out;
}

}  // namespace

bool is_decided_at_launch(std::string_view name) noexcept {
  return std::find(std::begin(decided_names), std::end(decided_names), name) !=
         std::end(decided_names);
}

host_env predicted_host_env(const rank_map& map, std::uint32_t rank) {
  const placement p = map.at(rank);
  agent::pmix::server_place place;
  place.hostname = map.allocation().hosts.at(p.host).name;  // PMIX_HOSTNAME: its name in the job
  place.shm_dir = "/dev/shm";  // any: only decided variables are made from it
  host_env out;
  out.server = as_vars(agent::pmix::predicted_rank_env(place, "", rank));
  for (auto& v : out.server) {
    if (is_decided_at_launch(v.name)) v.value = std::string(decided_at_launch);
  }
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const bool oversubscribed = cores > 0 && p.local_size > static_cast<std::uint64_t>(cores);
  out.defaults = as_vars(agent::pmix::host_settings(
      {oversubscribed, agent::has_rdma_devices(), agent::has_gpu_devices()}));
  return out;
}

}  // namespace pm
