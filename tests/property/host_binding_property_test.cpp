// plan_host over random machines and policies (docs/gpus.md): refusals are one line naming the
// host; otherwise no GPU is shared unless asked, each rank gets what it asked, bindings are
// disjoint unless overloaded, a rank's cores sit on its GPU's NUMA node wherever the machine has
// the cores for it, and the same input gives the same answer. The summary's text form round-trips.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/topology.hpp"

namespace {

using namespace pm::topo;

/// A machine: packages of NUMA nodes of cores of 1-2 threads (OS indexes shuffled by a stride),
/// GPUs and NICs on random NUMA nodes (or none).
rc::Gen<host_topology> machines() {
  return rc::gen::exec([] {
    host_topology t;
    t.packages = *rc::gen::inRange(1u, 4u);
    const auto numa_per_package = *rc::gen::inRange(1u, 3u);
    const auto cores_per_numa = *rc::gen::inRange(1u, 7u);
    const auto threads = *rc::gen::inRange(1u, 3u);
    for (std::uint32_t n = 0; n < t.packages * numa_per_package; ++n) t.numa_os_index.push_back(n);
    t.l3caches = *rc::gen::element(0u, t.packages);
    for (std::uint32_t p = 0; p < t.packages; ++p) {
      for (std::uint32_t n = 0; n < numa_per_package; ++n) {
        for (std::uint32_t c = 0; c < cores_per_numa; ++c) {
          core k;
          k.package = p;
          k.numa = p * numa_per_package + n;
          k.l3 = t.l3caches ? p : none;
          k.first_pu = static_cast<std::uint32_t>(t.pu_os_index.size());
          k.pu_count = threads;
          t.cores.push_back(k);
          for (std::uint32_t h = 0; h < threads; ++h) t.pu_os_index.push_back(0);
        }
      }
    }
    const auto cores = static_cast<std::uint32_t>(t.cores.size());
    for (std::uint32_t c = 0; c < cores; ++c) {  // Linux's numbering: thread h of core c is h*C+c
      for (std::uint32_t h = 0; h < threads; ++h) t.pu_os_index[c * threads + h] = h * cores + c;
    }
    const auto gpus = *rc::gen::inRange(0u, 9u);
    for (std::uint32_t g = 0; g < gpus; ++g) {
      gpu x;
      x.vendor = gpu_vendor::nvidia;
      x.index = g;
      x.pci_bus_id = "0000:" + std::to_string(10 + g) + ":00.0";
      x.numa = *rc::gen::inRange(0u, t.numa_nodes());
      x.package = x.numa / numa_per_package;
      t.gpus.push_back(x);
    }
    const auto nics = *rc::gen::inRange(0u, 4u);
    for (std::uint32_t i = 0; i < nics; ++i) {
      nic x;
      x.name = x.rdma = "mlx5_" + std::to_string(i);
      x.netdev = "ib" + std::to_string(i);
      x.kind = nic_kind::infiniband;
      x.numa = *rc::gen::inRange(0u, t.numa_nodes());
      x.package = x.numa / numa_per_package;
      t.nics.push_back(x);
    }
    return t;
  });
}

rc::Gen<binding_policy> policies() {
  return rc::gen::exec([] {
    binding_policy p;
    p.map = parse_map_by(*rc::gen::element<std::string>("slot", "node", "core", "numa", "package",
                                                        "l3cache", "hwthread", "ppr:2:numa",
                                                        "ppr:1:package", "core:pe=2"));
    p.bind = parse_bind_to(*rc::gen::element<std::string>("none", "core", "numa", "hwthread",
                                                          "core:overload-allowed", "package"));
    if (*rc::gen::arbitrary<bool>()) {
      p.rank_by = *rc::gen::element(object::core, object::numa, object::package);
    }
    p.gpus.per_rank = *rc::gen::inRange(0u, 3u);
    p.gpus.shared = *rc::gen::arbitrary<bool>();
    return p;
  });
}

bool same(const host_plan& a, const host_plan& b) {
  if (a.size() != b.size()) return false;
  for (std::uint32_t r = 0; r < a.size(); ++r) {
    if (!std::ranges::equal(a.cpus(r), b.cpus(r)) || !std::ranges::equal(a.gpus(r), b.gpus(r)) ||
        a.nic(r) != b.nic(r)) {
      return false;
    }
  }
  return true;
}

}  // namespace

RC_GTEST_PROP(HostBindingProperty, SummaryTextRoundTrips, ()) {
  const auto t = *machines();
  check(t);
  RC_ASSERT(topology_from_text(to_text(t)) == t);
}

RC_GTEST_PROP(HostBindingProperty, DecisionsKeepTheirPromises, ()) {
  const auto t = *machines();
  const auto p = *policies();
  const auto n = *rc::gen::inRange(1u, static_cast<std::uint32_t>(t.pu_os_index.size()) + 3);
  host_plan plan;
  try {
    plan = plan_host(t, "h", n, p);
  } catch (const pm::error& e) {
    const std::string what = e.what();
    RC_ASSERT(e.code() == pm::errc::mapping);
    RC_ASSERT(what.rfind("host 'h' ", 0) == 0);
    RC_ASSERT(what.find('\n') == std::string::npos);
    return;
  }
  RC_ASSERT(plan.size() == n);
  RC_ASSERT(same(plan, plan_host(t, "h", n, p)));  // deterministic
  std::multiset<std::uint32_t> gpus_taken, cpus_taken;
  for (std::uint32_t r = 0; r < n; ++r) {
    RC_ASSERT(plan.gpus(r).size() == p.gpus.per_rank);
    gpus_taken.insert(plan.gpus(r).begin(), plan.gpus(r).end());
    for (auto c : plan.cpus(r)) {
      RC_ASSERT(std::find(t.pu_os_index.begin(), t.pu_os_index.end(), c) != t.pu_os_index.end());
    }
    cpus_taken.insert(plan.cpus(r).begin(), plan.cpus(r).end());
    if (!t.nics.empty()) RC_ASSERT(plan.nic(r) < t.nics.size());
  }
  if (!p.gpus.shared) {  // no GPU shared unless asked
    RC_ASSERT(std::set<std::uint32_t>(gpus_taken.begin(), gpus_taken.end()).size() ==
              gpus_taken.size());
  }
  // Bindings to cores or threads are disjoint, except cores under a mapping by hardware thread:
  // then a core's threads are its cpus, and two ranks mapped to its two threads are both bound to
  // it without overloading it (Open MPI's rule: --map-by hwthread counts threads as cpus).
  const bool fine =
      p.bind.to == object::hwthread || (p.bind.to == object::core && p.map.by != object::hwthread);
  if (fine && !p.bind.overload_allowed) {
    RC_ASSERT(std::set<std::uint32_t>(cpus_taken.begin(), cpus_taken.end()).size() ==
              cpus_taken.size());
  }
}

RC_GTEST_PROP(HostBindingProperty, CoresFollowTheirGpusWhereTheMachineAllows, ()) {
  const auto t = *machines();
  RC_PRE(!t.gpus.empty());
  binding_policy p;
  p.bind = parse_bind_to("core");
  p.gpus.per_rank = 1;
  const auto n = *rc::gen::inRange(1u, static_cast<std::uint32_t>(t.gpus.size()) + 1);
  // The machine allows it when each NUMA node has a core for each GPU on it.
  for (std::uint32_t node = 0; node < t.numa_nodes(); ++node) {
    const auto gpus =
        std::count_if(t.gpus.begin(), t.gpus.end(), [&](const gpu& g) { return g.numa == node; });
    const auto cores = std::count_if(t.cores.begin(), t.cores.end(),
                                     [&](const core& c) { return c.numa == node; });
    RC_PRE(cores >= gpus);
  }
  const auto plan = plan_host(t, "h", n, p);
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto node = t.gpus[plan.gpus(r)[0]].numa;
    RC_ASSERT(plan.numa(r) == node);
    for (auto cpu : plan.cpus(r)) {
      const auto at = static_cast<std::uint32_t>(
          std::find(t.pu_os_index.begin(), t.pu_os_index.end(), cpu) - t.pu_os_index.begin());
      const auto owner = std::find_if(t.cores.begin(), t.cores.end(), [&](const core& c) {
        return at >= c.first_pu && at < c.first_pu + c.pu_count;
      });
      RC_ASSERT(owner->numa == node);
    }
  }
}

RC_GTEST_PROP(HostBindingProperty, ForeignTextIsRefusedNeverTrusted, ()) {
  const auto t = *machines();
  auto text = to_text(t);
  const auto at = *rc::gen::inRange<std::size_t>(0, text.size());
  text[at] = *rc::gen::element(';', ',', '*', '9', '_', '|', '/', '%', '-', 'x');
  try {
    const auto back = topology_from_text(text);
    check(back);  // whatever it accepted is a consistent summary
  } catch (const pm::error& e) {
    RC_ASSERT(e.code() == pm::errc::parse);
  }
}
