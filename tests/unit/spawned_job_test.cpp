// Where a PMIx_Spawn's ranks go (driver/spawned_job.hpp): the allocation's free slots, the
// launch's policy, PMIX_HOST, and one line when they do not fit.
#include "launch/spawned_job.hpp"

#include <gtest/gtest.h>

#include "pm/error.hpp"

namespace {

pm::allocation three_hosts(std::uint32_t slots) {
  pm::allocation a;
  a.source = pm::allocation_source::hostfile;
  for (const char* n : {"a", "b", "c"}) {
    pm::host h;
    h.name = n;
    h.slots = slots;
    a.hosts.push_back(h);
  }
  return a;
}

pm::link::pmix_spawn request(std::uint32_t np, std::vector<std::string> hosts = {}) {
  pm::link::pmix_spawn q;
  q.apps.push_back(
      pm::link::spawn_app_spec{{"./child"}, {"OMPI_PARENT_PORT=x"}, "/w", np, std::move(hosts)});
  return q;
}

TEST(MapSpawn, TheChildrenTakeTheSlotsTheLiveProcessesLeave) {
  // a: 2 slots, 2 live; b: 1 live; c: none live.
  const auto j = pm::launch::map_spawn(request(3), three_hosts(2), {2, 1, 0}, {}, {});
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j.host_of(0), 1u);
  EXPECT_EQ(j.host_of(1), 2u);
  EXPECT_EQ(j.host_of(2), 2u);
  ASSERT_EQ(j.apps.size(), 1u);
  EXPECT_EQ(j.apps[0].env, (std::vector<std::string>{"OMPI_PARENT_PORT=x"}));
  EXPECT_EQ(j.apps[0].wdir, "/w");
  EXPECT_EQ(j.node_on(1), 0u);
  EXPECT_EQ(j.node_on(2), 1u);
  EXPECT_FALSE(j.node_on(0));
}

TEST(MapSpawn, LostHostsAndHostsAtTheirMaxSlotsTakeNoneEvenOversubscribed) {
  auto alloc = three_hosts(1);
  alloc.hosts[2].max_slots = 1;  // c: its one process is all it may run
  pm::mapping_policy over;
  over.oversubscribe = true;
  // a is lost: everything goes to b, oversubscribed, none to a or c.
  const auto j = pm::launch::map_spawn(request(3), alloc, {0, 1, 1}, {false, true, true}, over);
  for (std::uint32_t r = 0; r < 3; ++r) EXPECT_EQ(j.host_of(r), 1u);
  try {
    pm::launch::map_spawn(request(1, {"a"}), alloc, {0, 1, 1}, {false, true, true}, over);
    FAIL() << "a was lost";
  } catch (const pm::error& e) {
    EXPECT_NE(std::string(e.what()).find("host 'a' has no room"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pm::launch::map_spawn(request(1u << 21), alloc, {0, 0, 0}, {}, over), pm::error);
}

TEST(MapSpawn, PmixHostLimitsTheHostsAndTooManyRanksAreOneLine) {
  const auto j = pm::launch::map_spawn(request(1, {"c"}), three_hosts(2), {1, 1, 1}, {}, {});
  EXPECT_EQ(j.host_of(0), 2u);
  try {
    pm::launch::map_spawn(request(4), three_hosts(2), {1, 1, 1}, {}, {});
    FAIL() << "4 ranks on 3 free slots";
  } catch (const pm::error& e) {
    EXPECT_EQ(std::string(e.what()),
              "not enough slots: 4 ranks requested, 3 slots available on 3 hosts (add "
              "--oversubscribe to place more ranks than slots)");
  }
  pm::mapping_policy over;
  over.oversubscribe = true;
  EXPECT_EQ(pm::launch::map_spawn(request(4), three_hosts(2), {1, 1, 1}, {}, over).size(), 4u);
}

}  // namespace
