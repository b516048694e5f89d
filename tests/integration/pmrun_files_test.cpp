// The files a job writes (--output-filename, --report, --display-map-json) against another local
// user who plants links and directories where they will be written (issue 20, item 6): refused in
// one line before any rank starts, the link's target untouched; and the ordinary uses unchanged.
// The second user is made and removed per test (tests/support/other_user.hpp); the rules are in
// docs/output.md ("Where the files may be"), the walk in libpm/src/io/safe_path.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/playground.hpp"

namespace {

namespace fs = std::filesystem;
using pm::test::run_command;

std::vector<std::string> pmrun(std::vector<std::string> args) {
  args.insert(args.begin(), {pm::test::pmrun_path(), "--allow-run-as-root"});
  return args;
}

// /tmp/pmrun-files-XXXXXX (tests/support/playground.hpp), and where a rank that ran leaves its
// mark.
struct playground : pm::test::playground {
  playground() : pm::test::playground("pmrun-files") {}
  std::string marker() const { return root + "/ran"; }
};

using pm::test::as;
using pm::test::slurp;

// A rank that would leave a marker and print something, were it started.
std::vector<std::string> marking_rank(const playground& pg) {
  return {"/bin/sh", "-c", "touch '" + pg.marker() + "'; echo overwritten"};
}

// pmrun refused the job in one line holding `expected`, started nothing, touched no victim.
void expect_refused(const pm::test::command_result& r, const playground& pg,
                    const std::string& expected) {
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(pg.marker())) << "a rank started";
  EXPECT_EQ(slurp(pg.victim()), "precious\n");
}

TEST(PmrunFiles, APlantedLinkForARanksStdoutIsRefusedBeforeAnyRankStarts) {
  PM_OTHER_USER(bob);
  playground pg;
  // The reproduction: bob's DIR/1/rank.0/stdout -> root's file, in a /tmp-like directory.
  const std::string dir = pg.shared() + "/out";
  ASSERT_TRUE(as(bob, "mkdir -p " + dir + "/1/rank.0 && ln -s " + pg.victim() + " " + dir +
                          "/1/rank.0/stdout"));
  auto r = run_command([&] {
    auto argv = pmrun({"-np", "1", "--output-filename", dir});
    const auto rank = marking_rank(pg);
    argv.insert(argv.end(), rank.begin(), rank.end());
    return argv;
  }());
  expect_refused(r, pg,
                 "pmrun: --output-filename: refusing '" + dir + "': it is owned by " + bob.name());
  // Root's own directories, but a world-writable level in which bob put the link: refused at that
  // level (and the link would be refused too).
  const std::string mine = pg / "mine";
  fs::create_directories(mine + "/1/rank.0");
  ::chmod((mine + "/1/rank.0").c_str(), 0777);
  ASSERT_TRUE(as(bob, "ln -s " + pg.victim() + " " + mine + "/1/rank.0/stdout"));
  auto argv = pmrun({"-np", "2", "--output-filename", mine});
  const auto rank = marking_rank(pg);
  argv.insert(argv.end(), rank.begin(), rank.end());
  r = run_command(argv);
  expect_refused(r, pg,
                 "pmrun: --output-filename: refusing '" + mine +
                     "/1/rank.0': it is writable by "
                     "every user (mode 0777)");
  // The link alone, in root's closed directories (a leftover): refused, not followed.
  ::chmod((mine + "/1/rank.0").c_str(), 0755);
  r = run_command(argv);
  expect_refused(
      r, pg,
      "pmrun: --output-filename: refusing '" + mine + "/1/rank.0/stdout': it is a symbolic link");
}

TEST(PmrunFiles, AnotherUsersDirectoryInTheOutputPathIsRefused) {
  PM_OTHER_USER(bob);
  playground pg;
  // bob's directory as an ancestor: he could swap what the job makes inside it.
  ASSERT_EQ(::mkdir((pg / "bobs").c_str(), 0755), 0);
  ASSERT_TRUE(bob.give(pg / "bobs"));
  auto argv = pmrun({"-np", "1", "--output-filename", pg / "bobs/out"});
  const auto rank = marking_rank(pg);
  argv.insert(argv.end(), rank.begin(), rank.end());
  expect_refused(run_command(argv), pg,
                 "pmrun: --output-filename: refusing '" + pg / "bobs/out" + "': '" + pg / "bobs" +
                     "' is owned by " + bob.name());
  EXPECT_FALSE(fs::exists(pg / "bobs/out"));
}

TEST(PmrunFiles, AGroupOrOtherWritableOutputDirectoryIsRefused) {
  PM_OTHER_USER(bob);
  playground pg;
  // Writable by bob's group (root owns it): bob could replace DIR/1.
  ASSERT_EQ(::mkdir((pg / "team").c_str(), 0755), 0);
  ASSERT_EQ(::chown((pg / "team").c_str(), 0, bob.gid()), 0);
  ::chmod((pg / "team").c_str(), 0775);
  auto argv = pmrun({"-np", "1", "--output-filename", pg / "team"});
  const auto rank = marking_rank(pg);
  argv.insert(argv.end(), rank.begin(), rank.end());
  expect_refused(
      run_command(argv), pg,
      "pmrun: --output-filename: refusing '" + pg / "team" + "': it is writable by its group");
  // World-writable without the sticky bit.
  ::chmod((pg / "team").c_str(), 0777);
  expect_refused(run_command(argv), pg,
                 "pmrun: --output-filename: refusing '" + pg / "team" +
                     "': it is writable by every user (mode 0777)");
}

TEST(PmrunFiles, AReportOrMapToAPlantedLinkIsRefused) {
  PM_OTHER_USER(bob);
  playground pg;
  ASSERT_TRUE(as(bob, "ln -s " + pg.victim() + " " + pg.shared() + "/r.json && ln -s " +
                          pg.victim() + " " + pg.shared() + "/map.json"));
  auto argv = pmrun({"-np", "1", "--report", pg.shared() + "/r.json"});
  const auto rank = marking_rank(pg);
  argv.insert(argv.end(), rank.begin(), rank.end());
  expect_refused(run_command(argv), pg,
                 "pmrun: --report: refusing '" + pg.shared() + "/r.json': it is a symbolic link");
  argv = pmrun({"-np", "1", "--display-map-json", pg.shared() + "/map.json"});
  argv.insert(argv.end(), rank.begin(), rank.end());
  expect_refused(
      run_command(argv), pg,
      "pmrun: --display-map-json: refusing '" + pg.shared() + "/map.json': it is a symbolic link");
  // bob's regular file where the report would go: not ours to truncate.
  ASSERT_TRUE(as(bob, "echo bobs > " + pg.shared() + "/bob.json"));
  argv = pmrun({"-np", "1", "--report", pg.shared() + "/bob.json"});
  argv.insert(argv.end(), rank.begin(), rank.end());
  expect_refused(
      run_command(argv), pg,
      "pmrun: --report: refusing '" + pg.shared() + "/bob.json': it is owned by " + bob.name());
  EXPECT_EQ(slurp(pg.shared() + "/bob.json"), "bobs\n");
}

TEST(PmrunFiles, OrdinaryUseStillWorks) {
  playground pg;
  const auto job = [&](const std::string& cwd, std::vector<std::string> options,
                       const std::string& text) {
    std::string script = "cd '" + cwd + "' && '" + pm::test::pmrun_path() + "' --allow-run-as-root";
    for (const auto& o : options) script += " '" + o + "'";
    script += " /bin/sh -c 'echo " + text + "; echo " + text + "-err >&2'";
    return run_command({"/bin/sh", "-c", script});
  };
  // A fresh directory in a sticky /tmp-like one, and a report next to it.
  auto r = job(
      pg.root,
      {"-np", "2", "--output-filename", pg.shared() + "/out", "--report", pg.shared() + "/r.json"},
      "first");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(pg.shared() + "/out/1/rank.1/stdout"), "first\n");
  EXPECT_EQ(slurp(pg.shared() + "/out/1/rank.0/stderr"), "first-err\n");
  EXPECT_EQ(nlohmann::json::parse(slurp(pg.shared() + "/r.json"))["exit_code"], 0);
  // Again into the same (now existing, our own) directory and report: truncated, rewritten.
  std::ofstream(pg.shared() + "/out/1/rank.0/stdout") << "a much longer old text\n";
  r = job(
      pg.root,
      {"-np", "2", "--output-filename", pg.shared() + "/out", "--report", pg.shared() + "/r.json"},
      "again");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(pg.shared() + "/out/1/rank.0/stdout"), "again\n");
  EXPECT_EQ(nlohmann::json::parse(slurp(pg.shared() + "/r.json"))["exit_code"], 0);
  // Relative paths, from the working directory; nojobid; the map as JSON.
  r = job(pg.root,
          {"-np", "1", "--output-filename", "rel/out:nojobid", "--report", "r.json",
           "--display-map-json", "map.json"},
          "rel");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(pg / "rel/out/rank.0/stdout"), "rel\n");
  EXPECT_TRUE(nlohmann::json::parse(slurp(pg / "map.json")).is_object());
  EXPECT_EQ(nlohmann::json::parse(slurp(pg / "r.json"))["exit_code"], 0);
  struct stat st {};
  ASSERT_EQ(::stat((pg / "rel/out/rank.0").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 022, 0u);  // made closed to others, whatever the umask
}

}  // namespace
