// agent/pmix/handshake.hpp: pmd's relay hands the PMIx server a connection's first message only
// once it is whole and well-formed (libpmix 4.2.2 reads it with blocking receives on its progress
// thread). Messages built as libpmix's construct_message builds them.
#include "agent/pmix/handshake.hpp"

#include <arpa/inet.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/pmix_handshake_bytes.hpp"

namespace {

using pm::agent::pmix::check_handshake;
using pm::test::handshake;
using pm::test::message;
using verdict = pm::agent::pmix::handshake_check::verdict;

TEST(PmixHandshake, ARanksIsCompleteWithTheServersAnswerOfEightBytes) {
  const auto bytes = handshake(0).bytes();
  const auto c = check_handshake(bytes);
  ASSERT_EQ(c.result, verdict::complete) << c.why;
  EXPECT_EQ(c.size, bytes.size());
  EXPECT_FALSE(c.tool);
  EXPECT_EQ(c.reply_size, 8u);
}

TEST(PmixHandshake, AToolsAnswerIncludesTheNameItAskedFor) {
  auto c = check_handshake(handshake(3).bytes());  // needs a name
  ASSERT_EQ(c.result, verdict::complete) << c.why;
  EXPECT_TRUE(c.tool);
  EXPECT_EQ(c.reply_size, 4u + 260 + 260 + 4);
  c = check_handshake(handshake(4).bytes());  // named itself
  ASSERT_EQ(c.result, verdict::complete) << c.why;
  EXPECT_TRUE(c.tool);
  EXPECT_EQ(c.reply_size, 4u + 260 + 4);
}

TEST(PmixHandshake, EveryShorterPrefixWaitsForMore) {
  const auto bytes = handshake(3).bytes();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const auto c = check_handshake(std::span<const std::uint8_t>(bytes.data(), n));
    ASSERT_EQ(c.result, verdict::more) << n << ": " << c.why;
  }
  // What follows the message (the client's first request) is not part of it.
  auto more = bytes;
  more.insert(more.end(), 100, 7);
  const auto c = check_handshake(more);
  ASSERT_EQ(c.result, verdict::complete);
  EXPECT_EQ(c.size, bytes.size());
}

TEST(PmixHandshake, GarbageIsRefusedAsSoonAsItShows) {
  const std::string http = "GET / HTTP/1.0\r\n\r\n";
  auto c = check_handshake(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(http.data()), 1));
  EXPECT_EQ(c.result, verdict::invalid);
  // A header of the wrong kind, or announcing too much (PMIX_MAX_CRED_SIZE is 128 KiB) or nothing.
  EXPECT_EQ(check_handshake(handshake(0).bytes(7)).result, verdict::invalid);
  EXPECT_EQ(check_handshake(handshake(0).bytes(-1, 5)).result, verdict::invalid);
  message big;
  big.payload.resize(131073);
  auto header = big.bytes();
  header.resize(16);
  EXPECT_EQ(check_handshake(header).result, verdict::invalid);
  EXPECT_EQ(check_handshake(message{}.bytes()).result, verdict::invalid);
}

TEST(PmixHandshake, AMalformedPayloadIsRefused) {
  // An unknown process type.
  auto m = handshake(0);
  m.payload[6 + 1 + 4 + 8] = 42;
  EXPECT_EQ(check_handshake(m.bytes()).result, verdict::invalid);
  // A credential longer than the message.
  m = handshake(0);
  m.payload[6 + 1 + 3] = 200;
  EXPECT_EQ(check_handshake(m.bytes()).result, verdict::invalid);
  // Strings without their end.
  message cut;
  cut.payload = {'n', 'a', 't', 'i', 'v', 'e'};
  EXPECT_EQ(check_handshake(cut.bytes()).result, verdict::invalid);
  // A namespace that is not text.
  m = handshake(0);
  m.payload[6 + 1 + 4 + 8 + 1] = 0x01;
  EXPECT_EQ(check_handshake(m.bytes()).result, verdict::invalid);
}

TEST(PmixHandshake, MutatedMessagesAreJudgedWithinTheirBytes) {
  // Any bytes a client sends are read only within what it sent (ASan watches in its build): a
  // verdict for every mutation of a real message, a complete one never longer than the input.
  std::mt19937 rng(20);
  const std::vector<std::vector<std::uint8_t>> seeds = {handshake(0).bytes(), handshake(3).bytes(),
                                                        handshake(5).bytes()};
  for (int i = 0; i < 20000; ++i) {
    auto bytes = seeds[static_cast<std::size_t>(i) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<std::uint8_t>(rng());
          break;
        case 1:
          bytes.resize(at + 1);
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                       static_cast<std::uint8_t>(rng()));
          break;
      }
    }
    const auto c = check_handshake(bytes);
    if (c.result == verdict::complete) {
      EXPECT_LE(c.size, bytes.size());
      EXPECT_GT(c.reply_size, 0u);
    }
    if (c.result == verdict::invalid) {
      EXPECT_FALSE(c.why.empty());
    }
  }
}

}  // namespace
