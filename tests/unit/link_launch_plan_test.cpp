// The launch plan: flat and k-ary trees over the job's hosts (parents, child order, depths).
#include "link/launch_plan.hpp"

#include <gtest/gtest.h>

#include "pm/error.hpp"

namespace pm::link {
namespace {

launch_plan_options tree(std::uint32_t k) {
  return launch_plan_options{launch_shape::tree, k};
}

TEST(LaunchPlan, FlatHasTheLauncherStartEveryHost) {
  const auto p = plan_launch(5, launch_plan_options{launch_shape::flat, 2});
  ASSERT_EQ(p.hosts.size(), 5u);
  for (std::uint32_t h = 0; h < 5; ++h) {
    EXPECT_EQ(p.hosts[h], (launch_step{by_launcher, h, 1}));
  }
  EXPECT_EQ(p.depth(), 1u);
  EXPECT_EQ(p.children_of(by_launcher).size(), 5u);
}

TEST(LaunchPlan, BinaryTreeLevelByLevel) {
  // Launcher -> 0, 1; 0 -> 2, 3; 1 -> 4, 5; 2 -> 6, 7; 3 -> 8.
  const auto p = plan_launch(9, tree(2));
  const std::vector<launch_step> want{{by_launcher, 0, 1}, {by_launcher, 1, 1}, {0, 0, 2},
                                      {0, 1, 2},           {1, 0, 2},           {1, 1, 2},
                                      {2, 0, 3},           {2, 1, 3},           {3, 0, 3}};
  EXPECT_EQ(p.hosts, want);
  EXPECT_EQ(p.depth(), 3u);
  EXPECT_EQ(p.children_of(1), (std::vector<std::uint32_t>{4, 5}));
  EXPECT_TRUE(p.children_of(8).empty());
}

TEST(LaunchPlan, FanOutOneIsAChain) {
  const auto p = plan_launch(4, tree(1));
  for (std::uint32_t h = 0; h < 4; ++h) {
    EXPECT_EQ(p.hosts[h].depth, h + 1);
    EXPECT_EQ(p.hosts[h].parent, h == 0 ? by_launcher : h - 1);
  }
}

TEST(LaunchPlan, DepthGrowsAsTheLogOfTheHosts) {
  // Fan-out 32: 32 hosts at depth 1, 1,024 more at depth 2, 32,768 more at depth 3.
  EXPECT_EQ(plan_launch(32, tree(32)).depth(), 1u);
  EXPECT_EQ(plan_launch(33, tree(32)).depth(), 2u);
  EXPECT_EQ(plan_launch(32 + 1024, tree(32)).depth(), 2u);
  EXPECT_EQ(plan_launch(32 + 1024 + 1, tree(32)).depth(), 3u);
  EXPECT_EQ(plan_launch(100000, tree(32)).depth(), 4u);
  EXPECT_EQ(plan_launch(0, tree(32)).depth(), 0u);
}

TEST(LaunchPlan, EveryParentComesFirstAndHasAtMostKChildrenInOrder) {
  for (std::uint32_t k : {1u, 2u, 3u, 7u, 32u}) {
    const auto p = plan_launch(500, tree(k));
    std::vector<std::uint32_t> seen(501, 0);  // children per parent; the launcher last
    for (std::uint32_t h = 0; h < p.hosts.size(); ++h) {
      const auto& s = p.hosts[h];
      const auto slot = s.parent == by_launcher ? 500u : s.parent;
      if (s.parent != by_launcher) {
        ASSERT_LT(s.parent, h);
        EXPECT_EQ(s.depth, p.hosts[s.parent].depth + 1);
      } else {
        EXPECT_EQ(s.depth, 1u);
      }
      EXPECT_EQ(s.child, seen[slot]) << "k=" << k << " host " << h;
      ++seen[slot];
      EXPECT_LE(seen[slot], k);
      // The one-host form agrees with the whole plan.
      EXPECT_EQ(plan_step(h, tree(k)), s) << "k=" << k << " host " << h;
    }
  }
}

TEST(LaunchPlan, TreeWithoutFanOutIsAUsageError) {
  try {
    plan_launch(3, tree(0));
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), errc::usage);
    EXPECT_STREQ(e.what(), "a tree launch needs a fan-out of at least 1");
  }
}

}  // namespace
}  // namespace pm::link
