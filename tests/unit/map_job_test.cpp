// map_job: Open MPI 4.1's placements (checked against mpirun --display-map) and its errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/job_map.hpp"
#include "pm/rank_map.hpp"

namespace {

pm::allocation hosts(std::vector<std::pair<std::string, std::uint32_t>> list,
                     pm::allocation_source source = pm::allocation_source::host_list) {
  pm::allocation a;
  a.source = source;
  for (auto& [name, slots] : list) a.hosts.push_back(pm::host{name, slots});
  return a;
}

pm::job_spec job(std::optional<std::uint32_t> np, pm::map_by by = pm::map_by::slot,
                 std::optional<bool> oversubscribe = std::nullopt) {
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping.by = by;
  j.mapping.oversubscribe = oversubscribe;
  return j;
}

// Host name of every rank, in rank order: "aabbcc".
std::string layout(const pm::rank_map& map) {
  std::string s;
  for (std::uint32_t r = 0; r < map.size(); ++r) s += map.allocation().hosts[map.at(r).host].name;
  return s;
}

std::string mapping_error(const pm::job_spec& j, const pm::allocation& a) {
  try {
    pm::map_job(j, a);
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::mapping);
    return e.what();
  }
  return "no error";
}

TEST(MapJob, BySlotFillsEachHostInOrder) {
  auto map = pm::map_job(job(6), hosts({{"a", 2}, {"b", 2}, {"c", 2}}));
  EXPECT_EQ(layout(map), "aabbcc");
  EXPECT_EQ(map.num_nodes(), 3u);
  EXPECT_EQ(map.at(3), (pm::placement{3, 0, 1, 1, 2, 1}));
}

TEST(MapJob, ByNodeDealsRoundRobin) {
  EXPECT_EQ(layout(pm::map_job(job(6, pm::map_by::node), hosts({{"a", 2}, {"b", 2}, {"c", 2}}))),
            "abcabc");
  EXPECT_EQ(layout(pm::map_job(job(4, pm::map_by::node), hosts({{"a", 3}, {"b", 1}}))), "abaa");
  EXPECT_EQ(layout(pm::map_job(job(5, pm::map_by::node), hosts({{"a", 3}, {"b", 1}, {"c", 2}}))),
            "abcaa");
  EXPECT_EQ(layout(pm::map_job(job(8, pm::map_by::node),
                               hosts({{"a", 4}, {"b", 1}, {"c", 1}, {"d", 4}}))),
            "abcdadad");
  EXPECT_EQ(layout(pm::map_job(job(6, pm::map_by::node), hosts({{"a", 2}, {"b", 5}}))), "ababbb");
}

TEST(MapJob, LocalRanksFollowGlobalOrderPerHost) {
  auto map = pm::map_job(job(6, pm::map_by::node), hosts({{"a", 2}, {"b", 2}, {"c", 2}}));
  EXPECT_EQ(map.at(0).local_rank, 0u);
  EXPECT_EQ(map.at(3).local_rank, 1u);
  EXPECT_EQ(map.at(5).host, 2u);
  EXPECT_EQ(map.at(5).local_rank, 1u);
  auto on_b = map.ranks_on_host(1);
  EXPECT_EQ(std::vector<std::uint32_t>(on_b.begin(), on_b.end()),
            (std::vector<std::uint32_t>{1, 4}));
}

TEST(MapJob, NodeIndexCountsOnlyUsedHosts) {
  auto j = job(2);
  j.apps[0].hosts = {"c", "a"};
  auto map = pm::map_job(j, hosts({{"a", 1}, {"b", 4}, {"c", 1}}));
  EXPECT_EQ(layout(map), "ac");
  EXPECT_EQ(map.num_nodes(), 2u);
  EXPECT_EQ(map.at(1).node, 1u);
  EXPECT_EQ(map.node_of_host(1), std::nullopt);
  EXPECT_EQ(map.host_of_node(1), 2u);
}

TEST(MapJob, OversubscribedBySlotBalancesTheRest) {
  // mpirun -H a:2,b:1 -np 5 --oversubscribe: a gets 3, b gets 2.
  EXPECT_EQ(layout(pm::map_job(job(5, pm::map_by::slot, true), hosts({{"a", 2}, {"b", 1}}))),
            "aaabb");
  // ... and by node: a b a b a b.
  EXPECT_EQ(layout(pm::map_job(job(6, pm::map_by::node, true), hosts({{"a", 2}, {"b", 1}}))),
            "ababab");
  EXPECT_EQ(layout(pm::map_job(job(7, pm::map_by::node, true), hosts({{"a", 3}, {"b", 1}}))),
            "abababa");
}

TEST(MapJob, ExplicitAllocationsRefuseOversubscription) {
  EXPECT_EQ(mapping_error(job(3), hosts({{"a", 1}, {"b", 1}})),
            "not enough slots: 3 ranks requested, 2 slots available on 2 hosts (add "
            "--oversubscribe to place more ranks than slots)");
  EXPECT_EQ(mapping_error(job(3, pm::map_by::slot, false),
                          hosts({{"me", 2}}, pm::allocation_source::implicit_local)),
            "not enough slots: 3 ranks requested, 2 slots available on 1 host (add "
            "--oversubscribe to place more ranks than slots)");
}

// A remote host of a single bare hostfile line counts 1 slot: the refusal says so and how to fix
// it (mpirun asks that host's daemon for its cores; pmrun maps before any agent runs).
TEST(MapJob, ARefusalNamesARemoteBareHostfileLine) {
  auto a = hosts({{"node1", 1}}, pm::allocation_source::hostfile);
  a.hosts[0].slots_given = false;
  EXPECT_EQ(mapping_error(job(2), a),
            "not enough slots: 2 ranks requested, 1 slot available on 1 host (add "
            "--oversubscribe to place more ranks than slots; host 'node1' is a bare hostfile "
            "line: 1 slot on a remote host, give it slots=N)");
  a.hosts[0].slots_given = true;  // slots=1 given: the usual line
  EXPECT_EQ(mapping_error(job(2), a),
            "not enough slots: 2 ranks requested, 1 slot available on 1 host (add "
            "--oversubscribe to place more ranks than slots)");
}

TEST(MapJob, ImplicitLocalAllocationMayBeOversubscribed) {
  auto map = pm::map_job(job(5), hosts({{"me", 2}}, pm::allocation_source::implicit_local));
  EXPECT_EQ(layout(map), "mememememe");
  EXPECT_EQ(map.at(4).local_size, 5u);
}

TEST(MapJob, MaxSlotsIsAHardLimit) {
  auto a = hosts({{"a", 1}, {"b", 1}});
  a.hosts[0].max_slots = 2;
  // mpirun --hostfile (a slots=1 max_slots=2, b slots=1) -np 4 --oversubscribe: a 2, b 2.
  EXPECT_EQ(layout(pm::map_job(job(4, pm::map_by::slot, true), a)), "aabb");
  a.hosts[1].max_slots = 1;
  EXPECT_EQ(mapping_error(job(4, pm::map_by::slot, true), a),
            "not enough slots: 4 ranks requested, max_slots allows 3 on 2 hosts");
  EXPECT_EQ(layout(pm::map_job(job(3, pm::map_by::node, true), a)), "aba");
}

// Where libpm differs from mpirun 4.1.4 (docs/mapping.md), checked with mpirun --display-map on
// the hostfile "a slots=1 max_slots=2 / b slots=1 max_slots=1".
TEST(MapJob, MaxSlotsAgainstMpirun414) {
  auto a = hosts({{"a", 1}, {"b", 1}});
  a.hosts[0].max_slots = 2;
  a.hosts[1].max_slots = 1;
  // Same: without --oversubscribe, slots are the limit and max_slots adds none (mpirun: "not
  // enough slots" for -np 3).
  EXPECT_EQ(layout(pm::map_job(job(2), a)), "ab");
  EXPECT_EQ(mapping_error(job(3), a),
            "not enough slots: 3 ranks requested, 2 slots available on 2 hosts (add "
            "--oversubscribe to place more ranks than slots)");
  // Differs: with --oversubscribe mpirun 4.1.4 ignores max_slots (-np 6 gives a 3, b 3, above
  // b's max_slots=1); libpm keeps it as the hard limit a hostfile says it is.
  EXPECT_EQ(mapping_error(job(6, pm::map_by::slot, true), a),
            "not enough slots: 6 ranks requested, max_slots allows 3 on 2 hosts");
}

TEST(MapJob, RankByRenumbersWithoutMovingRanks) {
  // mpirun 4.1.4 -H a:2,b:2 -np 4: --rank-by node gives a 0,2 · b 1,3; --map-by node --rank-by
  // slot gives a 0,1 · b 2,3.
  auto a = hosts({{"a", 2}, {"b", 2}});
  auto by_slot = job(4);
  by_slot.mapping.ranking = pm::rank_by::node;
  EXPECT_EQ(layout(pm::map_job(by_slot, a)), "abab");
  auto by_node = job(4, pm::map_by::node);
  by_node.mapping.ranking = pm::rank_by::slot;
  EXPECT_EQ(layout(pm::map_job(by_node, a)), "aabb");
  // Counts still come from the mapping: -H a:3,b:1 -np 4 --rank-by node: a 0,2,3 · b 1.
  auto uneven = job(4);
  uneven.mapping.ranking = pm::rank_by::node;
  const auto m = pm::map_job(uneven, hosts({{"a", 3}, {"b", 1}}));
  EXPECT_EQ(layout(m), "abaa");
  EXPECT_EQ(m.at(3).local_rank, 2u);
}

TEST(MapJob, OmittedNpMeansEverySlot) {
  EXPECT_EQ(pm::map_job(job(std::nullopt), hosts({{"a", 3}, {"b", 2}})).size(), 5u);
}

TEST(MapJob, PprPlacesNPerNode) {
  pm::job_spec j = job(std::nullopt, pm::map_by::ppr_node);
  j.mapping.ppr = 2;
  EXPECT_EQ(layout(pm::map_job(j, hosts({{"a", 3}, {"b", 3}}))), "aabb");
  j.apps[0].np = 3;
  EXPECT_EQ(layout(pm::map_job(j, hosts({{"a", 3}, {"b", 3}}))), "aab");
  j.apps[0].np = 5;
  EXPECT_EQ(mapping_error(j, hosts({{"a", 3}, {"b", 3}})),
            "5 ranks requested but ppr:2:node on 2 hosts places at most 4");
  j.apps[0].np = std::nullopt;
  EXPECT_EQ(mapping_error(j, hosts({{"a", 1}, {"b", 3}})),
            "not enough slots: ppr:2:node needs 2 on host 'a', which has 1 free slot (add "
            "--oversubscribe to place more ranks than slots)");
}

TEST(MapJob, MpmdAppsAreRankedConsecutively) {
  pm::job_spec j = job(1);
  j.apps.push_back(pm::app_context{{"b"}, 4, {}, {}});
  auto map = pm::map_job(j, hosts({{"a", 2}, {"b", 2}, {"c", 2}}));
  // mpirun -H a:2,b:2,c:2 -np 1 x : -np 4 y → a: 0 (app 0), 1 (app 1); b: 2,3; c: 4.
  EXPECT_EQ(layout(map), "aabbc");
  EXPECT_EQ(map.at(0).app, 0u);
  EXPECT_EQ(map.at(1).app, 1u);
  EXPECT_EQ(map.at(1).local_rank, 1u);
  EXPECT_EQ(map.app_first_rank(1), 1u);
  EXPECT_EQ(map.app_size(1), 4u);
  j.apps[1].np = std::nullopt;  // every slot again: 6 more do not fit
  EXPECT_EQ(mapping_error(j, hosts({{"a", 2}, {"b", 2}, {"c", 2}})),
            "app context 1: not enough slots: 6 ranks requested, 5 slots available on 3 hosts "
            "(add --oversubscribe to place more ranks than slots)");
}

TEST(MapJob, BadRequests) {
  EXPECT_EQ(mapping_error(job(0), hosts({{"a", 2}})), "no ranks to start (-np must be at least 1)");
  auto j = job(1);
  j.apps[0].hosts = {"zz"};
  EXPECT_EQ(mapping_error(j, hosts({{"a", 2}})),
            "app context 0: host 'zz' is not in the allocation");
  EXPECT_EQ(mapping_error(pm::job_spec{}, hosts({{"a", 2}})), "the job has no app context");
  EXPECT_EQ(mapping_error(job(1), pm::allocation{}), "the allocation has no hosts");
  EXPECT_THROW(pm::map_job(job(1), hosts({{"a", 2}})).at(1), pm::error);
  // A mistyped -np is refused before any map is built (it took gigabytes), with the bound.
  auto huge = job(100000000);
  huge.mapping.oversubscribe = true;
  EXPECT_EQ(mapping_error(huge, hosts({{"a", 2}})),
            "too many ranks: 100000000 (a job has at most 16777216)");
}

TEST(MapJob, JsonMapListsUserAndPortOnlyWhenSet) {
  auto a = hosts({{"a", 1}, {"b", 1}});
  a.hosts[1].user = "bob";
  a.hosts[1].port = 2222;
  const auto json = pm::job_map_json(pm::map_job(job(2), a), 7);
  // Keys in nlohmann's (sorted) order, only for the host that has them.
  EXPECT_NE(json.find("\"num_procs\": 1,\n      \"port\": 2222,\n      \"ranks\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"slots_known\": true,\n      \"user\": \"bob\"\n    }"), std::string::npos)
      << json;
  EXPECT_EQ(json.find("\"port\": 0"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"user\": \"\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\"port\""), json.rfind("\"port\"")) << json;
  // The Open MPI style map is unchanged (mpirun shows neither).
  EXPECT_EQ(pm::format_job_map(pm::map_job(job(2), a), 7),
            pm::format_job_map(pm::map_job(job(2), hosts({{"a", 1}, {"b", 1}})), 7));
}

// ---- after a lost host (docs/resilience.md) ----

TEST(MapJob, MoveNodeGivesTheSpareTheLostHostsRanksAndNumbers) {
  const auto map = pm::map_job(job(6), hosts({{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}}));
  ASSERT_EQ(layout(map), "aabbcc");
  const auto moved = pm::move_node(map, 1, 3);
  EXPECT_EQ(layout(moved), "aaddcc");
  for (std::uint32_t r = 0; r < 6; ++r) {
    EXPECT_EQ(moved.at(r).local_rank, map.at(r).local_rank);
    EXPECT_EQ(moved.at(r).node, map.at(r).node);
  }
  EXPECT_FALSE(moved.node_of_host(1));
  EXPECT_EQ(moved.node_of_host(3), 1u);
  EXPECT_EQ(moved.host_of_node(1), 3u);
  EXPECT_EQ(
      std::vector<std::uint32_t>(moved.ranks_on_host(3).begin(), moved.ranks_on_host(3).end()),
      (std::vector<std::uint32_t>{2, 3}));
  EXPECT_TRUE(moved.ranks_on_host(1).empty());
  EXPECT_THROW(pm::move_node(map, 0, 2), pm::error);  // c holds ranks
  EXPECT_THROW(pm::move_node(map, 5, 3), pm::error);
}

TEST(MapJob, MapJobOnMapsOntoSomeHostsAndKeepsTheirIndices) {
  const auto alloc = hosts({{"a", 2}, {"b", 2}, {"c", 2}});
  const std::vector<std::uint32_t> left{0, 2};
  const auto map = pm::map_job_on(job(4), alloc, left);
  EXPECT_EQ(layout(map), "aacc");
  EXPECT_EQ(map.allocation().hosts.size(), 3u);
  EXPECT_EQ(map.num_nodes(), 2u);
  EXPECT_EQ(map.at(2).node, 1u);
  EXPECT_EQ(map.at(2).local_rank, 0u);
  EXPECT_FALSE(map.node_of_host(1));
  EXPECT_EQ(map.total_slots(), 4u);
  // As map_job: too few slots there is an error naming the numbers.
  try {
    pm::map_job_on(job(6), alloc, left);
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_NE(std::string(e.what()).find("6 ranks requested, 4 slots available on 2 hosts"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
