// Issue 23's goal: mapping and binding 100,000 hosts x 8 GPUs in under 250 ms. Each host is a
// 2-socket node of 2 x 32 cores x 2 threads with 8 GPUs (4 per NUMA node) and 4 InfiniBand NICs;
// 8 ranks per host, --gpus-per-rank 1 --bind-to core. "Distinct" plans every host from its own
// copy of the summary (no sharing at all); "Shared" plans one host per distinct summary, as a
// launcher does for a homogeneous cluster (the hosts' summaries compared by their text).
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "pm/host_binding.hpp"

namespace {

pm::topo::host_topology gpu_node() {
  using namespace pm::topo;
  host_topology t;
  t.packages = 2;
  t.l3caches = 2;
  t.numa_os_index = {0, 1};
  for (std::uint32_t c = 0; c < 64; ++c) {
    t.cores.push_back(core{c / 32, c / 32, c / 32, 2 * c, 2});
    t.pu_os_index.push_back(c);
    t.pu_os_index.push_back(c + 64);
  }
  for (std::uint32_t g = 0; g < 8; ++g) {
    t.gpus.push_back(gpu{gpu_vendor::nvidia, g, "0000:" + std::to_string(16 + g) + ":00.0",
                         "GPU-" + std::to_string(g), g / 4, g / 4});
  }
  for (std::uint32_t i = 0; i < 4; ++i) {
    t.nics.push_back(nic{"mlx5_" + std::to_string(i), "ib" + std::to_string(i),
                         "mlx5_" + std::to_string(i), nic_kind::infiniband, i / 2, i / 2});
  }
  return t;
}

pm::topo::binding_policy policy() {
  pm::topo::binding_policy p;
  p.bind = pm::topo::parse_bind_to("core");
  p.gpus = pm::topo::parse_gpus_per_rank("1");
  return p;
}

void BM_PlanHostsDistinct(benchmark::State& state) {
  const auto hosts = static_cast<std::uint32_t>(state.range(0));
  const std::vector<pm::topo::host_topology> shapes(hosts, gpu_node());
  const auto p = policy();
  for (auto _ : state) {
    std::vector<pm::topo::host_plan> plans;
    plans.reserve(hosts);
    for (std::uint32_t h = 0; h < hosts; ++h)
      plans.push_back(pm::topo::plan_host(shapes[h], "n", 8, p));
    benchmark::DoNotOptimize(plans.data());
  }
  state.counters["ranks"] = hosts * 8.0;
}
BENCHMARK(BM_PlanHostsDistinct)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_PlanHostsShared(benchmark::State& state) {
  const auto hosts = static_cast<std::uint32_t>(state.range(0));
  const std::vector<std::string> texts(hosts, pm::topo::to_text(gpu_node()));
  const auto p = policy();
  for (auto _ : state) {
    std::map<std::string_view, pm::topo::host_plan> by_shape;
    std::vector<const pm::topo::host_plan*> plan_of(hosts);
    for (std::uint32_t h = 0; h < hosts; ++h) {
      auto it = by_shape.find(texts[h]);
      if (it == by_shape.end()) {
        it = by_shape
                 .emplace(texts[h],
                          pm::topo::plan_host(pm::topo::topology_from_text(texts[h]), "n", 8, p))
                 .first;
      }
      plan_of[h] = &it->second;
    }
    benchmark::DoNotOptimize(plan_of.data());
  }
  state.counters["ranks"] = hosts * 8.0;
}
BENCHMARK(BM_PlanHostsShared)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
