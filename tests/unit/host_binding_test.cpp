// plan_host's decisions on real machines (tests/data/topologies), each expected value written from
// Open MPI's documented rules (mpirun(1) 4.1: "Mapping, Ranking, and Binding") and the machine's
// lstopo listing, not from this code's output. docs/gpus.md has the same tables in words.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/topology.hpp"
#include "support/topologies.hpp"
#include "topology/read_hwloc.hpp"

namespace {

using namespace pm::topo;
using cpus = std::vector<std::uint32_t>;

host_topology machine(const std::string& file) {
  return read_topology_xml((pm::test::topologies_dir() / file).string());
}

binding_policy policy(const std::string& map, const std::string& bind, const std::string& gpus = "",
                      const std::string& rank = "") {
  binding_policy p;
  if (!map.empty()) p.map = parse_map_by(map);
  if (!bind.empty()) p.bind = parse_bind_to(bind);
  if (!gpus.empty()) p.gpus = parse_gpus_per_rank(gpus);
  if (!rank.empty()) p.rank_by = parse_rank_by(rank);
  return p;
}

cpus cpus_of(const host_plan& p, std::uint32_t r) {
  return {p.cpus(r).begin(), p.cpus(r).end()};
}
cpus gpus_of(const host_plan& p, std::uint32_t r) {
  return {p.gpus(r).begin(), p.gpus(r).end()};
}

/// Runs f and returns the pm::error's message (of kind `code`: mapping unless said).
template <class F>
std::string refusal(F&& f, pm::errc code = pm::errc::mapping) {
  try {
    f();
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), code);
    return e.what();
  }
  return "(no refusal)";
}

std::string env_value(const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& name) {
  for (const auto& [k, v] : env) {
    if (k == name) return v;
  }
  return "(unset)";
}

class Machines : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(pm::test::topology_files().empty()) << "no topologies"; }
};

// 2 packages x 8 cores x 2 threads; core k's threads are P#k and P#k+16; NUMA node = package.
// GPUs: 3 NVIDIA (0 on NUMA 0, 1 and 2 on NUMA 1) and 1 AMD; NICs eth0, eth1, mlx5_0 on NUMA 1.
TEST_F(Machines, TwoSocketNodeWithGpusAndInfiniband) {
  const auto t = machine("32em64t-2n8c2t-pci-normalio.xml");
  // Binding to core, mapping by slot: core after core.
  auto p = plan_host(t, "a", 4, policy("", "core"));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0, 16}));
  EXPECT_EQ(cpus_of(p, 3), (cpus{3, 19}));
  EXPECT_EQ(report_bindings(t, "a", 7, 1, p.cpus(1)),
            "[a:7] MCW rank 1 bound to socket 0[core 1[hwt 0-1]]: "
            "[../BB/../../../../../..][../../../../../../../..]");
  // --map-by numa: round robin over NUMA nodes, the first free core of each.
  p = plan_host(t, "a", 4, policy("numa", "core"));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0, 16}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{8, 24}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{1, 17}));
  EXPECT_EQ(cpus_of(p, 3), (cpus{9, 25}));
  // ... ranked by core instead: the same places, numbered in core order.
  p = plan_host(t, "a", 4, policy("numa", "core", "", "core"));
  EXPECT_EQ(cpus_of(p, 1), (cpus{1, 17}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{8, 24}));
  // --map-by package --bind-to package: the whole package.
  p = plan_host(t, "a", 2, policy("package", "package"));
  EXPECT_EQ(cpus_of(p, 1), (cpus{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(report_bindings(t, "a", 7, 1, p.cpus(1)),
            "[a:7] MCW rank 1 bound to socket 1[core 8[hwt 0-1]], socket 1[core 9[hwt 0-1]], "
            "socket 1[core 10[hwt 0-1]], socket 1[core 11[hwt 0-1]], socket 1[core 12[hwt 0-1]], "
            "socket 1[core 13[hwt 0-1]], socket 1[core 14[hwt 0-1]], socket 1[core 15[hwt 0-1]]: "
            "[../../../../../../../..][BB/BB/BB/BB/BB/BB/BB/BB]");
  // ppr:2:package:pe=2: two ranks per package, two cores each, bound to them.
  p = plan_host(t, "a", 4, policy("ppr:2:package:pe=2", ""));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0, 1, 16, 17}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{2, 3, 18, 19}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{8, 9, 24, 25}));
  EXPECT_EQ(ppr_ranks(t, "a", parse_map_by("ppr:2:package")), 4u);
  // Hardware threads in logical order: P#0, P#16, P#1.
  p = plan_host(t, "a", 3, policy("hwthread", "hwthread"));
  EXPECT_EQ(cpus_of(p, 1), (cpus{16}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{1}));
  // No binding unless asked.
  p = plan_host(t, "a", 4, policy("numa", ""));
  EXPECT_TRUE(p.cpus(0).empty());
  EXPECT_EQ(p.numa(1), 1u);
  EXPECT_EQ(report_bindings(t, "a", 7, 0, p.cpus(0)),
            "[a:7] MCW rank 0 is not bound (or bound to all available processors)");
  // More ranks than cores: refused unless overload-allowed.
  EXPECT_EQ(refusal([&] { plan_host(t, "a", 17, policy("", "core")); }),
            "host 'a' has 16 cores; 17 ranks x 1 core asked (--bind-to core; add "
            ":overload-allowed to bind more)");
  p = plan_host(t, "a", 17, policy("", "core:overload-allowed"));
  EXPECT_EQ(cpus_of(p, 16), (cpus{0, 16}));
  EXPECT_EQ(refusal([&] { plan_host(t, "a", 3, policy("ppr:1:package", "")); }),
            "host 'a' has 2 packages; ppr:1:package places at most 2 ranks there, 3 mapped");
}

TEST_F(Machines, GpusFollowNumaAndTheRanksCoresFollowTheirGpus) {
  const auto t = machine("32em64t-2n8c2t-pci-normalio.xml");
  // GPU-led: the NVIDIA GPUs (the AMD one is another vendor's), NUMA node by NUMA node; each
  // rank's core on its GPU's NUMA node.
  auto p = plan_host(t, "a", 3, policy("", "core", "1"));
  EXPECT_EQ(gpus_of(p, 0), (cpus{0}));
  EXPECT_EQ(gpus_of(p, 1), (cpus{1}));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0, 16}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{8, 24}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{9, 25}));
  const auto env = rank_environment(t, p, 1, p.size() ? gpu_option{1} : gpu_option{});
  EXPECT_EQ(env_value(env, "CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(env_value(env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  EXPECT_EQ(env_value(env, "NCCL_IB_HCA"), "=mlx5_0");  // the one RDMA NIC of three
  EXPECT_EQ(env_value(env, "UCX_NET_DEVICES"), "mlx5_0:1");
  EXPECT_EQ(env_value(env, "ROCR_VISIBLE_DEVICES"), "(unset)");
  // Reorder: the rank's own GPU first, the others after it.
  const auto reorder = parse_gpus_per_rank("1:reorder");
  p = plan_host(t, "a", 2, policy("", "", "1:reorder"));
  EXPECT_EQ(env_value(rank_environment(t, p, 0, reorder), "CUDA_VISIBLE_DEVICES"), "0,1,2");
  EXPECT_EQ(env_value(rank_environment(t, p, 1, reorder), "CUDA_VISIBLE_DEVICES"), "1,0,2");
  // More GPUs than the host has: one line, before anything starts.
  EXPECT_EQ(refusal([&] { plan_host(t, "a", 4, policy("", "", "1")); }),
            "host 'a' has 3 GPUs; 4 ranks x 1 GPU asked (--gpus-per-rank 1; add :shared to "
            "share GPUs)");
  p = plan_host(t, "a", 4, policy("", "", "1:shared"));
  EXPECT_EQ(gpus_of(p, 3), (cpus{0}));
  // Mapped by NUMA node: each rank's GPU is on its own node while there are free ones.
  p = plan_host(t, "a", 2, policy("numa", "core", "1"));
  EXPECT_EQ(gpus_of(p, 0), (cpus{0}));
  EXPECT_EQ(gpus_of(p, 1), (cpus{1}));
}

// DGX-2: 16 V100s, 8 per NUMA node; its export kept 2 cores per package (P#0-1, P#24-25).
TEST_F(Machines, Dgx2SixteenGpus) {
  const auto t = machine("nvidiaDGX2.xml");
  auto p = plan_host(t, "dgx", 16, policy("", "", "1"));
  for (std::uint32_t r = 0; r < 16; ++r) {
    EXPECT_EQ(gpus_of(p, r), (cpus{r}));
    EXPECT_EQ(env_value(rank_environment(t, p, r, {1}), "CUDA_VISIBLE_DEVICES"), std::to_string(r));
    EXPECT_TRUE(p.cpus(r).empty());
  }
  p = plan_host(t, "dgx", 4, policy("", "core", "4"));
  EXPECT_EQ(gpus_of(p, 2), (cpus{8, 9, 10, 11}));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{1}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{24}));
  EXPECT_EQ(env_value(rank_environment(t, p, 2, {4}), "CUDA_VISIBLE_DEVICES"), "8,9,10,11");
  // Bound, one GPU each: NUMA node 0 has 8 GPUs but 2 cores, so the third rank's GPU is on node 1
  // with its core (GPUs in plain order would give ranks 2 and 3 GPUs 2 and 3, and cores on node 1).
  p = plan_host(t, "dgx", 4, policy("", "core", "1"));
  EXPECT_EQ(gpus_of(p, 0), (cpus{0}));
  EXPECT_EQ(gpus_of(p, 1), (cpus{1}));
  EXPECT_EQ(gpus_of(p, 2), (cpus{8}));
  EXPECT_EQ(gpus_of(p, 3), (cpus{9}));
  EXPECT_EQ(cpus_of(p, 2), (cpus{24}));
  EXPECT_EQ(cpus_of(p, 3), (cpus{25}));
  p = plan_host(t, "dgx", 2, policy("numa", "", "2"));
  EXPECT_EQ(gpus_of(p, 0), (cpus{0, 1}));
  EXPECT_EQ(gpus_of(p, 1), (cpus{8, 9}));
  p = plan_host(t, "dgx", 2, policy("ppr:1:package", "package", "8"));
  EXPECT_EQ(gpus_of(p, 1), (cpus{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{24, 25}));
  // 16 ranks on 4 cores, overloaded: each shares a core of its own GPU's NUMA node (GPUs 0-7 on
  // cores 0-1, 8-15 on 24-25), not a less used core of the other node (found over ssh on fake
  // DGX-2 hosts: ranks 6 and 7 went to cores 24 and 25 with GPUs 4 and 5).
  p = plan_host(t, "dgx", 16, policy("", "core:overload-allowed", "1"));
  std::map<std::uint32_t, int> per_core;
  for (std::uint32_t r = 0; r < 16; ++r) {
    ASSERT_EQ(gpus_of(p, r).size(), 1u);
    const auto gpu = gpus_of(p, r)[0];
    ASSERT_EQ(cpus_of(p, r).size(), 1u);
    const auto cpu = cpus_of(p, r)[0];
    EXPECT_EQ(cpu < 24, gpu < 8) << "rank " << r << ": GPU " << gpu << ", cpu " << cpu;
    ++per_core[cpu];
  }
  EXPECT_EQ(per_core, (std::map<std::uint32_t, int>{{0, 4}, {1, 4}, {24, 4}, {25, 4}}));
  EXPECT_EQ(refusal([&] { plan_host(t, "dgx", 8, policy("", "core", "1")); }),
            "host 'dgx' has 4 cores; 8 ranks x 1 core asked (--bind-to core; add "
            ":overload-allowed to bind more)");
  EXPECT_EQ(refusal([&] { plan_host(t, "dgx", 17, policy("", "", "1")); }),
            "host 'dgx' has 16 GPUs; 17 ranks x 1 GPU asked (--gpus-per-rank 1; add :shared to "
            "share GPUs)");
}

// 24 NUMA nodes of 8 cores x 2 threads; core k's threads are P#k and P#192+k.
TEST_F(Machines, TwentyFourNumaNodes) {
  const auto t = machine("192em64t-24n8c2t.xml");
  EXPECT_EQ(ppr_ranks(t, "big", parse_map_by("ppr:1:numa")), 24u);
  const auto p = plan_host(t, "big", 24, policy("ppr:1:numa", "numa"));
  EXPECT_EQ(cpus_of(p, 5),
            (cpus{40, 41, 42, 43, 44, 45, 46, 47, 232, 233, 234, 235, 236, 237, 238, 239}));
  EXPECT_EQ(refusal([&] { plan_host(t, "big", 25, policy("ppr:1:numa", "")); }),
            "host 'big' has 24 NUMA nodes; ppr:1:numa places at most 24 ranks there, 25 mapped");
  EXPECT_EQ(refusal([&] { plan_host(t, "big", 9 * 24, policy("numa", "numa")); }),
            "host 'big' has 8 cores in numa 0; the mapping puts 9 ranks' cpus there (--bind-to "
            "numa; add :overload-allowed to bind more)");
}

// 4 packages x 2 cores x 2 threads with offline PUs: core 1 has P#4 and P#12, the others one each.
TEST_F(Machines, OfflineCpusAreNeverGiven) {
  const auto t = machine("16em64t-4s2c2t-offlines.xml");
  const auto p = plan_host(t, "off", 6, policy("", "core"));
  EXPECT_EQ(cpus_of(p, 0), (cpus{0}));
  EXPECT_EQ(cpus_of(p, 1), (cpus{4, 12}));
  EXPECT_EQ(cpus_of(p, 5), (cpus{15}));
  EXPECT_EQ(report_bindings(t, "off", 1, 1, p.cpus(1)),
            "[off:1] MCW rank 1 bound to socket 0[core 1[hwt 0-1]]: [./BB][.][.][./.]");
  EXPECT_EQ(refusal([&] { plan_host(t, "off", 7, policy("", "core")); }),
            "host 'off' has 6 cores; 7 ranks x 1 core asked (--bind-to core; add "
            ":overload-allowed to bind more)");
}

// Cluster-on-Die: 2 packages, 2 NUMA nodes of 7 cores each; no L3 objects, no GPUs.
TEST_F(Machines, ClusterOnDie) {
  const auto t = machine("28intel64-2p2g7c-CoDgroups.v1tov2.xml");
  const auto p = plan_host(t, "cod", 4, policy("numa", "numa"));
  EXPECT_EQ(cpus_of(p, 1), (cpus{7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(refusal([&] { plan_host(t, "cod", 2, policy("l3cache", "")); }),
            "host 'cod' has no l3cache (--map-by)");
  // Bound to an object the host has none of: refused, never silently unbound.
  EXPECT_EQ(refusal([&] { plan_host(t, "cod", 2, policy("", "l3cache")); }),
            "host 'cod' has no l3cache (--bind-to)");
  EXPECT_EQ(refusal([&] { plan_host(t, "cod", 2, policy("", "", "1")); }),
            "host 'cod' has no GPUs (--gpus-per-rank 1)");
}

// 16 packages of 6 cores, 4 per NUMA node: --rank-by numa deals places NUMA node by NUMA node.
TEST_F(Machines, RankByNumaDealsAcrossNodes) {
  const auto t = machine("96em64t-4n4d3ca2co-pci.xml");
  const auto p = plan_host(t, "m", 8, policy("package", "package", "", "numa"));
  const std::uint32_t package_of_rank[] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (std::uint32_t r = 0; r < 8; ++r) {
    EXPECT_EQ(t.cores[0].pu_count, 1u);
    EXPECT_EQ(p.cpus(r).size(), 6u);
    // package k holds cores 6k..6k+5; its first PU is the first core's.
    EXPECT_EQ(p.cpus(r)[0], *std::min_element(t.pu_os_index.begin() + 6 * package_of_rank[r],
                                              t.pu_os_index.begin() + 6 * package_of_rank[r] + 6));
  }
}

TEST(BindingOptions, OpenMpiSpellings) {
  EXPECT_EQ(parse_map_by("ppr:2:socket:pe=4"), (map_option{object::package, 2, 4, {}}));
  EXPECT_EQ(parse_map_by("CORE:PE=2:OVERSUBSCRIBE"), (map_option{object::core, 0, 2, true}));
  EXPECT_EQ(parse_map_by("l3cache").by, object::l3cache);
  EXPECT_EQ(parse_bind_to("none"), bind_option{});
  EXPECT_EQ(parse_bind_to("core:overload-allowed"), (bind_option{object::core, true}));
  EXPECT_EQ(parse_rank_by("numa"), object::numa);
  EXPECT_EQ(parse_gpus_per_rank("2:reorder"), (gpu_option{2, false, true}));
  EXPECT_EQ(parse_cpus_per_rank("3"), 3u);
}

TEST(BindingOptions, ErrorsNameTheOptionAndTheValue) {
  const auto usage = [](auto&& f) {
    try {
      f();
    } catch (const pm::error& e) {
      EXPECT_EQ(e.code(), pm::errc::usage);
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(usage([] { parse_map_by("ppr:0:numa"); }),
            "--map-by ppr:0:numa: the N of ppr:N:OBJECT must be a positive number, not '0'");
  EXPECT_EQ(usage([] { parse_map_by("ppr:2"); }),
            "--map-by ppr:2: expected ppr:N:OBJECT (e.g. ppr:2:numa)");
  EXPECT_EQ(usage([] { parse_bind_to("corez"); }),
            "--bind-to corez: unknown object 'corez' (none, hwthread, core, l3cache, numa, "
            "package)");
  EXPECT_EQ(usage([] { parse_gpus_per_rank("two"); }),
            "--gpus-per-rank two: the GPU count must be a positive number, not 'two'");
  EXPECT_EQ(usage([] { parse_gpus_per_rank("1:sharde"); }),
            "--gpus-per-rank 1:sharde: unknown modifier 'sharde' (shared, reorder)");
}

// A summary where some cores lie in no NUMA node (hwloc's reader keeps what the machine says):
// --bind-to numa refuses a rank placed there (found by SimTopologyProperty with a random seed:
// the rank was planned bound yet given no cpus).
TEST(HostBinding, ACoreInNoNumaNodeIsNotBoundToOne) {
  const auto t = topology_from_text("pmtopo1;p=2;l=0;n=0;c=2*0._._,2*1.0._;u=4*1;o=0-3;g=;i=");
  EXPECT_EQ(refusal([&] { plan_host(t, "h", 1, policy("package", "numa")); }),
            "host 'h' has no NUMA node holding its core 0 (--bind-to numa)");
  // A rank placed on the NUMA node that exists is bound to its cores.
  const auto p = plan_host(t, "h", 1, policy("numa", "numa"));
  EXPECT_EQ(cpus_of(p, 0), (cpus{2, 3}));
}

// --cpus-per-rank and :pe= that disagree are refused by the planner itself, for an embedder that
// fills the policy without pmrun's command line.
TEST(HostBinding, CpusPerRankAndPeThatDisagreeAreRefused) {
  const auto t = topology_from_text("pmtopo1;p=1;l=1;n=0;c=4*0.0.0;u=4*1;o=0-3;g=;i=");
  auto p = policy("core:pe=1", "");
  p.cpus_per_rank = 2;
  EXPECT_EQ(refusal([&] { plan_host(t, "h", 1, p); }, pm::errc::usage),
            "--cpus-per-rank 2 and --map-by ...:pe=1 ask different numbers of cpus per rank: "
            "give one");
  p.cpus_per_rank = 1;
  EXPECT_EQ(cpus_of(plan_host(t, "h", 1, p), 0), (cpus{0}));
}

}  // namespace
