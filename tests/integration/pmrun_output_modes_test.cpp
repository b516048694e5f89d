// pmrun's output modes end to end: JSON lines, timestamps, tags, per-rank files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/command.hpp"

namespace {

std::vector<std::string> job(std::vector<std::string> flags, std::vector<std::string> steps) {
  std::vector<std::string> argv = {pm::test::pmrun_path(), "--allow-run-as-root"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(pm::test::payload_path());
  argv.insert(argv.end(), steps.begin(), steps.end());
  return argv;
}

TEST(PmrunOutputModes, JsonLines) {
  auto r = pm::test::run_command(
      job({"-np", "2", "--json-lines"}, {"echo", "hi", "echo-err", "oops", "partial", "end"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  int hi = 0, oops = 0, partial = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);  // every line is one JSON object
    ASSERT_TRUE(j.contains("rank") && j.contains("stream") && j.contains("time") &&
                j.contains("line"));
    if (j["line"] == "hi") ++hi;
    if (j["line"] == "oops") {
      EXPECT_EQ(j["stream"], "stderr");
      ++oops;
    }
    if (j["line"] == "end") {
      EXPECT_EQ(j["partial"], true);
      ++partial;
    }
  }
  EXPECT_EQ(hi, 2);
  EXPECT_EQ(oops, 2);
  EXPECT_EQ(partial, 2);
}

TEST(PmrunOutputModes, TimestampAndTag) {
  auto r = pm::test::run_command(
      job({"-np", "1", "--timestamp-output", "--tag-output"}, {"echo", "hi"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Open MPI 4.1's layout: ctime's date, then the tag.
  EXPECT_TRUE(std::regex_match(
      r.out, std::regex(R"(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\[1,0\]<stdout>:hi\n)")))
      << r.out;
}

TEST(PmrunOutputModes, PerRankFilesWithoutCopy) {
  char tmpl[] = "/tmp/pmrun-files-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto r = pm::test::run_command(
      job({"-np", "10", "--output-filename", dir + ":nocopy"}, {"echo", "out", "echo-err", "err"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // nocopy: nothing on the terminal
  std::ifstream out(dir + "/1/rank.07/stdout"), err(dir + "/1/rank.07/stderr");
  std::stringstream o, e;
  o << out.rdbuf();
  e << err.rdbuf();
  EXPECT_EQ(o.str(), "out\n");
  EXPECT_EQ(e.str(), "err\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
