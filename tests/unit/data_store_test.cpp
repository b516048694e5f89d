// The launcher's PMIx data store (control/data_store.hpp): publish, lookups that wait for keys
// (Open MPI's connect/accept), partial and missing lookups, duplicates, timeouts, lost hosts.
#include "control/data_store.hpp"

#include <gtest/gtest.h>

namespace {

using pm::control::data_store;
using pm::link::data_status;
using pm::link::pmix_lookup;
using pm::link::pmix_publish;
using pm::link::pmix_unpublish;
using pm::link::published_entry;

pmix_publish publish(std::uint64_t id, std::uint32_t rank, std::string key, std::string value) {
  return pmix_publish{id, rank, {published_entry{std::move(key), 0, std::move(value)}}};
}

TEST(DataStore, AWaitingLookupIsAnsweredByThePublishThatCompletesIt) {
  data_store s;
  // Host 1's rank 4 looks up two keys before either exists (the children's root, say).
  EXPECT_FALSE(s.lookup(1, pmix_lookup{7, 4, {"port:accept", "other"}, true, 0}));
  EXPECT_EQ(s.waiting(), 1u);
  auto first = s.publish(0, publish(3, 0, "port:accept", std::string("\0x", 2)));
  ASSERT_EQ(first.size(), 1u);  // only the publisher's own answer: one key is still missing
  EXPECT_EQ(first[0].host, 0u);
  EXPECT_EQ(first[0].reply.id, 3u);
  EXPECT_EQ(first[0].reply.status, data_status::ok);
  auto second = s.publish(2, publish(9, 5, "other", "v"));
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[1].host, 1u);
  EXPECT_EQ(second[1].reply.id, 7u);
  EXPECT_EQ(second[1].reply.status, data_status::ok);
  ASSERT_EQ(second[1].reply.values.size(), 2u);
  EXPECT_EQ(second[1].reply.values[0].key, "port:accept");  // in the order asked
  EXPECT_EQ(second[1].reply.values[0].rank, 0u);            // who published it
  EXPECT_EQ(second[1].reply.values[0].value, std::string("\0x", 2));
  EXPECT_EQ(second[1].reply.values[1].rank, 5u);
  EXPECT_EQ(s.waiting(), 0u);
}

TEST(DataStore, WithoutWaitMissingKeysAreNotFoundOrLeftOut) {
  data_store s;
  auto none = s.lookup(0, pmix_lookup{1, 0, {"a"}, false, 0});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->reply.status, data_status::not_found);
  s.publish(0, publish(2, 0, "b", "1"));
  auto some = s.lookup(0, pmix_lookup{3, 0, {"a", "b"}, false, 0});
  ASSERT_TRUE(some);
  EXPECT_EQ(some->reply.status, data_status::ok);
  ASSERT_EQ(some->reply.values.size(), 1u);
  EXPECT_EQ(some->reply.values[0].key, "b");
}

TEST(DataStore, ADuplicateKeyIsRefusedAndOnlyItsPublisherUnpublishes) {
  data_store s;
  EXPECT_EQ(s.publish(0, publish(1, 2, "k", "first"))[0].reply.status, data_status::ok);
  EXPECT_EQ(s.publish(0, publish(2, 3, "k", "second"))[0].reply.status, data_status::error);
  EXPECT_EQ(s.unpublish(0, pmix_unpublish{3, 3, {"k"}}).reply.status, data_status::not_found);
  EXPECT_EQ(s.unpublish(0, pmix_unpublish{4, 2, {"k"}}).reply.status, data_status::ok);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.publish(0, publish(5, 3, "k", "again"))[0].reply.status, data_status::ok);
}

TEST(DataStore, TimeoutsAndLostHostsEndWaitingLookups) {
  data_store s;
  EXPECT_FALSE(s.lookup(1, pmix_lookup{7, 4, {"x"}, true, 5}));
  EXPECT_FALSE(s.lookup(2, pmix_lookup{7, 6, {"x"}, true, 0}));
  auto t = s.expire(1, 7);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->reply.status, data_status::timeout);
  EXPECT_FALSE(s.expire(1, 7));  // once
  s.host_lost(2);
  EXPECT_EQ(s.waiting(), 0u);
  EXPECT_EQ(s.publish(0, publish(1, 0, "x", "")).size(), 1u);  // nobody left to answer
}

}  // namespace
