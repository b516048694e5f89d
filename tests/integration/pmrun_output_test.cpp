// Output integrity under load: 8 ranks x 64 MiB of lines written in 4096-byte chunks that do not
// end at line ends, through pmrun into a file: byte-exact and line-exact, plain and tagged.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "support/command.hpp"

namespace {

constexpr int ranks = 8;
// 64 MiB rounded up to whole 100-byte lines.
constexpr long long bytes_per_rank = (64LL * 1024 * 1024 + 99) / 100 * 100;

struct verdict {
  long long lines = 0;
  long long bad_lines = 0;
  long long bytes = 0;
  std::vector<long long> next_line = std::vector<long long>(ranks, 0);
};

// Checks every line "r<R> l<N> xxx..." (100 bytes with '\n'), after an optional "[1,R]<stdout>:".
verdict check(const std::string& path, bool tagged) {
  verdict v;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    ++v.lines;
    v.bytes += static_cast<long long>(line.size()) + 1;
    std::string body = line;
    int tag_rank = -1;
    if (tagged) {
      if (std::sscanf(line.c_str(), "[1,%d]<stdout>:", &tag_rank) != 1) {
        ++v.bad_lines;
        continue;
      }
      body = line.substr(line.find(':') + 1);
    }
    int rank = -1;
    long long n = -1;
    if (body.size() != 99 || std::sscanf(body.c_str(), "r%d l%lld ", &rank, &n) != 2 || rank < 0 ||
        rank >= ranks || (tagged && tag_rank != rank) || body.back() != 'x' ||
        n != v.next_line[static_cast<std::size_t>(rank)]) {
      ++v.bad_lines;
      continue;
    }
    ++v.next_line[static_cast<std::size_t>(rank)];
  }
  return v;
}

void run_flood(bool tagged) {
  char tmpl[] = "/tmp/pmrun-flood-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string out = dir + "/out";
  const std::string cmd = pm::test::pmrun_path() + " --allow-run-as-root -np 8 " +
                          (tagged ? "--tag-output " : "") + pm::test::payload_path() + " flood " +
                          std::to_string(bytes_per_rank) + " 4096 > " + out;
  auto r = pm::test::run_command({"/bin/sh", "-c", cmd}, std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto v = check(out, tagged);
  std::remove(out.c_str());
  std::remove(dir.c_str());
  EXPECT_EQ(v.bad_lines, 0);
  EXPECT_EQ(v.lines, ranks * bytes_per_rank / 100);
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(v.next_line[static_cast<std::size_t>(rank)], bytes_per_rank / 100) << "rank " << rank;
  }
  if (!tagged) {
    EXPECT_EQ(v.bytes, ranks * bytes_per_rank);
  }
}

TEST(PmrunOutput, PlainFloodIsExact) {
  run_flood(false);
}
TEST(PmrunOutput, TaggedFloodIsExact) {
  run_flood(true);
}

TEST(PmrunOutput, PartialLastLinesAreKept) {
  auto r = pm::test::run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "1",
                                  pm::test::payload_path(), "partial", "no newline"});
  EXPECT_EQ(r.out, "no newline");  // one rank: byte-exact
  auto t = pm::test::run_command({pm::test::pmrun_path(), "--allow-run-as-root", "-np", "2",
                                  "--tag-output", pm::test::payload_path(), "partial", "tail"});
  EXPECT_NE(t.out.find("[1,0]<stdout>:tail\n"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[1,1]<stdout>:tail\n"), std::string::npos) << t.out;
}

}  // namespace
