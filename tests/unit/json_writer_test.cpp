// json_writer writes what nlohmann::json's dump writes, byte for byte: the same documents built
// both ways (fixed cases and generated ones) must give equal text, compact and indented.
#include "text/json_writer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace {

using ordered = nlohmann::ordered_json;

// Builds the same random document into a json_writer and an ordered_json (keys keep their
// insertion order there, as in the writer).
struct twin {
  std::mt19937_64 rng;
  bool any_magnitude = false;
  explicit twin(std::uint64_t seed) : rng(seed) {}

  std::uint64_t below(std::uint64_t n) { return rng() % n; }

  std::string random_string() {
    static const std::string pieces[] = {"a",  "rank", " ",      "\"",   "\\",     "\n",
                                         "\t", "\x01", "\x1f",   "\x7f", "é",      "日本",
                                         "😀",  "/",    "\b\f\r", "",     "node12", "a b"};
    std::string s;
    const auto n = below(5);
    for (std::uint64_t i = 0; i < n; ++i) s += pieces[below(std::size(pieces))];
    return s;
  }

  void scalar(pm::json_writer& w, ordered& j) {
    switch (below(7)) {
      case 0:
        w.null();
        j = nullptr;
        break;
      case 1: {
        const bool b = below(2) == 1;
        w.value(b);
        j = b;
        break;
      }
      case 2: {
        const auto n = static_cast<std::int64_t>(rng());
        w.value(n);
        j = n;
        break;
      }
      case 3: {
        const auto n = static_cast<std::uint32_t>(rng());
        w.value(n);
        j = n;
        break;
      }
      case 4: {
        // Durations in ms from whole nanoseconds, as the report has them.
        const auto ns = static_cast<std::int64_t>(below(std::uint64_t{1} << 40));
        const double d =
            std::chrono::duration<double, std::milli>(std::chrono::nanoseconds(ns)).count();
        w.value(d);
        j = d;
        break;
      }
      case 5: {
        // Any magnitude: nlohmann's Grisu2 is not always the shortest form, so only these
        // documents are compared by value (see below).
        const double d = static_cast<double>(static_cast<std::int64_t>(below(2000)) - 1000) *
                         std::pow(10.0, static_cast<double>(static_cast<int>(below(50)) - 25));
        w.value(d);
        j = d;
        any_magnitude = true;
        break;
      }
      default: {
        const auto s = random_string();
        w.value(s);
        j = s;
      }
    }
  }

  void doc(pm::json_writer& w, ordered& j, int depth) {
    const auto kind = depth > 3 ? 2 : below(3);
    if (kind == 0) {
      w.begin_object();
      j = ordered::object();
      const auto n = below(4);
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto k = "k" + std::to_string(i) + random_string();
        w.key(k);
        ordered child;
        doc(w, child, depth + 1);
        j[k] = std::move(child);
      }
      w.end_object();
    } else if (kind == 1) {
      w.begin_array();
      j = ordered::array();
      const auto n = below(4);
      for (std::uint64_t i = 0; i < n; ++i) {
        ordered child;
        doc(w, child, depth + 1);
        j.push_back(std::move(child));
      }
      w.end_array();
    } else {
      scalar(w, j);
    }
  }
};

TEST(JsonWriter, FixedDocumentsMatchNlohmann) {
  pm::json_writer w(2);
  w.begin_object();
  w.member("exit_code", 7).member("cause", "rank_failed").key("signal").null();
  w.key("empty_array").begin_array().end_array();
  w.key("empty_object").begin_object().end_object();
  w.key("ranks").begin_array().value(1).value(2.5).value(true).end_array();
  w.end_object();
  ordered j;
  j["exit_code"] = 7;
  j["cause"] = "rank_failed";
  j["signal"] = nullptr;
  j["empty_array"] = ordered::array();
  j["empty_object"] = ordered::object();
  j["ranks"] = {1, 2.5, true};
  EXPECT_EQ(w.take(), j.dump(2));
}

TEST(JsonWriter, NumbersAsNlohmannWritesThem) {
  for (const double d : {0.0, -0.0, 1.0, -1.0, 0.5, 123.456, 1e15, 1e16, 1.5e16, 1e-4, 1e-5, 0.1234,
                         12345678.9, 1e300, -2.5e-300, 3.0000001, 1234.567891}) {
    pm::json_writer w;
    w.value(d);
    EXPECT_EQ(w.take(), ordered(d).dump()) << d;
  }
  pm::json_writer w;
  w.begin_array().value(std::numeric_limits<double>::infinity()).value(std::nan("")).end_array();
  EXPECT_EQ(w.take(), "[null,null]");
  pm::json_writer big;
  big.begin_array()
      .value(std::numeric_limits<std::uint64_t>::max())
      .value(std::numeric_limits<std::int64_t>::min())
      .end_array();
  EXPECT_EQ(big.take(), "[18446744073709551615,-9223372036854775808]");
}

TEST(JsonWriter, InvalidUtf8BecomesTheReplacementCharacter) {
  pm::json_writer w;
  w.value(
      std::string("a\xff"
                  "b\xc3"
                  "\xe2\x82"
                  "ok\xed\xa0\x80"));
  // As nlohmann's error_handler_t::replace does it.
  EXPECT_EQ(w.take(), ordered(std::string("a\xff"
                                          "b\xc3"
                                          "\xe2\x82"
                                          "ok\xed\xa0\x80"))
                          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

TEST(JsonWriter, GeneratedDocumentsMatchNlohmann) {
  int byte_exact = 0;
  for (std::uint64_t seed = 1; seed <= 2000; ++seed) {
    twin t(seed);
    pm::json_writer compact;
    ordered j;
    t.doc(compact, j, 0);
    const auto text = compact.take();
    // Always the same document; byte for byte whenever no double of arbitrary magnitude is in it
    // (those may print with fewer digits than Grisu2's: 9.52e+22, not 9.520000000000001e+22).
    ASSERT_EQ(ordered::parse(text), j) << "seed " << seed << ": " << text;
    if (t.any_magnitude) continue;
    ++byte_exact;
    ASSERT_EQ(text, j.dump()) << "seed " << seed;
    twin again(seed);
    pm::json_writer indented(2);
    ordered k;
    again.doc(indented, k, 0);
    ASSERT_EQ(indented.take(), k.dump(2)) << "seed " << seed;
  }
  EXPECT_GT(byte_exact, 500);
}

}  // namespace
