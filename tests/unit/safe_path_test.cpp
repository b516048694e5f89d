// io/safe_path: the walk every file a job writes goes through (docs/output.md, "Where the files
// may be"), with real directories, links and a second local user (tests/support/other_user.hpp)
// who plants what an attacker would: links to a file of root's, directories of their own, FIFOs.
#include "io/safe_path.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/command.hpp"
#include "support/other_user.hpp"
#include "support/playground.hpp"

namespace {

namespace fs = std::filesystem;
using pm::io::path_problem;
using pm::io::safe_dir;

// /tmp/pm-safe-path-XXXXXX (tests/support/playground.hpp).
struct playground : pm::test::playground {
  playground() : pm::test::playground("pm-safe-path") {}
};

using pm::test::as;
using pm::test::slurp;

bool write_all(int fd, std::string_view text) {
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

TEST(SafePath, AFreshDirectoryIsCreatedAndItsFilesWritten) {
  playground pg;
  path_problem p;
  const safe_dir dir = pm::io::open_directory(pg / "a/b", true, p);
  ASSERT_TRUE(dir) << p.message();
  EXPECT_TRUE(dir.created());
  const safe_dir rank = pm::io::open_below(dir, "1/rank.0", true, p);
  ASSERT_TRUE(rank) << p.message();
  EXPECT_EQ(rank.path(), pg / "a/b/1/rank.0");
  const int fd = pm::io::open_file_in(rank, "stdout", 0644, p);
  ASSERT_GE(fd, 0) << p.message();
  EXPECT_TRUE(write_all(fd, "hello\n"));
  EXPECT_EQ(slurp(pg / "a/b/1/rank.0/stdout"), "hello\n");
  struct stat st {};
  ASSERT_EQ(::stat((pg / "a/b/1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 022, 0u);  // 0755 at most (less the umask), whatever the umask
}

TEST(SafePath, AnExistingOwnDirectoryAndFileAreReusedAndTruncated) {
  playground pg;
  ASSERT_EQ(::mkdir((pg / "out").c_str(), 0700), 0);
  std::ofstream(pg / "out/stdout") << "an old and longer text\n";
  path_problem p;
  const safe_dir dir = pm::io::open_directory(pg / "out", true, p);
  ASSERT_TRUE(dir) << p.message();
  EXPECT_FALSE(dir.created());
  const int fd = pm::io::open_file_in(dir, "stdout", 0644, p);
  ASSERT_GE(fd, 0) << p.message();
  EXPECT_TRUE(write_all(fd, "new\n"));
  EXPECT_EQ(slurp(pg / "out/stdout"), "new\n");
  // A whole path the same way (--report FILE).
  const int again = pm::io::open_file(pg / "out/stdout", 0666, p);
  ASSERT_GE(again, 0) << p.message();
  EXPECT_TRUE(write_all(again, "x"));
  EXPECT_EQ(slurp(pg / "out/stdout"), "x");
}

TEST(SafePath, RelativePathsAreWalkedFromTheWorkingDirectory) {
  playground pg;
  const auto before = fs::current_path();
  fs::current_path(pg.root);
  path_problem p;
  const safe_dir dir = pm::io::open_directory("rel/x", true, p);
  const int fd = pm::io::open_file("r.json", 0666, p);
  const int dotted = pm::io::open_file("./rel/../r2.json", 0666, p);
  fs::current_path(before);
  ASSERT_TRUE(dir) << p.message();
  EXPECT_EQ(dir.path(), fs::canonical(pg.root).string() + "/rel/x");
  ASSERT_GE(fd, 0) << p.message();
  EXPECT_TRUE(write_all(fd, "{}"));
  EXPECT_EQ(slurp(pg / "r.json"), "{}");
  ASSERT_GE(dotted, 0) << p.message();
  EXPECT_TRUE(write_all(dotted, "{}"));
  EXPECT_EQ(slurp(pg / "r2.json"), "{}");
}

TEST(SafePath, ALinkAsTheFileIsRefusedAndItsTargetUntouched) {
  playground pg;
  ASSERT_EQ(::mkdir((pg / "out").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(pg.victim().c_str(), (pg / "out/stdout").c_str()), 0);
  ASSERT_EQ(::symlink((pg / "nowhere").c_str(), (pg / "out/stderr").c_str()), 0);  // dangling
  path_problem p;
  const safe_dir dir = pm::io::open_directory(pg / "out", false, p);
  ASSERT_TRUE(dir) << p.message();
  EXPECT_EQ(pm::io::open_file_in(dir, "stdout", 0644, p), -1);
  EXPECT_EQ(p.message(), "refusing '" + pg / "out/stdout" + "': it is a symbolic link");
  EXPECT_EQ(pm::io::open_file_in(dir, "stderr", 0644, p), -1);
  EXPECT_EQ(p.why, "is a symbolic link");
  EXPECT_FALSE(fs::exists(pg / "nowhere"));
  EXPECT_EQ(pm::io::open_file(pg / "out/stdout", 0666, p), -1);
  EXPECT_EQ(p.message(), "refusing '" + pg / "out/stdout" + "': it is a symbolic link");
  EXPECT_EQ(slurp(pg.victim()), "precious\n");
  // check_below sees it before anything is opened.
  const std::string_view files[] = {"stdout"};
  EXPECT_FALSE(pm::io::check_below(dir, "", files, p));
  EXPECT_EQ(p.why, "is a symbolic link");
}

TEST(SafePath, AFifoADeviceAndAHardLinkAreRefusedWithoutWaiting) {
  playground pg;
  ASSERT_EQ(::mkfifo((pg / "fifo").c_str(), 0644), 0);
  ASSERT_EQ(::link(pg.victim().c_str(), (pg / "hard").c_str()), 0);
  path_problem p;
  EXPECT_EQ(pm::io::open_file(pg / "fifo", 0666, p), -1);  // no reader: an open would block
  EXPECT_EQ(p.why, "is a FIFO, not a regular file");
  EXPECT_EQ(pm::io::open_file("/dev/null", 0666, p), -1);
  EXPECT_EQ(p.why, "is a character device, not a regular file");
  EXPECT_EQ(pm::io::open_file(pg / "hard", 0666, p), -1);
  EXPECT_EQ(p.why, "has 2 hard links (another name may be someone's)");
  EXPECT_EQ(slurp(pg.victim()), "precious\n");
}

TEST(SafePath, WhatAnotherUserPlantedInASharedDirectoryIsRefused) {
  PM_OTHER_USER(bob);
  playground pg;
  // The attack: in a /tmp-like directory, bob prepares DIR/1/rank.0/stdout -> root's file.
  ASSERT_TRUE(as(bob, "mkdir -p " + pg.shared() + "/out/1/rank.0 && ln -s " + pg.victim() + " " +
                          pg.shared() + "/out/1/rank.0/stdout"));
  path_problem p;
  EXPECT_FALSE(pm::io::open_directory(pg.shared() + "/out", true, p));
  EXPECT_EQ(p.at, pg.shared() + "/out");
  EXPECT_EQ(p.why,
            "is owned by " + bob.name() + " (uid " + std::to_string(bob.uid()) + "), not by root");
  EXPECT_EQ(p.message("create"), "refusing '" + pg.shared() + "/out': it " + p.why);
  // Deeper: the named directory is ours but bob made a level below it.
  ASSERT_EQ(::mkdir((pg / "mine").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((pg / "mine/1").c_str(), 0777), 0);
  ::chmod((pg / "mine/1").c_str(), 0777);
  ASSERT_TRUE(as(bob, "mkdir " + pg / "mine/1/rank.0"));
  const safe_dir mine = pm::io::open_directory(pg / "mine", false, p);
  ASSERT_TRUE(mine) << p.message();
  EXPECT_FALSE(pm::io::open_below(mine, "1/rank.0", true, p));
  EXPECT_EQ(p.at, pg / "mine/1");  // the world-writable level is refused first
  EXPECT_EQ(p.why, "is writable by every user (mode 0777)");
  ::chmod((pg / "mine/1").c_str(), 0755);
  EXPECT_FALSE(pm::io::open_below(mine, "1/rank.0", true, p));
  EXPECT_EQ(p.at, pg / "mine/1/rank.0");
  EXPECT_NE(p.why.find("is owned by " + bob.name()), std::string::npos) << p.why;
  // bob's file where ours would be.
  ASSERT_TRUE(as(bob, "touch " + pg.shared() + "/r.json"));
  EXPECT_EQ(pm::io::open_file(pg.shared() + "/r.json", 0666, p), -1);
  EXPECT_NE(p.why.find("is owned by " + bob.name()), std::string::npos) << p.why;
  EXPECT_EQ(slurp(pg.victim()), "precious\n");
}

TEST(SafePath, GroupAndOtherWritableDirectoriesAreRefusedStickyOnlyWhereNamed) {
  PM_OTHER_USER(bob);
  playground pg;
  path_problem p;
  // World-writable without the sticky bit: anyone could swap what is inside.
  ASSERT_EQ(::mkdir((pg / "open").c_str(), 0755), 0);
  ::chmod((pg / "open").c_str(), 0777);
  EXPECT_FALSE(pm::io::open_directory(pg / "open/out", true, p));
  EXPECT_EQ(p.at, pg / "open");
  EXPECT_EQ(p.why, "is writable by every user (mode 0777)");
  EXPECT_FALSE(fs::exists(pg / "open/out"));
  // Writable by a group bob is in (his primary group).
  ASSERT_EQ(::mkdir((pg / "team").c_str(), 0755), 0);
  ASSERT_EQ(::chown((pg / "team").c_str(), 0, bob.gid()), 0);
  ::chmod((pg / "team").c_str(), 0775);
  EXPECT_FALSE(pm::io::open_directory(pg / "team", true, p));
  EXPECT_NE(p.why.find("is writable by its group"), std::string::npos) << p.why;
  EXPECT_NE(p.why.find("which has other members than its owner"), std::string::npos) << p.why;
  // Sticky and world-writable (like /tmp): fine where the user named it, as an ancestor or as
  // DIR itself; never below DIR, where the job's own levels are.
  const safe_dir shared = pm::io::open_directory(pg.shared(), false, p);
  ASSERT_TRUE(shared) << p.message();
  const safe_dir out = pm::io::open_directory(pg.shared() + "/out", true, p);
  ASSERT_TRUE(out) << p.message();
  ASSERT_EQ(::mkdir((pg.shared() + "/out/1").c_str(), 0755), 0);
  ::chmod((pg.shared() + "/out/1").c_str(), 01777);
  EXPECT_FALSE(pm::io::open_below(out, "1/rank.0", true, p));
  EXPECT_EQ(p.why, "is writable by every user (mode 1777)");
}

TEST(SafePath, AGroupWritableDirectoryOfTheOwnersPrivateGroupIsFine) {
  // root's group is root's private group when nobody else is in it (Debian's StrictModes rule).
  const group* g = ::getgrgid(0);
  if (g == nullptr || (g->gr_mem != nullptr && g->gr_mem[0] != nullptr)) {
    GTEST_SKIP() << "group 0 has members";
  }
  ::setpwent();
  bool others = false;
  while (const passwd* pw = ::getpwent()) others = others || (pw->pw_gid == 0 && pw->pw_uid != 0);
  ::endpwent();
  if (others) GTEST_SKIP() << "another user has group 0 as primary group";
  playground pg;
  ASSERT_EQ(::mkdir((pg / "own").c_str(), 0755), 0);
  ASSERT_EQ(::chown((pg / "own").c_str(), 0, 0), 0);
  ::chmod((pg / "own").c_str(), 0775);
  path_problem p;
  EXPECT_TRUE(pm::io::open_directory(pg / "own", false, p)) << p.message();
}

TEST(SafePath, LinksInTheNamedPathAreFollowedOnlyWhenTrusted) {
  PM_OTHER_USER(bob);
  playground pg;
  ASSERT_EQ(::mkdir((pg / "real").c_str(), 0755), 0);
  // Root's own link (like /var/run -> /run): followed, relative or absolute.
  ASSERT_EQ(::symlink("real", (pg / "rel-link").c_str()), 0);
  ASSERT_EQ(::symlink((pg / "real").c_str(), (pg / "abs-link").c_str()), 0);
  path_problem p;
  const safe_dir a = pm::io::open_directory(pg / "rel-link/sub", true, p);
  ASSERT_TRUE(a) << p.message();
  EXPECT_EQ(a.path(), pg / "real/sub");
  const safe_dir b = pm::io::open_directory(pg / "abs-link", false, p);
  ASSERT_TRUE(b) << p.message();
  EXPECT_EQ(b.path(), pg / "real");
  // bob's link in the shared directory: not followed, even to a good place.
  ASSERT_TRUE(as(bob, "ln -s " + pg / "real" + " " + pg.shared() + "/bobs"));
  EXPECT_FALSE(pm::io::open_directory(pg.shared() + "/bobs", true, p));
  EXPECT_EQ(p.why, "is a symbolic link owned by " + bob.name() + " (uid " +
                       std::to_string(bob.uid()) + "), not by root");
  // No link at all below the named directory, whoever made it.
  ASSERT_EQ(::symlink((pg / "real").c_str(), (pg / "real/sub/1").c_str()), 0);
  EXPECT_FALSE(pm::io::open_below(a, "1/rank.0", true, p));
  EXPECT_EQ(p.at, pg / "real/sub/1");
  EXPECT_EQ(p.why, "is a symbolic link");
  EXPECT_FALSE(pm::io::open_below(a, "../x", true, p));
  // A loop is an error, not a hang.
  ASSERT_EQ(::symlink("loop", (pg / "loop").c_str()), 0);
  EXPECT_FALSE(pm::io::open_directory(pg / "loop", true, p));
  EXPECT_EQ(p.error, ELOOP);
}

TEST(SafePath, CheckBelowFindsWhatIsPlantedAndCreatesNothing) {
  playground pg;
  path_problem p;
  ASSERT_EQ(::mkdir((pg / "out").c_str(), 0755), 0);
  const safe_dir out = pm::io::open_directory(pg / "out", false, p);
  ASSERT_TRUE(out);
  const std::string_view files[] = {"stdout", "stderr"};
  EXPECT_TRUE(pm::io::check_below(out, "1/rank.0", files, p)) << p.message();
  EXPECT_FALSE(fs::exists(pg / "out/1"));  // nothing made
  fs::create_directories(pg / "out/1/rank.0");
  std::ofstream(pg / "out/1/rank.0/stdout") << "old";
  EXPECT_TRUE(pm::io::check_below(out, "1/rank.0", files, p)) << p.message();
  ASSERT_EQ(::mkfifo((pg / "out/1/rank.0/stderr").c_str(), 0644), 0);
  EXPECT_FALSE(pm::io::check_below(out, "1/rank.0", files, p));
  EXPECT_EQ(p.message("open"),
            "refusing '" + pg / "out/1/rank.0/stderr" + "': it is a FIFO, not a regular file");
  EXPECT_EQ(slurp(pg / "out/1/rank.0/stdout"), "old");  // checked, not truncated
}

TEST(SafePath, FailuresSayWhatCouldNotBeDoneAndWhere) {
  playground pg;
  path_problem p;
  EXPECT_EQ(pm::io::open_file(pg / "no-such-dir/r.json", 0666, p), -1);
  EXPECT_EQ(p.message(), "cannot write '" + pg / "no-such-dir/r.json" +
                             "': No such file or directory (at '" + pg / "no-such-dir" + "')");
  std::ofstream(pg / "plain") << "x";
  EXPECT_FALSE(pm::io::open_directory(pg / "plain/sub", true, p));
  EXPECT_EQ(p.message("create"), "refusing '" + pg / "plain/sub" + "': '" + pg / "plain" +
                                     "' is a regular file, not a directory");
}

}  // namespace
