// Issue 23's goal: mapping and binding 100,000 hosts x 8 GPUs in under 250 ms. Each host is a
// 2-socket node of 2 x 32 cores x 2 threads with 8 GPUs (4 per NUMA node) and 4 InfiniBand NICs;
// 8 ranks per host, --gpus-per-rank 1 --bind-to core. "Distinct" plans every host from its own
// copy of the summary (no sharing at all); "Shared" plans one host per distinct summary, as a
// launcher does for a homogeneous cluster (the hosts' summaries found by their text). The
// launcher's own cost, in the simulator, is in docs/gpus.md ("Tests and cost").
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "pm/host_binding.hpp"
#include "support/gpu_node.hpp"

namespace {

pm::topo::host_topology gpu_node() {
  return pm::test::gpu_node(32, 8, 4);
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
