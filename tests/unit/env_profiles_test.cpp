// Env profiles: parse_env_profiles and profile_env, exact values and order.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pm/env.hpp"
#include "pm/error.hpp"

namespace {

using vars = std::vector<pm::env_var>;

pm::allocation hosts(std::vector<pm::host> list) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = std::move(list);
  return a;
}

pm::job_spec job(std::vector<std::uint32_t> nps, pm::map_by by = pm::map_by::slot) {
  pm::job_spec j;
  for (auto np : nps) j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping.by = by;
  return j;
}

// -H a:2,b:2 -np 4 --map-by node: a holds ranks 0,2 and b holds 1,3.
pm::rank_map two_by_node() {
  return pm::map_job(job({4}, pm::map_by::node), hosts({pm::host{"a", 2}, pm::host{"b", 2}}));
}

const pm::launch_facts facts{"10.0.0.1", 29500, {"10.0.0.1", "10.0.0.2"}};

std::string parse_error(std::string_view text) {
  try {
    pm::parse_env_profiles(text);
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::usage);
    return e.what();
  }
  return "no error";
}

TEST(ParseEnvProfiles, EveryWord) {
  using pm::env_profile;
  EXPECT_EQ(pm::parse_env_profiles("ompi"), env_profile::ompi);
  EXPECT_EQ(pm::parse_env_profiles("torch"), env_profile::torch);
  EXPECT_EQ(pm::parse_env_profiles("tf"), env_profile::tf);
  EXPECT_EQ(pm::parse_env_profiles("azureml"), env_profile::azureml);
  EXPECT_EQ(pm::parse_env_profiles("slurm"), env_profile::slurm);
  EXPECT_EQ(pm::parse_env_profiles("hydra"), env_profile::hydra);
  EXPECT_EQ(pm::parse_env_profiles("all"), env_profile::all);
  EXPECT_EQ(pm::parse_env_profiles("none"), env_profile::none);
  EXPECT_EQ(pm::parse_env_profiles("default"), env_profile::ompi | env_profile::torch |
                                                   env_profile::azureml | env_profile::slurm |
                                                   env_profile::hydra);
}

TEST(ParseEnvProfiles, CombinationsApplyLeftToRight) {
  using pm::env_profile;
  EXPECT_EQ(pm::parse_env_profiles("ompi,torch"), env_profile::ompi | env_profile::torch);
  EXPECT_EQ(pm::parse_env_profiles("default,tf"), env_profile::all);
  EXPECT_EQ(pm::parse_env_profiles("all,-tf"), pm::default_env_profiles);
  EXPECT_EQ(pm::parse_env_profiles("default,-torch,-slurm"),
            env_profile::ompi | env_profile::azureml | env_profile::hydra);
  EXPECT_EQ(pm::parse_env_profiles("-tf,all"), env_profile::all);  // the later word wins
  EXPECT_EQ(pm::parse_env_profiles("ompi,none,slurm"), env_profile::slurm);
  EXPECT_EQ(pm::parse_env_profiles("-ompi"), env_profile::none);
  EXPECT_EQ(pm::parse_env_profiles(" ompi , torch "), env_profile::ompi | env_profile::torch);
}

TEST(ParseEnvProfiles, UnknownWordsAreNamed) {
  const std::string known = " (known: ompi, torch, tf, azureml, slurm, hydra, all, none, default)";
  EXPECT_EQ(parse_error("tourch"), "--env-profiles: unknown profile 'tourch'" + known);
  EXPECT_EQ(parse_error("ompi,-tourch"), "--env-profiles: unknown profile 'tourch'" + known);
  EXPECT_EQ(parse_error("OMPI"), "--env-profiles: unknown profile 'OMPI'" + known);
  EXPECT_EQ(parse_error(""), "--env-profiles: unknown profile ''" + known);
  EXPECT_EQ(parse_error("ompi,,torch"), "--env-profiles: unknown profile ''" + known);
  EXPECT_EQ(parse_error("ompi,"), "--env-profiles: unknown profile ''" + known);
}

TEST(ProfileEnv, EveryProfileInItsFixedOrder) {
  const vars expected = {
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
  EXPECT_EQ(pm::profile_env(two_by_node(), 3, pm::env_profile::all, facts), expected);
}

TEST(ProfileEnv, EachProfileAlone) {
  const auto map = two_by_node();
  EXPECT_EQ(pm::profile_env(map, 2, pm::env_profile::none, facts), vars{});
  EXPECT_EQ(pm::profile_env(map, 2, pm::env_profile::slurm, facts),
            (vars{{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "0"}}));
  EXPECT_EQ(pm::profile_env(map, 1, pm::env_profile::hydra, facts),
            (vars{{"PMI_RANK", "1"},
                  {"PMI_SIZE", "4"},
                  {"MPI_LOCALRANKID", "0"},
                  {"MPI_LOCALNRANKS", "2"}}));
  EXPECT_EQ(pm::profile_env(map, 0, pm::env_profile::torch, facts),
            (vars{{"RANK", "0"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "0"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"NODE_RANK", "0"},
                  {"GROUP_RANK", "0"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(pm::profile_env(map, 0, pm::default_env_profiles, facts).size(), 24u);
}

// Open MPI's OMPI_COMM_WORLD_NODE_RANK is the local rank, NODE_RANK the host index.
TEST(ProfileEnv, NodeRankIsTheHostIndexOnlyOutsideOmpi) {
  // -H a:3,b:3 -np 5 by slot: a 0,1,2 · b 3,4
  const auto map = pm::map_job(job({5}), hosts({pm::host{"a", 3}, pm::host{"b", 3}}));
  const auto v = pm::profile_env(map, 4, pm::env_profile::all & ~pm::env_profile::tf, facts);
  auto get = [&](std::string_view name) {
    for (const auto& e : v)
      if (e.name == name) return e.value;
    return std::string("unset");
  };
  EXPECT_EQ(get("OMPI_COMM_WORLD_NODE_RANK"), "1");
  EXPECT_EQ(get("OMPI_COMM_WORLD_LOCAL_RANK"), "1");
  EXPECT_EQ(get("OMPI_COMM_WORLD_LOCAL_SIZE"), "2");
  EXPECT_EQ(get("NODE_RANK"), "1");
  EXPECT_EQ(get("OMPI_UNIVERSE_SIZE"), "6");  // slots, not ranks
  const auto v0 = pm::profile_env(map, 2, pm::env_profile::ompi | pm::env_profile::slurm, facts);
  EXPECT_EQ(v0[4], (pm::env_var{"OMPI_COMM_WORLD_NODE_RANK", "2"}));
  EXPECT_EQ(v0.back(), (pm::env_var{"SLURM_NODEID", "0"}));
}

TEST(ProfileEnv, UnusedHostsShiftNoNodeIndex) {
  // -H a:1,b:4,c:1 -np 3: a 0 · b 1,2 · c unused
  const auto map =
      pm::map_job(job({3}), hosts({pm::host{"a", 1}, pm::host{"b", 4}, pm::host{"c", 1}}));
  const auto v = pm::profile_env(map, 2, pm::env_profile::slurm | pm::env_profile::ompi, facts);
  EXPECT_EQ(v.back(), (pm::env_var{"SLURM_NODEID", "1"}));
  EXPECT_EQ(v[5], (pm::env_var{"OMPI_UNIVERSE_SIZE", "6"}));
}

TEST(ProfileEnv, MpmdAppSize) {
  // -np 1 a : -np 3 b on -H h:4
  const auto map = pm::map_job(job({1, 3}), hosts({pm::host{"h", 4}}));
  EXPECT_EQ(pm::profile_env(map, 0, pm::env_profile::ompi, facts)[6],
            (pm::env_var{"OMPI_APP_CTX_NUM_PROCS", "1"}));
  EXPECT_EQ(pm::profile_env(map, 3, pm::env_profile::ompi, facts)[6],
            (pm::env_var{"OMPI_APP_CTX_NUM_PROCS", "3"}));
  EXPECT_EQ(pm::profile_env(map, 3, pm::env_profile::ompi, facts)[0],
            (pm::env_var{"OMPI_COMM_WORLD_SIZE", "4"}));
}

TEST(ProfileEnv, AzureMlMasterNode) {
  const auto one = pm::map_job(job({2}), hosts({pm::host{"a", 2}}));
  const pm::launch_facts local{"127.0.0.1", 1234, {"127.0.0.1"}};
  EXPECT_EQ(
      pm::profile_env(one, 1, pm::env_profile::azureml, local),
      (vars{{"AZ_BATCH_MASTER_NODE", "127.0.0.1"}, {"AZ_BATCHAI_MPI_MASTER_NODE", "127.0.0.1"}}));
  const pm::launch_facts v6{"fd00::1", 1234, {}};
  EXPECT_EQ(pm::profile_env(two_by_node(), 0, pm::env_profile::azureml, v6)[0].value,
            "[fd00::1]:1234");
}

TEST(ProfileEnv, TfConfigWithoutNodeAddressesUsesTheMaster) {
  const auto map = pm::map_job(job({3}), hosts({pm::host{"a", 2}, pm::host{"b", 2}}));
  const auto v = pm::profile_env(map, 1, pm::env_profile::tf, {"10.9.9.9", 4000, {}});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].name, "TF_CONFIG");
  const auto tf = nlohmann::json::parse(v[0].value);
  EXPECT_EQ(tf["cluster"]["worker"],
            (nlohmann::json{"10.9.9.9:4001", "10.9.9.9:4002", "10.9.9.9:4001"}));
  EXPECT_EQ(tf["task"], (nlohmann::json{{"type", "worker"}, {"index", 1}}));
}

TEST(ProfileEnv, TfConfigRefusesPortsPast65535) {
  const auto map = pm::map_job(job({2}), hosts({pm::host{"a", 2}}));
  EXPECT_EQ(pm::profile_env(map, 0, pm::env_profile::tf, {"h", 65533, {"h"}})[0].value,
            R"({"cluster":{"worker":["h:65534","h:65535"]},"task":{"index":0,"type":"worker"}})");
  try {
    pm::profile_env(map, 0, pm::env_profile::tf, {"h", 65534, {"h"}});
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::env);
    EXPECT_STREQ(e.what(),
                 "TF_CONFIG: rank 1 would need port 65536 (MASTER_PORT 65534 + 1 + local rank 1); "
                 "choose a lower --master-port");
  }
  // Without tf the same facts are fine.
  EXPECT_EQ(pm::profile_env(map, 0, pm::default_env_profiles, {"h", 65535, {"h"}}).size(), 24u);
}

TEST(ProfileEnv, RankOutsideTheJobIsAnError) {
  EXPECT_THROW(pm::profile_env(two_by_node(), 4, pm::env_profile::ompi, facts), pm::error);
}

}  // namespace
