// The env contract over generated allocations and jobs: every profile agrees with the others and
// with the rank map, -x overrides win, and no outer-job identity leaks from the inherited env.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "pm/env.hpp"
#include "pm/error.hpp"

namespace {

// A generated job: 1..10 hosts of 1..6 slots, 1..3 app contexts that fit, by slot or by node.
pm::rank_map gen_map() {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  const auto hosts = *rc::gen::inRange(1, 11);
  for (int h = 0; h < hosts; ++h)
    a.hosts.push_back(pm::host{"h" + std::to_string(h), *rc::gen::inRange<std::uint32_t>(1, 7)});
  pm::job_spec j;
  auto left = static_cast<std::uint32_t>(a.total_slots());
  const auto apps = *rc::gen::inRange<std::uint32_t>(1, std::min(3u, left) + 1);
  for (std::uint32_t i = 0; i < apps; ++i) {
    const auto most = left - (apps - 1 - i);  // leave one slot for every later app
    const auto np = *rc::gen::inRange<std::uint32_t>(1, most + 1);
    left -= np;
    j.apps.push_back(pm::app_context{{"app" + std::to_string(i)}, np, {}, {}});
  }
  j.mapping.by = *rc::gen::element(pm::map_by::slot, pm::map_by::node);
  return pm::map_job(j, a);
}

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& s : env) {
    const auto eq = s.find('=');
    RC_ASSERT(eq != std::string::npos);
    RC_ASSERT(m.emplace(s.substr(0, eq), s.substr(eq + 1)).second);  // every name once
  }
  return m;
}

// Names a nested launch inherits from an outer mpirun / torchrun / srun / hydra.
const std::vector<std::string> outer_identity = {"OMPI_COMM_WORLD_RANK",
                                                 "OMPI_COMM_WORLD_SIZE",
                                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                                 "OMPI_COMM_WORLD_NODE_RANK",
                                                 "OMPI_UNIVERSE_SIZE",
                                                 "OMPI_APP_CTX_NUM_PROCS",
                                                 "OMPI_NUM_APP_CTX",
                                                 "OMPI_FIRST_RANKS",
                                                 "PMIX_RANK",
                                                 "PMIX_NAMESPACE",
                                                 "PMI_RANK",
                                                 "PMI_SIZE",
                                                 "SLURM_PROCID",
                                                 "SLURM_LOCALID",
                                                 "SLURM_NODEID",
                                                 "SLURM_STEP_ID",
                                                 "RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE",
                                                 "NODE_RANK",
                                                 "GROUP_RANK",
                                                 "ROLE_RANK",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "TF_CONFIG",
                                                 "AZ_BATCH_MASTER_NODE",
                                                 "AZ_BATCHAI_MPI_MASTER_NODE",
                                                 "MPI_LOCALRANKID",
                                                 "MPI_LOCALNRANKS",
                                                 "TORCHELASTIC_RUN_ID"};

}  // namespace

RC_GTEST_PROP(EnvProperty, ProfilesAgreeWithEachOtherAndTheMap, ()) {
  const auto map = gen_map();
  const bool tf = map.size() <= 24;
  const pm::launch_facts facts{"10.1.1.1", *rc::gen::inRange<std::uint16_t>(1, 60000), {}};
  const auto env = pm::make_job_env({{"PATH", "/bin"}}, {{"FOO=1"}, {}},
                                    tf ? pm::env_profile::all : pm::default_env_profiles, facts);
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    auto v = as_map(pm::rank_environment(env, map, r));
    const auto p = map.at(r);
    const auto rank = std::to_string(r);
    const auto local = std::to_string(p.local_rank);
    const auto local_size = std::to_string(p.local_size);
    const auto size = std::to_string(map.size());
    const auto node = std::to_string(p.node);
    RC_ASSERT(v["RANK"] == rank);
    RC_ASSERT(v["OMPI_COMM_WORLD_RANK"] == rank && v["SLURM_PROCID"] == rank &&
              v["PMI_RANK"] == rank);
    RC_ASSERT(v["LOCAL_RANK"] == local);
    RC_ASSERT(v["OMPI_COMM_WORLD_LOCAL_RANK"] == local && v["SLURM_LOCALID"] == local &&
              v["MPI_LOCALRANKID"] == local && v["OMPI_COMM_WORLD_NODE_RANK"] == local);
    RC_ASSERT(v["WORLD_SIZE"] == size && v["OMPI_COMM_WORLD_SIZE"] == size &&
              v["PMI_SIZE"] == size);
    RC_ASSERT(v["LOCAL_WORLD_SIZE"] == local_size &&
              v["OMPI_COMM_WORLD_LOCAL_SIZE"] == local_size && v["MPI_LOCALNRANKS"] == local_size);
    RC_ASSERT(v["NODE_RANK"] == node && v["GROUP_RANK"] == node && v["SLURM_NODEID"] == node);
    RC_ASSERT(v["OMPI_UNIVERSE_SIZE"] == std::to_string(map.allocation().total_slots()));
    RC_ASSERT(v["OMPI_APP_CTX_NUM_PROCS"] == std::to_string(map.app_size(p.app)));
    const auto port = std::to_string(facts.master_port);
    RC_ASSERT(v["MASTER_ADDR"] == "10.1.1.1" && v["MASTER_PORT"] == port);
    const auto az = map.num_nodes() > 1 ? "10.1.1.1:" + port : std::string("10.1.1.1");
    RC_ASSERT(v["AZ_BATCH_MASTER_NODE"] == az && v["AZ_BATCHAI_MPI_MASTER_NODE"] == az);
    RC_ASSERT(v["FOO"] == "1" && v["PATH"] == "/bin");
    RC_ASSERT(v.count("TF_CONFIG") == (tf ? 1u : 0u));
    if (tf) {
      const auto j = nlohmann::json::parse(v["TF_CONFIG"]);
      RC_ASSERT(j["task"]["index"] == r && j["task"]["type"] == "worker");
      RC_ASSERT(j["cluster"]["worker"].size() == map.size());
      RC_ASSERT(j["cluster"]["worker"][r] ==
                "10.1.1.1:" + std::to_string(facts.master_port + 1 + p.local_rank));
    }
  }
}

RC_GTEST_PROP(EnvProperty, OverridesWinAndNoOuterIdentityLeaks, ()) {
  const auto map = gen_map();
  const auto profiles = static_cast<pm::env_profile>(*rc::gen::inRange(0, 64)) &
                        (map.size() <= 24 ? pm::env_profile::all : pm::default_env_profiles);
  // The outer job's identity, marked so that a leak is seen, plus ordinary settings.
  pm::env_map inherited = {{"PATH", "/bin"}, {"OMPI_MCA_btl", "tcp"}, {"PMIX_MCA_gds", "hash"}};
  for (const auto& name :
       *rc::gen::container<std::set<std::string>>(rc::gen::elementOf(outer_identity)))
    inherited[name] = "outer";
  // -x: some contract variables and some new ones, with values or taken from `inherited`.
  const std::vector<std::string> x_names = {
      "RANK",      "MASTER_PORT", "SLURM_NODEID", "OMPI_COMM_WORLD_SIZE",
      "TF_CONFIG", "FOO",         "PATH",         "OMPI_MCA_btl"};
  pm::env_exports exports;
  std::map<std::string, std::string> expected_overrides;
  for (const auto& name :
       *rc::gen::container<std::vector<std::string>>(rc::gen::elementOf(x_names))) {
    if (*rc::gen::arbitrary<bool>()) {
      const auto value = "user-" + std::to_string(*rc::gen::inRange(0, 100));
      exports.x.push_back(name + "=" + value);
      expected_overrides[name] = value;
    } else {
      exports.x.push_back(name);
      if (auto it = inherited.find(name); it != inherited.end())
        expected_overrides[name] = it->second;
    }
  }
  const pm::launch_facts facts{"10.2.2.2", 777, {}};
  const auto env = pm::make_job_env(inherited, exports, profiles, facts);
  RC_ASSERT(std::is_sorted(env.base.begin(), env.base.end(),
                           [](const auto& a, const auto& b) { return a.name < b.name; }));
  std::string first_master;
  for (std::uint32_t r = 0; r < map.size(); ++r) {
    const auto out = pm::rank_environment(env, map, r);
    auto v = as_map(out);
    std::map<std::string, std::string> profile;
    for (const auto& e : pm::profile_env(map, r, profiles, facts)) profile[e.name] = e.value;
    for (const auto& [name, value] : v) {
      if (auto o = expected_overrides.find(name); o != expected_overrides.end()) {
        RC_ASSERT(value == o->second);  // -x wins over everything
      } else if (auto p = profile.find(name); p != profile.end()) {
        RC_ASSERT(value == p->second);  // the profile wins over the base
      } else {
        RC_ASSERT(!pm::is_outer_job_identity(name));  // nothing else may name a job
        RC_ASSERT(inherited.at(name) == value);
      }
    }
    for (const auto& [name, value] : profile) RC_ASSERT(v.count(name) == 1u);
    for (const auto& [name, value] : expected_overrides) RC_ASSERT(v[name] == value);
    RC_ASSERT(v["PMIX_MCA_gds"] == "hash");
    if (!expected_overrides.count("OMPI_MCA_btl")) RC_ASSERT(v["OMPI_MCA_btl"] == "tcp");
    const auto master = v.count("MASTER_ADDR") ? v["MASTER_ADDR"] + ":" + v["MASTER_PORT"] : "";
    if (r == 0) first_master = master;
    RC_ASSERT(master == first_master);  // every rank the same pair
  }
}

RC_GTEST_PROP(EnvProperty, ProfileListsFoldLeftToRight, ()) {
  const std::vector<std::pair<std::string, pm::env_profile>> words = {
      {"ompi", pm::env_profile::ompi},      {"torch", pm::env_profile::torch},
      {"tf", pm::env_profile::tf},          {"azureml", pm::env_profile::azureml},
      {"slurm", pm::env_profile::slurm},    {"hydra", pm::env_profile::hydra},
      {"all", pm::env_profile::all},        {"none", pm::env_profile::none},
      {"default", pm::default_env_profiles}};
  const auto picks = *rc::gen::nonEmpty(rc::gen::container<std::vector<std::pair<int, bool>>>(
      rc::gen::pair(rc::gen::inRange(0, 9), rc::gen::arbitrary<bool>())));
  std::string text;
  auto model = pm::env_profile::none;
  for (const auto& [i, remove] : picks) {
    if (!text.empty()) text += ',';
    text += (remove ? "-" : "") + words[i].first;
    if (remove) {
      model = model & ~words[i].second;
    } else if (words[i].second == pm::env_profile::none) {
      model = pm::env_profile::none;
    } else {
      model = model | words[i].second;
    }
  }
  RC_ASSERT(pm::parse_env_profiles(text) == model);
}
