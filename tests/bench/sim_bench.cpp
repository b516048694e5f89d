// sim_bench: a simulated launch of H hosts x 8 slots with one rank failing and the abort
// propagating to every other rank, for H = 1,000 .. 100,000 (or the hosts given as arguments).
// Prints wall time (the median of 3 runs, and the fastest: the machines are shared and noisy),
// the median CPU time,
// simulated events per second, and peak memory per rank. Goal at 100,000 hosts (800,000 ranks):
// under 2 s and 2 GiB on the project's 2-core machine.
//
// Then the launch itself: 1,000 and 10,000 hosts started flat (the launcher starts every agent,
// at most 32 ssh at once) or as a tree of fan-out 32 (docs/agent-link.md, the launch plan), with
// a realistic ssh hop of 0.3 s: the virtual time until the last rank runs.
#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "pm/sim/world.hpp"

// This process's CPU time (user + system): less disturbed than wall time by other jobs.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto sec = [](timeval t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB), after which
  // the simulation's large, short-lived buffers (the event queue's buckets, the streams' pieces in
  // flight during the abort) come from the heap and fragment it: a fixed threshold (glibc's
  // default, 128 KiB) gives them back when freed. 100,000 hosts: max RSS -8 %, docs/simulator.md.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  std::vector<std::uint32_t> sizes{1000, 10000, 100000};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i)
      sizes.push_back(static_cast<std::uint32_t>(std::strtoul(argv[i], nullptr, 10)));
  }
  std::printf("%8s %9s %9s %9s %9s %10s %12s %10s %9s %s\n", "hosts", "ranks", "median_s", "min_s",
              "cpu_s", "events", "events_per_s", "peak_MiB", "B/rank", "verdict");
  int status = 0;
  for (auto hosts : sizes) {
    pm::sim::scenario s;
    s.hosts = hosts;
    s.slots = 8;
    s.seed = 42;
    const std::uint32_t ranks = hosts * 8;
    pm::sim::process_script fail;
    fail.value = 7;
    fail.at = s.latency.run_time / 2;
    s.set_script(ranks / 2 + 3, fail);
    std::vector<double> walls, cpus;
    pm::sim::run_result r;
    for (int round = 0; round < 3; ++round) {
      r = {};  // the previous report freed first: the peak is one run's
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      r = pm::sim::run(s);
      walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      cpus.push_back(cpu_seconds() - c0);
    }
    std::sort(walls.begin(), walls.end());
    std::sort(cpus.begin(), cpus.end());
    const double wall = walls[1];
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    const double peak = static_cast<double>(u.ru_maxrss) * 1024.0;  // a high-water mark
    std::printf("%8u %9u %9.3f %9.3f %9.3f %10llu %12.0f %10.1f %9.0f %s\n", hosts, ranks, wall,
                walls[0], cpus[1], static_cast<unsigned long long>(r.stats.events),
                static_cast<double>(r.stats.events) / wall, peak / 1048576.0,
                peak / static_cast<double>(ranks), pm::sim::to_string(r.outcome));
    std::fflush(stdout);
    if (r.outcome != pm::sim::verdict::ok || r.report.exit_code != 7) status = 1;
  }
  // Launch time, flat vs tree (virtual seconds until every rank started).
  std::printf("\n%8s %6s %12s %10s\n", "hosts", "plan", "launch_s", "wall_s");
  for (std::uint32_t hosts : {1000u, 10000u}) {
    for (std::uint32_t fanout : {0u, 32u}) {
      pm::sim::scenario s;
      s.hosts = hosts;
      s.slots = 8;
      s.seed = 42;
      s.latency.agent_hop = std::chrono::milliseconds(300);
      s.latency.fanout = fanout;
      s.latency.run_time = std::chrono::seconds(1);
      // A flat launch queues most ssh connections behind the cap: the hello deadline must not
      // count that wait (it does in the real launcher today; docs/simulator.md).
      s.latency.hello_timeout = std::chrono::hours(1);
      const auto t0 = std::chrono::steady_clock::now();
      const auto r = pm::sim::run(s);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::chrono::nanoseconds last{0};
      for (const auto& rr : r.report.ranks) {
        if (rr.started_at && *rr.started_at > last) last = *rr.started_at;
      }
      std::printf("%8u %6s %12.3f %10.3f %s\n", hosts, fanout == 0 ? "flat" : "tree32",
                  std::chrono::duration<double>(last).count(), wall, pm::sim::to_string(r.outcome));
      if (r.outcome != pm::sim::verdict::ok) status = 1;
    }
  }
  // Connect-back (docs/slurm.md): one srun step starts every agent (one 300 ms hop), each calls
  // back with the token and the launcher's caller_gate accepts it; the hello deadline is the
  // default 20 s. Launch time as above; wall and calls show the launcher-side work per host.
  std::printf("\n%8s %6s %12s %10s %8s\n", "hosts", "plan", "launch_s", "wall_s", "calls");
  for (std::uint32_t hosts : {1000u, 10000u}) {
    pm::sim::scenario s;
    s.hosts = hosts;
    s.slots = 8;
    s.seed = 42;
    s.connect_back = true;
    s.latency.agent_hop = std::chrono::milliseconds(300);
    s.latency.run_time = std::chrono::seconds(1);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = pm::sim::run(s);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::chrono::nanoseconds last{0};
    for (const auto& rr : r.report.ranks) {
      if (rr.started_at && *rr.started_at > last) last = *rr.started_at;
    }
    std::printf("%8u %6s %12.3f %10.3f %8u %s\n", hosts, "cb",
                std::chrono::duration<double>(last).count(), wall, r.stats.calls,
                pm::sim::to_string(r.outcome));
    if (r.outcome != pm::sim::verdict::ok || r.stats.calls != hosts) status = 1;
  }
  return status;
}
