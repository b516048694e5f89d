// The launcher's gathering of PMIx fences that span hosts (control/fence_table.hpp): node order,
// subsets, early contributions for the next fence, barriers, lost hosts and contributions that
// cannot be right.
#include "control/fence_table.hpp"

#include <gtest/gtest.h>

#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "pm/job.hpp"
#include "pm/rank_map.hpp"

namespace {

using pm::control::fence_table;
using pm::link::fence_contribution;
using pm::link::fence_members;

// 3 hosts x 2 slots, 6 ranks by slot: ranks 0,1 on h0; 2,3 on h1; 4,5 on h2.
pm::rank_map three_hosts() {
  pm::allocation a;
  for (const char* n : {"h0", "h1", "h2"}) {
    pm::host h;
    h.name = n;
    h.slots = 2;
    a.hosts.push_back(h);
  }
  pm::job_spec spec;
  spec.apps.push_back(pm::app_context{{"prog"}, 6, {}, ""});
  return pm::map_job(spec, a);
}

fence_contribution part(fence_members m, std::uint64_t seq, std::string data, bool collect = true) {
  return fence_contribution{std::move(m), seq, collect, std::move(data)};
}

TEST(FenceTable, AllRanksCompletesWithEveryHostInNodeOrder) {
  const auto map = three_hosts();
  fence_table t(map);
  EXPECT_FALSE(t.contribute(2, part({}, 0, "C")));
  EXPECT_FALSE(t.contribute(0, part({}, 0, "A")));
  const auto done = t.contribute(1, part({}, 0, "B"));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->hosts, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_TRUE(done->result.ok);
  EXPECT_EQ(done->result.data, "ABC");  // node order, not arrival order
  EXPECT_EQ(done->result.seq, 0u);
  EXPECT_EQ(t.pending(), 0u);
}

TEST(FenceTable, AContributionForTheNextFenceMayComeFirst) {
  const auto map = three_hosts();
  fence_table t(map);
  EXPECT_FALSE(t.contribute(0, part({}, 0, "a0")));
  EXPECT_FALSE(t.contribute(0, part({}, 1, "a1")));  // host 0 is ahead
  EXPECT_FALSE(t.contribute(1, part({}, 0, "b0")));
  EXPECT_FALSE(t.contribute(1, part({}, 1, "b1")));
  const auto second = t.contribute(2, part({}, 1, "c1"));  // the later fence completes first
  ASSERT_TRUE(second);
  EXPECT_EQ(second->result.seq, 1u);
  EXPECT_EQ(second->result.data, "a1b1c1");
  EXPECT_EQ(t.pending(), 1u);
  const auto first = t.contribute(2, part({}, 0, "c0"));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->result.seq, 0u);
  EXPECT_EQ(first->result.data, "a0b0c0");
  EXPECT_EQ(t.pending(), 0u);
}

TEST(FenceTable, SecondFenceWithSameMembersCompletesSeparately) {
  const auto map = three_hosts();
  fence_table t(map);
  for (std::uint32_t h : {0u, 1u}) EXPECT_FALSE(t.contribute(h, part({}, 1, "x")));
  for (std::uint32_t h : {0u, 1u}) EXPECT_FALSE(t.contribute(h, part({}, 0, "y")));
  EXPECT_TRUE(t.contribute(2, part({}, 1, "x")));
  EXPECT_TRUE(t.contribute(2, part({}, 0, "y")));
}

TEST(FenceTable, ASubsetWaitsOnlyForItsHosts) {
  const auto map = three_hosts();
  fence_table t(map);
  const fence_members sub{false, {1, 4}};  // h0 and h2
  EXPECT_FALSE(t.contribute(2, part(sub, 0, "z")));
  const auto done = t.contribute(0, part(sub, 0, "y"));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->hosts, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(done->result.data, "yz");
  EXPECT_EQ(done->result.members, sub);
}

TEST(FenceTable, BarriersCarryNoDataButStillCount) {
  const auto map = three_hosts();
  fence_table t(map);
  EXPECT_FALSE(t.contribute(0, part({}, 0, "", false)));
  EXPECT_FALSE(t.contribute(1, part({}, 0, "", false)));
  const auto done = t.contribute(2, part({}, 0, "", false));
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->result.data.empty());
  // Without collect, data sent anyway is not handed back.
  fence_table u(map);
  u.contribute(0, part({}, 0, "junk", false));
  u.contribute(1, part({}, 0, "", false));
  EXPECT_TRUE(u.contribute(2, part({}, 0, "", false))->result.data.empty());
}

TEST(FenceTable, ContributionsThatCannotBeRightAreErrors) {
  const auto map = three_hosts();
  fence_table t(map);
  t.contribute(0, part({}, 0, "a"));
  EXPECT_THROW(t.contribute(0, part({}, 0, "a")), pm::error);                           // twice
  EXPECT_THROW(t.contribute(1, part(fence_members{false, {0, 1}}, 0, "")), pm::error);  // no rank
  EXPECT_THROW(t.contribute(0, part(fence_members{false, {0, 99}}, 0, "")), pm::error);
}

TEST(FenceTable, ALostHostFailsItsFencesForThoseThatContributed) {
  const auto map = three_hosts();
  fence_table t(map);
  t.contribute(0, part({}, 0, "a"));
  t.contribute(2, part(fence_members{false, {0, 4}}, 0, "c"));  // h0 and h2: not waiting for h1
  const auto failed = t.host_lost(1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_FALSE(failed[0].result.ok);
  EXPECT_EQ(failed[0].hosts, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(t.pending(), 1u);
}

// A job that goes on after a loss (--no-abort-on-failure): a fence that needs the lost host
// fails at each contribution instead of waiting for ever; one that does not need it completes.
TEST(FenceTable, AFenceStartedAfterALossThatNeedsTheLostHostFailsAtOnce) {
  const auto map = three_hosts();
  fence_table t(map);
  EXPECT_TRUE(t.host_lost(1).empty());
  const auto first = t.contribute(0, part({}, 0, "a"));
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->result.ok);
  EXPECT_EQ(first->hosts, (std::vector<std::uint32_t>{0}));
  const auto second = t.contribute(2, part({}, 0, "c"));
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->result.ok);
  EXPECT_EQ(second->hosts, (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(t.pending(), 0u);
  EXPECT_FALSE(t.contribute(0, part(fence_members{false, {0, 4}}, 0, "x")));
  const auto done = t.contribute(2, part(fence_members{false, {0, 4}}, 0, "y"));
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->result.ok);
  EXPECT_EQ(done->result.data, "xy");
}

}  // namespace

namespace {

// A spawned job's processes 6 and 7 on h2 and a 4th host (index 3) the first job does not use.
TEST(FenceTable, SpawnedProcessesJoinFencesAndHostsOutsideTheFirstJobAnswerLast) {
  const auto map = three_hosts();
  fence_table t(map, [](std::uint32_t p) -> std::optional<std::uint32_t> {
    if (p == 6) return 3u;
    if (p == 7) return 2u;
    return std::nullopt;
  });
  const fence_members both{false, {0, 6, 7}};  // h0, then h2, then host 3 (after the nodes)
  EXPECT_FALSE(t.contribute(3, part(both, 0, "D")));
  EXPECT_FALSE(t.contribute(2, part(both, 0, "C")));
  const auto o = t.contribute(0, part(both, 0, "A"));
  ASSERT_TRUE(o);
  EXPECT_EQ(o->hosts, (std::vector<std::uint32_t>{0, 2, 3}));
  EXPECT_EQ(o->result.data, "ACD");
  // A process no job has is a contribution that cannot be right.
  EXPECT_THROW(t.contribute(0, part(fence_members{false, {0, 8}}, 0, "")), pm::error);
}

}  // namespace
