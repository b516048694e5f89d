// A planned job's facts (pm/job_plan.hpp) and what --display-map shows of them (pm/job_map.hpp):
// on a hand-built 2-socket node of 2 x 2 cores x 2 threads with 2 GPUs a socket and 2 InfiniBand
// NICs, so that every expected value can be checked by reading the machine below.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "pm/error.hpp"
#include "pm/job.hpp"
#include "pm/job_map.hpp"
#include "pm/job_plan.hpp"
#include "support/gpu_node.hpp"

namespace {

using namespace pm::topo;

host_topology node() {
  auto t = pm::test::gpu_node(2, 4, 2);
  check(t);
  return t;
}

pm::rank_map two_hosts(std::uint32_t np, const pm::mapping_policy& mapping) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts = {pm::host{"a", 4}, pm::host{"b", 4}};
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping = mapping;
  return pm::map_job(j, a);
}

pm::mapping_policy gpus_bound() {
  pm::mapping_policy m;
  m.host.bind = parse_bind_to("core");
  m.host.gpus = parse_gpus_per_rank("1");
  return m;
}

TEST(JobPlan, EachRankGetsItsOwnGpuAndCoreOnTheGpusNumaNode) {
  const auto shape = node();
  const auto map = two_hosts(8, gpus_bound());
  const auto plan = pm::plan_job(map, gpus_bound().host,
                                 [&](std::uint32_t) -> const host_topology& { return shape; });
  ASSERT_EQ(plan.resources.size(), 8u);
  ASSERT_EQ(plan.bound.size(), 8u);
  for (std::uint32_t h = 0; h < 2; ++h) {
    std::set<std::uint32_t> gpus;
    for (const auto rank : map.ranks_on_host(h)) {
      const auto& r = plan.resources[rank];
      ASSERT_EQ(r.gpus.size(), 1u);
      EXPECT_TRUE(gpus.insert(r.gpus[0]).second) << "GPU " << r.gpus[0] << " twice";
      // GPUs 0-1 are on NUMA 0 (cores 0-1: PUs 0,4 and 1,5), 2-3 on NUMA 1.
      const auto cpus = parse_cpu_list(r.cpus);
      ASSERT_EQ(cpus.size(), 2u) << r.cpus;
      for (const auto c : cpus) EXPECT_EQ((c % 4) / 2, r.gpus[0] / 2) << "rank " << rank;
      // The NIC on the GPU's NUMA node (GPUDirect RDMA).
      EXPECT_EQ(r.nic, "mlx5_" + std::to_string(r.gpus[0] / 2));
      EXPECT_NE(plan.bound[rank].find("socket " + std::to_string(r.gpus[0] / 2) + "[core "),
                std::string::npos)
          << plan.bound[rank];
    }
  }
}

TEST(JobPlan, DisplayMapShowsBindingsOnlyForAPlannedJob) {
  const auto shape = node();
  const auto map = two_hosts(4, gpus_bound());
  const auto plan = pm::plan_job(map, gpus_bound().host,
                                 [&](std::uint32_t) -> const host_topology& { return shape; });
  const auto plain = pm::format_job_map(map, 7);
  EXPECT_NE(plain.find("Process rank: 0 Bound: N/A\n"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("GPUs:"), std::string::npos);
  const auto text = pm::format_job_map(map, 7, &plan);
  // Rank 0: GPU 0, core 0 (PUs 0 and 4): Open MPI's words, then its GPU and NIC.
  EXPECT_NE(text.find("Process rank: 0 Bound: socket 0[core 0[hwt 0-1]]:[BB/..][../..] GPUs: 0 "
                      "NIC: mlx5_0\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("N/A"), std::string::npos) << text;
  const auto json = pm::job_map_json(map, 7, &plan);
  EXPECT_NE(json.find("\"cpus\": \"0,4\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"bound\": \"socket 0[core 0[hwt 0-1]]:[BB/..][../..]\""), std::string::npos)
      << json;
  EXPECT_EQ(pm::job_map_json(map, 7).find("\"cpus\""), std::string::npos);
}

TEST(JobPlan, AHostThatCannotMeetThePolicyRefusesAsTheLaunchDoes) {
  auto shape = node();
  shape.gpus.resize(1);
  const auto map = two_hosts(4, gpus_bound());
  try {
    pm::plan_job(map, gpus_bound().host,
                 [&](std::uint32_t) -> const host_topology& { return shape; });
    FAIL() << "planned 4 ranks x 1 GPU on a host with 1 GPU";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::mapping);
    EXPECT_NE(std::string(e.what()).find("host 'a' has 1 GPU"), std::string::npos) << e.what();
  }
}

TEST(JobPlan, OptionValuesPrintAsTheParsersReadThem) {
  for (const char* v : {"slot", "node", "core", "ppr:2:numa", "numa:pe=2", "package:oversubscribe",
                        "hwthread:nooversubscribe", "ppr:1:node"})
    EXPECT_EQ(parse_map_by(to_string(parse_map_by(v))), parse_map_by(v)) << v;
  for (const char* v : {"none", "core", "numa:overload-allowed", "hwthread"})
    EXPECT_EQ(parse_bind_to(to_string(parse_bind_to(v))), parse_bind_to(v)) << v;
  for (const char* v : {"1", "2:shared", "1:reorder", "4:shared:reorder"})
    EXPECT_EQ(parse_gpus_per_rank(to_string(parse_gpus_per_rank(v))), parse_gpus_per_rank(v)) << v;
  pm::mapping_policy m;
  pm::set_map_by(m, parse_map_by("ppr:2:node:oversubscribe"));
  EXPECT_EQ(m.by, pm::map_by::ppr_node);
  EXPECT_EQ(m.ppr, 2u);
  EXPECT_EQ(m.oversubscribe, true);
  EXPECT_FALSE(m.host.map.oversubscribe.has_value());
}

}  // namespace
