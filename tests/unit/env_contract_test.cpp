// The env contract: exact variables per profile, exports, hygiene, precedence.
#include <gtest/gtest.h>

#include <map>

#include "pm/env.hpp"
#include "pm/error.hpp"
#include "pm/launch_facts.hpp"

namespace {

pm::rank_map two_hosts() {  // a:2, b:2, -np 4 --map-by node: a 0,2 · b 1,3
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = {pm::host{"a", 2}, pm::host{"b", 2}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, 4, {}, {}});
  j.mapping.by = pm::map_by::node;
  return pm::map_job(j, a);
}

std::map<std::string, std::string> as_map(const std::vector<pm::env_var>& vars) {
  std::map<std::string, std::string> m;
  for (const auto& v : vars) m[v.name] = v.value;
  return m;
}

std::map<std::string, std::string> as_map(const std::vector<std::string>& vars) {
  std::map<std::string, std::string> m;
  for (const auto& v : vars) m[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
  return m;
}

TEST(EnvContract, EveryProfileForOneRank) {
  const auto map = two_hosts();
  pm::launch_facts facts{"10.0.0.1", 29500, {"10.0.0.1", "10.0.0.2"}};
  auto v = as_map(pm::profile_env(map, 3, pm::env_profile::all, facts));
  const std::map<std::string, std::string> expected = {
      {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_RANK", "3"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
      {"OMPI_COMM_WORLD_NODE_RANK", "1"},
      {"OMPI_UNIVERSE_SIZE", "4"},
      {"OMPI_APP_CTX_NUM_PROCS", "4"},
      {"RANK", "3"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"NODE_RANK", "1"},
      {"GROUP_RANK", "1"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"SLURM_PROCID", "3"},
      {"SLURM_LOCALID", "1"},
      {"SLURM_NODEID", "1"},
      {"PMI_RANK", "3"},
      {"PMI_SIZE", "4"},
      {"MPI_LOCALRANKID", "1"},
      {"MPI_LOCALNRANKS", "2"},
      {"AZ_BATCH_MASTER_NODE", "10.0.0.1:29500"},
      {"AZ_BATCHAI_MPI_MASTER_NODE", "10.0.0.1:29500"},
      {"TF_CONFIG",
       R"({"cluster":{"worker":["10.0.0.1:29501","10.0.0.2:29501","10.0.0.1:29502","10.0.0.2:29502"]},"task":{"index":3,"type":"worker"}})"},
  };
  EXPECT_EQ(v, expected);
}

TEST(EnvContract, OneHostJobAzureMasterIsTheAddressAlone) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = {pm::host{"a", 2}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, 2, {}, {}});
  auto v = as_map(
      pm::profile_env(pm::map_job(j, a), 0, pm::env_profile::azureml, {"127.0.0.1", 1234, {}}));
  EXPECT_EQ(v["AZ_BATCH_MASTER_NODE"], "127.0.0.1");
}

TEST(EnvContract, Profiles) {
  EXPECT_EQ(pm::parse_env_profiles("ompi,torch"), pm::env_profile::ompi | pm::env_profile::torch);
  EXPECT_EQ(pm::parse_env_profiles("all,-tf"), pm::default_env_profiles);
  EXPECT_EQ(pm::parse_env_profiles("default,tf"), pm::env_profile::all);
  EXPECT_EQ(pm::parse_env_profiles("none"), pm::env_profile::none);
  try {
    pm::parse_env_profiles("tourch");
    FAIL();
  } catch (const pm::error& e) {
    EXPECT_STREQ(
        e.what(),
        "--env-profiles: unknown profile 'tourch' (known: ompi, torch, tf, azureml, slurm, "
        "hydra, all, none, default)");
  }
  auto v = as_map(pm::profile_env(two_hosts(), 0, pm::env_profile::torch, {}));
  EXPECT_EQ(v.count("OMPI_COMM_WORLD_RANK"), 0u);
  EXPECT_EQ(v.count("RANK"), 1u);
}

TEST(EnvContract, HygieneAndExports) {
  const pm::env_map inherited = {{"PATH", "/bin"},        {"OMPI_COMM_WORLD_RANK", "5"},
                                 {"PMIX_RANK", "5"},      {"PMIX_MCA_gds", "hash"},
                                 {"PMI_SIZE", "9"},       {"SLURM_PROCID", "3"},
                                 {"SLURM_STEP_ID", "1"},  {"SLURM_JOB_ID", "77"},
                                 {"RANK", "5"},           {"MASTER_ADDR", "x"},
                                 {"OMPI_MCA_btl", "tcp"}, {"TORCHELASTIC_RUN_ID", "r"},
                                 {"HOME", "/root"},       {"FOO", "from-env"}};
  auto env = pm::make_job_env(inherited,
                              {{"FOO", "BAR=1", "UNSET_VAR"}, {{"pml", "ob1"}, {"btl", "self"}}},
                              pm::env_profile::ompi, {});
  auto base = as_map([&] {
    std::vector<std::string> v;
    for (auto& e : env.base) v.push_back(e.name + "=" + e.value);
    return v;
  }());
  for (const char* gone : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE", "SLURM_PROCID",
                           "SLURM_STEP_ID", "RANK", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"}) {
    EXPECT_EQ(base.count(gone), 0u) << gone;
  }
  for (const char* kept : {"PATH", "PMIX_MCA_gds", "SLURM_JOB_ID", "HOME"})
    EXPECT_EQ(base.count(kept), 1u) << kept;
  EXPECT_EQ(base["OMPI_MCA_btl"], "self");  // -mca replaces the inherited setting
  EXPECT_EQ(base["OMPI_MCA_pml"], "ob1");
  EXPECT_EQ(env.overrides, (std::vector<pm::env_var>{{"FOO", "from-env"}, {"BAR", "1"}}));

  auto rank = as_map(pm::rank_environment(env, two_hosts(), 2));
  EXPECT_EQ(rank["OMPI_COMM_WORLD_RANK"], "2");
  EXPECT_EQ(rank["BAR"], "1");
  EXPECT_EQ(rank.count("RANK"), 0u);  // torch off, and the inherited one is gone
}

TEST(EnvContract, OverridesWinOverProfiles) {
  auto env = pm::make_job_env({}, {{"MASTER_PORT=1234"}, {}}, pm::default_env_profiles,
                              {"127.0.0.1", 5, {}});
  auto rank = pm::rank_environment(env, two_hosts(), 0);
  EXPECT_EQ(as_map(rank)["MASTER_PORT"], "1234");
  EXPECT_EQ(std::count_if(rank.begin(), rank.end(),
                          [](const std::string& s) { return s.starts_with("MASTER_PORT="); }),
            1);
}

TEST(EnvContract, InvalidNames) {
  auto message = [](pm::env_exports ex) {
    try {
      pm::make_job_env({}, ex, pm::default_env_profiles, {});
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), pm::errc::env);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{"1BAD=x"}, {}}), "-x '1BAD=x': invalid variable name '1BAD'");
  EXPECT_EQ(message({{"A-B=1"}, {}}), "-x 'A-B=1': invalid variable name 'A-B'");
  EXPECT_EQ(message({{"=v"}, {}}), "-x '=v': invalid variable name ''");
  EXPECT_EQ(message({{}, {{"bad key", "1"}}}), "-mca 'bad key': invalid parameter name");
  EXPECT_TRUE(pm::is_valid_env_name("_A1"));
  EXPECT_FALSE(pm::is_valid_env_name(""));
}

TEST(LaunchFacts, OneLocalHostUsesLoopbackAndAFreePort) {
  pm::allocation a;
  a.source = pm::allocation_source::implicit_local;
  a.hosts = {pm::host{"me", 2, 0, true, true}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, 2, {}, {}});
  auto map = pm::map_job(j, a);
  auto facts = pm::decide_launch_facts(map, pm::local_host_info(), std::nullopt);
  EXPECT_EQ(facts.master_addr, "127.0.0.1");
  EXPECT_GT(facts.master_port, 0);
  EXPECT_EQ(pm::decide_launch_facts(map, pm::local_host_info(), 29500).master_port, 29500);
}

TEST(LaunchFacts, SeveralHostsNeverGetALoopbackMaster) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  // The other host by a numeric address: a made-up name would be asked of the DNS server.
  a.hosts = {pm::host{"me", 1, 0, true, true}, pm::host{"192.0.2.77", 1}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, 2, {}, {}});
  auto facts = pm::decide_launch_facts(pm::map_job(j, a), pm::local_host_info(), 1000);
  EXPECT_FALSE(facts.master_addr.starts_with("127."));
  ASSERT_EQ(facts.node_addrs.size(), 2u);
}

}  // namespace
