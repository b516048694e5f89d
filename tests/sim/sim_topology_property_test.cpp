// Hosts with shapes in the simulator (rapidcheck): random machines (generated summaries, and the
// real machines of tests/data/topologies where hwloc is built) and random within-host policies,
// run through the real launcher machine, whose plans the simulated agents' answers drive exactly
// as pmd's do (docs/simulator.md, "Topologies"). What must hold: a GPU is shared only when asked,
// a bound rank's cores are on its GPU's NUMA node wherever the node has the cores, bindings to
// cores or threads are disjoint unless overloaded, the same seed gives the same answer, and a
// refusal ends the job before any rank starts.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster_gen.hpp"
#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/job_plan.hpp"
#include "pm/sim/world.hpp"
#include "pm/topology.hpp"
#ifdef PM_SIM_HWLOC
#include "support/topologies.hpp"
#include "topology/read_hwloc.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using pm::sim::scenario;
using pm::sim::verdict;
namespace topo = pm::topo;

// A machine as hwloc would summarise it: packages of NUMA nodes of cores of threads, an L3 per
// NUMA node, NVIDIA GPUs and NICs on NUMA nodes in PCI order.
topo::host_topology gen_machine() {
  topo::host_topology t;
  t.packages = *rc::gen::inRange<std::uint32_t>(1, 3);
  const auto numa_per = *rc::gen::inRange<std::uint32_t>(1, 3);
  const auto threads = *rc::gen::inRange<std::uint32_t>(1, 3);
  std::uint32_t pu = 0;
  for (std::uint32_t p = 0; p < t.packages; ++p) {
    for (std::uint32_t n = 0; n < numa_per; ++n) {
      const auto numa = t.numa_nodes();
      t.numa_os_index.push_back(numa);
      const auto cores = *rc::gen::inRange<std::uint32_t>(1, 7);
      for (std::uint32_t c = 0; c < cores; ++c) {
        t.cores.push_back(
            topo::core{p, numa, numa, static_cast<std::uint32_t>(t.pu_os_index.size()), threads});
        for (std::uint32_t h = 0; h < threads; ++h) t.pu_os_index.push_back(pu++);
      }
    }
  }
  t.l3caches = t.numa_nodes();
  std::uint32_t bus = 0x10;
  for (std::uint32_t numa = 0; numa < t.numa_nodes(); ++numa) {
    const auto gpus = *rc::gen::inRange<std::uint32_t>(0, 4);
    for (std::uint32_t g = 0; g < gpus; ++g) {
      char id[16];
      std::snprintf(id, sizeof id, "0000:%02x:00.0", bus++);
      t.gpus.push_back(topo::gpu{topo::gpu_vendor::nvidia,
                                 static_cast<std::uint32_t>(t.gpus.size()), id, "", numa,
                                 t.cores[0].package});
    }
  }
  // The package of each GPU is its NUMA node's.
  for (auto& g : t.gpus)
    for (const auto& c : t.cores)
      if (c.numa == g.numa) g.package = c.package;
  const auto nics = *rc::gen::inRange<std::uint32_t>(0, 3);
  for (std::uint32_t i = 0; i < nics; ++i) {
    const auto numa = *rc::gen::inRange<std::uint32_t>(0, t.numa_nodes());
    topo::nic n{"mlx5_" + std::to_string(i),
                "ib" + std::to_string(i),
                "mlx5_" + std::to_string(i),
                topo::nic_kind::infiniband,
                numa,
                0};
    for (const auto& c : t.cores)
      if (c.numa == numa) n.package = c.package;
    t.nics.push_back(n);
  }
  topo::check(t);
  return t;
}

// The real machines, read once (empty without hwloc).
const std::vector<std::string>& real_machines() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> out;
#ifdef PM_SIM_HWLOC
    for (const auto& f : pm::test::topology_files()) {
      try {
        out.push_back(topo::to_text(topo::read_topology_xml(f.string())));
      } catch (const pm::error&) {
        // A file this hwloc cannot load is the reader's test's business.
      }
    }
#endif
    return out;
  }();
  return texts;
}

std::string gen_shape() {
  const auto& real = real_machines();
  if (!real.empty() && *rc::gen::weightedElement<bool>({{1, true}, {2, false}}))
    return *rc::gen::elementOf(real);
  return topo::to_text(gen_machine());
}

// The NUMA node of the GPU a rank sees as `index`: of the vendor the host has most of (plan_host's
// candidates).
std::uint32_t gpu_numa(const topo::host_topology& t, std::uint32_t index) {
  auto vendor = topo::gpu_vendor::nvidia;
  for (const auto v : {topo::gpu_vendor::amd, topo::gpu_vendor::intel, topo::gpu_vendor::other})
    if (t.gpus_of(v) > t.gpus_of(vendor)) vendor = v;
  for (const auto& g : t.gpus)
    if (g.vendor == vendor && g.index == index) return g.numa;
  return topo::none;
}

// A small cluster of shaped hosts (one shape for all, some with their own) and a policy.
scenario gen_scenario() {
  scenario s;
  pm::sim::generate::hosts_and_ranks(s, 4, 8);
  s.topology = gen_shape();
  for (std::uint32_t h = 0; h < s.host_slots.size(); ++h)
    if (*rc::gen::weightedElement<bool>({{2, false}, {1, true}}))
      s.set_host_topology(h, gen_shape());
  auto& p = s.mapping.host;
  pm::set_map_by(s.mapping,
                 topo::parse_map_by(*rc::gen::weightedElement<std::string>({{4, "slot"},
                                                                            {1, "core"},
                                                                            {1, "numa"},
                                                                            {1, "package"},
                                                                            {1, "ppr:2:numa"},
                                                                            {1, "hwthread"},
                                                                            {1, "slot:pe=2"}})));
  p.bind = topo::parse_bind_to(*rc::gen::weightedElement<std::string>(
      {{2, "none"}, {4, "core"}, {1, "hwthread"}, {1, "numa"}, {1, "core:overload-allowed"}}));
  const auto gpus = *rc::gen::weightedElement<std::uint32_t>({{1, 0}, {4, 1}, {1, 2}});
  if (gpus > 0) {
    p.gpus.per_rank = gpus;
    p.gpus.shared = *rc::gen::weightedElement<bool>({{4, false}, {1, true}});
  }
  // Something to plan, always: a job that asks nothing sends no topology request.
  if (!pm::needs_topology(s.mapping)) s.mapping.report_bindings = true;
  s.seed = *rc::gen::arbitrary<std::uint64_t>();
  s.latency.run_time = 1s;
  s.latency.run_jitter = 100ms;
  return s;
}

#define SIM_ASSERT(result, condition)                                                    \
  do {                                                                                   \
    if (!(condition)) RC_FAIL(std::string(#condition) + "\nreplay: " + (result).replay); \
  } while (false)

RC_GTEST_PROP(SimTopologyProperty, HostsArePlannedAsInProductionAndTheirBindingsHold, ()) {
  const auto s = gen_scenario();
  const auto map = pm::map_job(pm::sim::make_job(s), pm::sim::make_allocation(s));
  std::vector<topo::host_topology> shapes;
  for (std::uint32_t h = 0; h < map.allocation().hosts.size(); ++h)
    shapes.push_back(topo::topology_from_text(s.topology_of(h)));
  // What the pure planner says of this job; the launch must agree, refusal included.
  std::optional<pm::job_plan> want;
  try {
    want = pm::plan_job(map, s.mapping.host,
                        [&](std::uint32_t h) -> const topo::host_topology& { return shapes[h]; });
  } catch (const pm::error&) {
  }
  RC_CLASSIFY(!want, "refused");
  RC_CLASSIFY(s.mapping.host.gpus.per_rank > 0, "GPUs");
  RC_CLASSIFY(!s.host_topologies.empty(), "mixed shapes");

  std::uint32_t spawned = 0;
  pm::sim::run_options o;
  o.env = pm::job_env{};
  o.on_spawn = [&](std::uint32_t, std::uint32_t, const std::vector<std::string>&) { ++spawned; };
  const auto r = pm::sim::run(s, o);
  if (r.outcome != verdict::ok) RC_FAIL(r.explain());
  const auto again = pm::sim::run(s);
  SIM_ASSERT(r, again.trace_hash == r.trace_hash);
  SIM_ASSERT(r, again.report.resources == r.report.resources);

  if (!want) {
    // Refused: one line, exit 2, nothing ever started on any host.
    SIM_ASSERT(r, r.report.exit_code == 2);
    SIM_ASSERT(r, spawned == 0u);
    for (const auto& rr : r.report.ranks) SIM_ASSERT(r, rr.state == pm::rank_state::not_started);
    return;
  }
  SIM_ASSERT(r, r.report.exit_code == 0);
  SIM_ASSERT(r, spawned == map.size());
  SIM_ASSERT(r, r.report.resources == want->resources);

  const auto& policy = s.mapping.host;
  // A core holds one rank unless mapping by hwthread, which counts threads as cpus: then its
  // threads' ranks all bind to it without overloading it (Open MPI's rule).
  const bool exclusive_cpus =
      policy.bind.to && !policy.bind.overload_allowed &&
      (*policy.bind.to == topo::object::hwthread ||
       (*policy.bind.to == topo::object::core && policy.map.by != topo::object::hwthread));
  for (std::uint32_t n = 0; n < map.num_nodes(); ++n) {
    const auto h = map.host_of_node(n);
    const auto& t = shapes[h];
    std::map<std::uint32_t, std::uint32_t> pu_numa;
    for (const auto& c : t.cores)
      for (std::uint32_t i = 0; i < c.pu_count; ++i)
        pu_numa[t.pu_os_index[c.first_pu + i]] = c.numa;
    std::set<std::uint32_t> gpus_taken, cpus_taken;
    std::map<std::uint32_t, std::uint32_t> led_by;  // NUMA node -> ranks whose first GPU is there
    for (const auto rank : map.ranks_on_host(h)) {
      const auto& got = r.report.resources[rank];
      if (policy.gpus.per_rank > 0 && t.gpus.size() >= policy.gpus.per_rank) {
        SIM_ASSERT(r, got.gpus.size() == policy.gpus.per_rank);
      }
      for (const auto g : got.gpus)
        if (!gpus_taken.insert(g).second) SIM_ASSERT(r, policy.gpus.shared);
      const auto cpus = topo::parse_cpu_list(got.cpus);
      SIM_ASSERT(r, policy.bind.to.has_value() == !cpus.empty() || policy.map.pe > 0);
      if (exclusive_cpus)
        for (const auto c : cpus) SIM_ASSERT(r, cpus_taken.insert(c).second);
      if (!got.gpus.empty() && gpu_numa(t, got.gpus[0]) != topo::none)
        ++led_by[gpu_numa(t, got.gpus[0])];
    }
    // GPU-led and bound to cores: a rank's cores are on its first GPU's NUMA node wherever that
    // node has cores for every rank led there.
    const bool gpu_led = policy.gpus.per_rank > 0 && !policy.gpus.shared &&
                         (policy.map.by == topo::object::slot) && policy.map.pe == 0 &&
                         exclusive_cpus && *policy.bind.to == topo::object::core;
    if (!gpu_led) continue;
    for (const auto rank : map.ranks_on_host(h)) {
      const auto& got = r.report.resources[rank];
      if (got.gpus.empty()) continue;
      const auto numa = gpu_numa(t, got.gpus[0]);
      if (numa == topo::none) continue;
      const auto cores_there = static_cast<std::uint32_t>(std::count_if(
          t.cores.begin(), t.cores.end(), [&](const auto& c) { return c.numa == numa; }));
      if (cores_there < led_by[numa]) continue;  // the machine does not allow it
      for (const auto c : topo::parse_cpu_list(got.cpus)) SIM_ASSERT(r, pu_numa.at(c) == numa);
    }
  }
}

// The simulated agent answers as pmd does: a host without a shape refuses the job, in one line,
// before any rank of any host starts.
TEST(SimTopology, AHostWithoutAShapeRefusesTheJob) {
  scenario s;
  s.hosts = 3;
  s.slots = 2;
  s.topology = "";
  s.mapping.host.bind = topo::parse_bind_to("core");
  const auto r = pm::sim::run(s);
  ASSERT_EQ(r.outcome, verdict::ok) << r.explain();
  EXPECT_EQ(r.report.exit_code, 2);
  for (const auto& rr : r.report.ranks) EXPECT_EQ(rr.state, pm::rank_state::not_started);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_NE(r.lines.back().find("cannot tell its topology"), std::string::npos) << r.lines.back();
}

}  // namespace
