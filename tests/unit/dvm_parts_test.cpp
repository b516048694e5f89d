// The DVM's pure parts (docs/dvm.md): the slot ledger and the JSON-line framing of its channels.
#include <gtest/gtest.h>

#include <map>

#include "dvm/json_lines.hpp"
#include "dvm/slot_ledger.hpp"

namespace {

using pm::dvm_parts::line_buffer;
using pm::dvm_parts::slot_ledger;

pm::allocation three_hosts() {
  pm::allocation a;
  for (const auto* name : {"node1", "node2", "node3"}) {
    pm::host h;
    h.name = name;
    h.slots = 2;
    h.local = std::string(name) == "node1";
    a.hosts.push_back(h);
  }
  return a;
}

TEST(DvmSlotLedger, ClaimsAreAllOrNothingAndComeBackWhenReleased) {
  slot_ledger l(three_hosts());
  EXPECT_EQ(l.free_slots(), 6u);
  // Every host is reached the same way on a DVM: none is "this machine".
  for (const auto& h : l.free().hosts) EXPECT_FALSE(h.local);
  EXPECT_EQ(l.claim(1, {{"node1", 2}, {"node2", 1}}), std::nullopt);
  EXPECT_EQ(l.free_slots(), 3u);
  EXPECT_EQ(l.used("node2"), 1u);
  // node1 is full: it is not offered at all, so the mapper cannot place on it.
  const auto free = l.free();
  ASSERT_EQ(free.hosts.size(), 2u);
  EXPECT_EQ(free.hosts[0].name, "node2");
  EXPECT_EQ(free.hosts[0].slots, 1u);
  // Too much on one host: nothing of the claim is taken.
  EXPECT_EQ(*l.claim(2, {{"node3", 2}, {"node2", 2}}), "host node2 has 1 free slots, not 2");
  EXPECT_EQ(l.free_slots(), 3u);
  EXPECT_TRUE(l.held(2).empty());
  EXPECT_EQ(*l.claim(2, {{"node9", 1}}), "'node9' is no host of this DVM");
  l.release(1);
  EXPECT_EQ(l.free_slots(), 6u);
  EXPECT_TRUE(l.held(1).empty());
}

// A job that oversubscribes (and its spawns) takes what is free of each count and shares the
// rest; a second claim of the same job adds to what it holds.
TEST(DvmSlotLedger, ASharingClaimTakesWhatIsFreeAndAddsUp) {
  slot_ledger l(three_hosts());
  EXPECT_EQ(l.claim(1, {{"node1", 1}}), std::nullopt);
  EXPECT_EQ(l.claim(2, {{"node1", 3}, {"node2", 1}}, true), std::nullopt);
  EXPECT_EQ(l.held(2), (std::map<std::string, std::uint32_t>{{"node1", 1}, {"node2", 1}}));
  EXPECT_EQ(l.claim(2, {{"node1", 1}, {"node3", 2}}, true), std::nullopt);  // node1 is full
  EXPECT_EQ(l.held(2),
            (std::map<std::string, std::uint32_t>{{"node1", 1}, {"node2", 1}, {"node3", 2}}));
  EXPECT_EQ(*l.claim(1, {{"node2", 2}}), "host node2 has 1 free slots, not 2");
  EXPECT_TRUE(l.lose("node2"));
  EXPECT_EQ(*l.claim(1, {{"node2", 1}}, true), "host node2 was lost");
  EXPECT_EQ(l.held(1), (std::map<std::string, std::uint32_t>{{"node1", 1}}));
}

TEST(DvmSlotLedger, ALostHostIsNeverFreeAgain) {
  slot_ledger l(three_hosts());
  EXPECT_EQ(l.claim(1, {{"node2", 2}}), std::nullopt);
  EXPECT_TRUE(l.lose("node2"));
  EXPECT_FALSE(l.lose("node7"));
  EXPECT_TRUE(l.lost("node2"));
  l.release(1);
  EXPECT_EQ(l.free_slots(), 4u);
  EXPECT_EQ(l.whole().hosts.size(), 2u);
  EXPECT_EQ(*l.claim(2, {{"node2", 1}}), "host node2 was lost");
}

TEST(DvmJsonLines, LinesAreSplitAcrossReadsAndBounded) {
  line_buffer b;
  std::vector<std::string> lines;
  EXPECT_TRUE(b.append("{\"op\":\"pi", lines));
  EXPECT_TRUE(lines.empty());
  EXPECT_TRUE(b.append("ng\"}\n{\"op\":\"ps\"}\n{", lines));
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"op\":\"ping\"}", "{\"op\":\"ps\"}"}));
  // A line that never ends is cut off at the bound.
  line_buffer big;
  lines.clear();
  const std::string chunk(64 * 1024, 'x');
  bool ok = true;
  for (std::size_t sent = 0; ok && sent <= pm::dvm_parts::line_limit; sent += chunk.size()) {
    ok = big.append(chunk, lines);
  }
  EXPECT_FALSE(ok);
  EXPECT_TRUE(lines.empty());
}

TEST(DvmJsonLines, OnlyObjectsOfTheRightShapeAreRead) {
  std::string problem;
  EXPECT_FALSE(pm::dvm_parts::parse_object("[1,2]", problem));
  EXPECT_EQ(problem, "a line that is not a JSON object");
  EXPECT_FALSE(pm::dvm_parts::parse_object("{\"op\":", problem));
  EXPECT_FALSE(pm::dvm_parts::parse_object("\xff\xfe", problem));
  const auto doc = pm::dvm_parts::parse_object(
      R"({"op":"start","port":7,"args":["--connect"],"bad":[1],"neg":-1,"share":true})", problem);
  ASSERT_TRUE(doc);
  EXPECT_EQ(pm::dvm_parts::string_at(*doc, "op"), "start");
  EXPECT_EQ(pm::dvm_parts::string_at(*doc, "port"), std::nullopt);
  EXPECT_EQ(pm::dvm_parts::number_at(*doc, "port"), 7u);
  EXPECT_EQ(pm::dvm_parts::number_at(*doc, "neg"), std::nullopt);
  EXPECT_EQ(pm::dvm_parts::strings_at(*doc, "args"), (std::vector<std::string>{"--connect"}));
  EXPECT_EQ(pm::dvm_parts::strings_at(*doc, "bad"), std::nullopt);
  // A wrong type is nullopt, not nlohmann's throw (which ended the DVM's server).
  EXPECT_EQ(pm::dvm_parts::bool_at(*doc, "share"), true);
  EXPECT_EQ(pm::dvm_parts::bool_at(*doc, "port"), std::nullopt);
  EXPECT_EQ(pm::dvm_parts::bool_at(*doc, "none"), std::nullopt);
  // What goes out is one line, whatever bytes a value holds.
  const auto line = pm::dvm_parts::to_line({{"name", "a\nb\xff"}});
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  EXPECT_EQ(line.back(), '\n');
}

}  // namespace
