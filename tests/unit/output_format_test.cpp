// Output formats: the exact text Open MPI 4.1 prints, and ours for JSON lines.
#include "io/output_format.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

namespace {

class Utc : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    had_ = tz != nullptr;
    if (had_) old_ = tz;
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
  void TearDown() override {
    if (had_) {
      ::setenv("TZ", old_.c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }
  bool had_ = false;
  std::string old_;
};

TEST_F(Utc, CtimeAsOpenMpiPrintsIt) {
  EXPECT_EQ(pm::io::format_ctime(1795365432), "Sun Nov 22 16:37:12 2026");
  EXPECT_EQ(pm::io::format_ctime(1793599504), "Mon Nov  2 06:05:04 2026");
}

TEST_F(Utc, CtimeCacheFormatsOncePerSecond) {
  pm::io::ctime_cache cache;
  EXPECT_EQ(cache.at(1795365432), "Sun Nov 22 16:37:12 2026");
  EXPECT_EQ(cache.at(1795365433), "Sun Nov 22 16:37:13 2026");
}

TEST(OutputFormat, Rfc3339UtcWithMicroseconds) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::seconds(1795365432)) +
                 std::chrono::microseconds(42);
  EXPECT_EQ(pm::io::format_rfc3339_utc(t), "2026-11-22T16:37:12.000042Z");
}

std::string prefix(bool tag, bool ts, std::uint32_t rank, pm::output_stream s,
                   pm::line_flags f = {}) {
  std::string out;
  pm::io::append_line_prefix(out, tag, ts, "Sun Nov 22 16:37:12 2026", rank, s, f);
  return out;
}

TEST(OutputFormat, TagsAsOpenMpi41) {
  EXPECT_EQ(prefix(true, false, 0, pm::output_stream::out), "[1,0]<stdout>:");
  EXPECT_EQ(prefix(true, false, 17, pm::output_stream::err), "[1,17]<stderr>:");
  EXPECT_EQ(prefix(false, true, 3, pm::output_stream::out), "Sun Nov 22 16:37:12 2026<stdout>:");
  EXPECT_EQ(prefix(true, true, 3, pm::output_stream::err),
            "Sun Nov 22 16:37:12 2026[1,3]<stderr>:");
}

TEST(OutputFormat, APieceThatContinuesIsMarkedWithAPlus) {
  EXPECT_EQ(prefix(true, false, 2, pm::output_stream::out, {false, true}), "[1,2]<stdout>+:");
  EXPECT_EQ(prefix(true, false, 2, pm::output_stream::out, {true, false}), "[1,2]<stdout>:");
}

TEST(OutputFormat, JsonLines) {
  std::string out;
  pm::io::append_json_line(out, 5, pm::output_stream::err, "2026-11-22T16:37:12.000042Z", "he",
                           "llo \"x\"\t", {});
  EXPECT_EQ(out,
            "{\"rank\":5,\"stream\":\"stderr\",\"time\":\"2026-11-22T16:37:12.000042Z\","
            "\"line\":\"hello \\\"x\\\"\\t\"}\n");
  out.clear();
  pm::io::append_json_line(out, 0, pm::output_stream::out, "T", "a", "", {true, false});
  EXPECT_EQ(out,
            "{\"rank\":0,\"stream\":\"stdout\",\"time\":\"T\",\"line\":\"a\",\"partial\":true}\n");
  out.clear();
  pm::io::append_json_line(out, 0, pm::output_stream::out, "T", "a", "", {false, true});
  EXPECT_EQ(
      out, "{\"rank\":0,\"stream\":\"stdout\",\"time\":\"T\",\"line\":\"a\",\"continued\":true}\n");
}

TEST(OutputFormat, JsonLinesReplaceInvalidUtf8AndStayParseable) {
  std::string out;
  pm::io::append_json_line(out, 1, pm::output_stream::out, "T", "caf\xc3\xa9 \xff\x01", "", {});
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["line"], "caf\xc3\xa9 \xef\xbf\xbd\x01");
  EXPECT_EQ(j["rank"], 1);
}

TEST(OutputFormat, RankDirectoryPaddedToTheDigitsOfTheJobSize) {
  EXPECT_EQ(pm::io::rank_width(1), 1u);
  EXPECT_EQ(pm::io::rank_width(9), 1u);
  EXPECT_EQ(pm::io::rank_width(10), 2u);  // mpirun -np 10: rank.00 .. rank.09
  EXPECT_EQ(pm::io::rank_width(100), 3u);
  EXPECT_EQ(pm::io::rank_directory("out", 3, 10), "out/1/rank.03");
  EXPECT_EQ(pm::io::rank_directory("out/", 7, 2), "out/1/rank.7");
  EXPECT_EQ(pm::io::rank_directory("/tmp/x", 42, 1000), "/tmp/x/1/rank.0042");
}

}  // namespace
