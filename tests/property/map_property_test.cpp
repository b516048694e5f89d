// Properties of map_job over generated allocations and jobs.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>

#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace {

struct generated {
  pm::allocation alloc;
  pm::job_spec job;
};

rc::Gen<generated> gen_case() {
  return rc::gen::exec([] {
    generated g;
    const auto nhosts = *rc::gen::inRange<std::uint32_t>(1, 12);
    g.alloc.source =
        *rc::gen::element(pm::allocation_source::host_list, pm::allocation_source::implicit_local);
    for (std::uint32_t h = 0; h < nhosts; ++h) {
      pm::host host{"h" + std::to_string(h), *rc::gen::inRange<std::uint32_t>(1, 6)};
      if (*rc::gen::inRange(0, 4) == 0)
        host.max_slots = host.slots + *rc::gen::inRange<std::uint32_t>(0, 3);
      g.alloc.hosts.push_back(host);
    }
    g.job.mapping.by = *rc::gen::element(pm::map_by::slot, pm::map_by::node, pm::map_by::ppr_node);
    g.job.mapping.ppr = *rc::gen::inRange<std::uint32_t>(1, 4);
    if (*rc::gen::arbitrary<bool>()) g.job.mapping.oversubscribe = *rc::gen::arbitrary<bool>();
    const auto napps = *rc::gen::inRange(1, 4);
    for (int a = 0; a < napps; ++a) {
      pm::app_context app;
      app.argv = {"app" + std::to_string(a)};
      if (*rc::gen::inRange(0, 5) != 0) app.np = *rc::gen::inRange<std::uint32_t>(1, 30);
      if (*rc::gen::inRange(0, 4) == 0) {
        app.hosts = {"h" + std::to_string(*rc::gen::inRange<std::uint32_t>(0, nhosts))};
      }
      g.job.apps.push_back(app);
    }
    return g;
  });
}

}  // namespace

RC_GTEST_PROP(MapProperty, PlacementsAreConsistent, ()) {
  const auto g = *gen_case();
  pm::rank_map map;
  try {
    map = pm::map_job(g.job, g.alloc);
  } catch (const pm::error& e) {
    RC_ASSERT(e.code() == pm::errc::mapping);
    RC_CLASSIFY(true, "refused");
    return;
  }
  RC_CLASSIFY(map.size() > g.alloc.total_slots(), "oversubscribed");
  const bool may_oversubscribe =
      g.job.mapping.oversubscribe.value_or(g.alloc.source == pm::allocation_source::implicit_local);

  // Ranks are a bijection onto 0..N-1: every rank appears on exactly one host's list.
  std::vector<int> seen(map.size(), 0);
  std::set<std::uint32_t> used_hosts;
  for (std::uint32_t h = 0; h < g.alloc.hosts.size(); ++h) {
    auto ranks = map.ranks_on_host(h);
    if (!ranks.empty()) used_hosts.insert(h);
    for (std::uint32_t i = 0; i < ranks.size(); ++i) {
      ++seen.at(ranks[i]);
      const auto p = map.at(ranks[i]);
      // Local ranks are 0..local_size-1 in global-rank order.
      RC_ASSERT(p.host == h);
      RC_ASSERT(p.local_rank == i);
      RC_ASSERT(p.local_size == ranks.size());
      if (i > 0) RC_ASSERT(ranks[i - 1] < ranks[i]);
    }
    // max_slots is never exceeded; slots only with oversubscription allowed.
    if (g.alloc.hosts[h].max_slots != 0) RC_ASSERT(ranks.size() <= g.alloc.hosts[h].max_slots);
    if (!may_oversubscribe) RC_ASSERT(ranks.size() <= g.alloc.hosts[h].slots);
  }
  for (auto count : seen) RC_ASSERT(count == 1);

  // Node index: position of the host among the used hosts, in allocation order.
  RC_ASSERT(map.num_nodes() == used_hosts.size());
  std::uint32_t node = 0;
  for (auto h : used_hosts) {
    RC_ASSERT(map.node_of_host(h) == std::optional<std::uint32_t>(node));
    RC_ASSERT(map.host_of_node(node) == h);
    ++node;
  }

  // Apps are ranked consecutively, with their requested sizes, on their allowed hosts.
  std::uint32_t first = 0;
  for (std::uint32_t a = 0; a < g.job.apps.size(); ++a) {
    RC_ASSERT(map.app_first_rank(a) == first);
    if (g.job.apps[a].np) RC_ASSERT(map.app_size(a) == *g.job.apps[a].np);
    for (std::uint32_t r = first; r < first + map.app_size(a); ++r) {
      RC_ASSERT(map.at(r).app == a);
      if (!g.job.apps[a].hosts.empty()) {
        RC_ASSERT(g.alloc.hosts[map.at(r).host].name == g.job.apps[a].hosts[0]);
      }
    }
    first += map.app_size(a);
  }
  RC_ASSERT(first == map.size());

  // By slot without oversubscription, a single app fills hosts in order: ranks on a host are
  // contiguous and hosts appear in allocation order.
  if (g.job.apps.size() == 1 && g.job.mapping.by != pm::map_by::node) {
    for (std::uint32_t r = 1; r < map.size(); ++r) RC_ASSERT(map.at(r - 1).host <= map.at(r).host);
  }
}

RC_GTEST_PROP(MapProperty, MappingIsAPureFunction, ()) {
  const auto g = *gen_case();
  try {
    const auto a = pm::map_job(g.job, g.alloc);
    const auto b = pm::map_job(g.job, g.alloc);
    RC_ASSERT(a.size() == b.size());
    for (std::uint32_t r = 0; r < a.size(); ++r) RC_ASSERT(a.at(r) == b.at(r));
  } catch (const pm::error&) {
    RC_SUCCEED("refused");
  }
}
