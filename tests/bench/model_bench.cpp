// The pure core at scale: map 1,000,000 ranks over 100,000 hosts; build one rank's environment.
// Goal (issue 2): the whole map under 100 ms on 2 cores, one rank's env in microseconds, memory
// linear and small (reported as bytes per rank).
#include <benchmark/benchmark.h>

#include "pm/env.hpp"
#include "pm/rank_map.hpp"

namespace {

pm::allocation cluster(std::uint32_t hosts, std::uint32_t slots) {
  pm::allocation a;
  a.source = pm::allocation_source::host_list;
  a.hosts.reserve(hosts);
  for (std::uint32_t h = 0; h < hosts; ++h)
    a.hosts.push_back(pm::host{"node" + std::to_string(h), slots});
  return a;
}

pm::job_spec job(std::uint32_t np, pm::map_by by) {
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping.by = by;
  return j;
}

void BM_MapJob(benchmark::State& state) {
  const auto hosts = static_cast<std::uint32_t>(state.range(0));
  const auto by = state.range(1) == 0 ? pm::map_by::slot : pm::map_by::node;
  const auto alloc = cluster(hosts, 10);
  const auto spec = job(hosts * 10, by);
  std::size_t bytes = 0;
  for (auto _ : state) {
    auto map = pm::map_job(spec, alloc);
    bytes = map.memory_bytes();
    benchmark::DoNotOptimize(map);
  }
  state.counters["ranks"] = hosts * 10.0;
  state.counters["bytes_per_rank"] = static_cast<double>(bytes) / (hosts * 10.0);
}
BENCHMARK(BM_MapJob)
    ->Args({1'000, 0})
    ->Args({10'000, 0})
    ->Args({100'000, 0})
    ->Args({100'000, 1})
    ->Unit(benchmark::kMillisecond);

void BM_OneRankEnv(benchmark::State& state) {
  const auto alloc = cluster(100'000, 10);
  const auto map = pm::map_job(job(1'000'000, pm::map_by::slot), alloc);
  pm::env_map inherited = {{"PATH", "/usr/bin:/bin"},
                           {"HOME", "/root"},
                           {"LANG", "C.UTF-8"},
                           {"OMPI_MCA_btl", "self,tcp"},
                           {"SLURM_PROCID", "3"}};
  for (int i = 0; i < 40; ++i) inherited["VAR" + std::to_string(i)] = std::string(40, 'x');
  pm::launch_facts facts{"10.0.0.1", 29500, {}};
  const auto env =
      pm::make_job_env(inherited, {{"FOO=1"}, {{"btl", "self"}}}, pm::default_env_profiles, facts);
  std::uint32_t rank = 0;
  for (auto _ : state) {
    auto vars = pm::rank_environment(env, map, rank);
    benchmark::DoNotOptimize(vars);
    rank = (rank + 7919) % map.size();
  }
}
BENCHMARK(BM_OneRankEnv)->Unit(benchmark::kMicrosecond);

void BM_OneRankProfileVars(benchmark::State& state) {
  const auto map = pm::map_job(job(1'000'000, pm::map_by::node), cluster(100'000, 10));
  pm::launch_facts facts{"10.0.0.1", 29500, {}};
  std::uint32_t rank = 0;
  for (auto _ : state) {
    auto vars = pm::profile_env(map, rank, pm::default_env_profiles, facts);
    benchmark::DoNotOptimize(vars);
    rank = (rank + 7919) % map.size();
  }
}
BENCHMARK(BM_OneRankProfileVars)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
