// agent/private_dir.hpp: the agent's private directories are made only where nobody else can
// rename them, never through a link, and removed without following a link or removing another
// user's entries; the stale-directory sweep of a SIGKILLed agent's leftovers likewise.
#include "agent/private_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pm/error.hpp"
#include "support/other_user.hpp"

namespace {

namespace fs = std::filesystem;

class PrivateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/pm-private-dir-test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    root_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::string text;
    std::getline(in, text);
    return text;
  }
  // A pid that ran once and runs no more.
  static pid_t dead_pid() {
    const pid_t gone = ::fork();
    if (gone == 0) ::_exit(0);
    ::waitpid(gone, nullptr, 0);
    return gone;
  }
  std::string root_;
};

TEST_F(PrivateDir, IsMadeOursAloneAndRemovedWithWhatItHolds) {
  const std::string dir = root_ + "/pm-pmix.1.abc";
  {
    const auto fd = pm::agent::make_private_dir(dir);
    ASSERT_TRUE(fd);
    struct stat st {};
    ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    EXPECT_EQ(st.st_uid, ::geteuid());
  }
  fs::create_directories(dir + "/a/b/c");
  write(dir + "/a/b/c/file", "x");
  ASSERT_EQ(::symlink("/etc", (dir + "/a/link").c_str()), 0);
  std::string why;
  EXPECT_TRUE(pm::agent::remove_private_tree(dir, &why)) << why;
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir)));
  EXPECT_TRUE(fs::exists("/etc/passwd"));  // the link went, not what it named
  // Nothing there is no error.
  EXPECT_TRUE(pm::agent::remove_private_tree(dir, &why)) << why;
}

TEST_F(PrivateDir, IsNeverMadeThroughALinkOrOverSomethingThere) {
  const std::string victim = root_ + "/victim";
  fs::create_directory(victim);
  const std::string link = root_ + "/pm-pmix.2.abc";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_THROW(pm::agent::make_private_dir(link), pm::error);
  EXPECT_TRUE(fs::is_empty(victim));
  const std::string there = root_ + "/pm-pmix.3.abc";
  fs::create_directory(there);
  EXPECT_THROW(pm::agent::make_private_dir(there), pm::error);
}

TEST_F(PrivateDir, IsNotMadeWhereOthersMayRenameIt) {
  // Writable by others without the sticky bit: someone could swap the directory for a link.
  ASSERT_EQ(::chmod(root_.c_str(), 0777), 0);
  try {
    pm::agent::make_private_dir(root_ + "/pm-pmix.4.abc");
    ADD_FAILURE() << "made in a directory anyone may rename things in";
  } catch (const pm::error& e) {
    EXPECT_NE(std::string(e.what()).find("sticky"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ + "/pm-pmix.4.abc"));
  // With the sticky bit (as /tmp and /dev/shm), it may.
  ASSERT_EQ(::chmod(root_.c_str(), 01777), 0);
  EXPECT_NO_THROW(pm::agent::make_private_dir(root_ + "/pm-pmix.5.abc"));
  ASSERT_EQ(::chmod(root_.c_str(), 0700), 0);
}

TEST_F(PrivateDir, IsNotMadeInAnotherUsersDirectory) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  if (!other) GTEST_SKIP() << why;
  const std::string theirs = root_ + "/theirs";
  fs::create_directory(theirs);
  ASSERT_TRUE(other->give(theirs));
  EXPECT_THROW(pm::agent::make_private_dir(theirs + "/pm-pmix.6.abc"), pm::error);
  EXPECT_TRUE(fs::is_empty(theirs));
}

TEST_F(PrivateDir, RemovalLeavesAnotherUsersEntries) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  if (!other) GTEST_SKIP() << why;
  const std::string dir = root_ + "/pm-pmix.7.abc";
  pm::agent::make_private_dir(dir);
  fs::create_directory(dir + "/theirs");
  write(dir + "/theirs/keep", "theirs");
  ASSERT_TRUE(other->give(dir + "/theirs"));
  ASSERT_TRUE(other->give(dir + "/theirs/keep"));
  write(dir + "/ours", "ours");
  EXPECT_FALSE(pm::agent::remove_private_tree(dir, &why));
  EXPECT_NE(why.find("belongs to uid " + std::to_string(other->uid())), std::string::npos) << why;
  EXPECT_EQ(read(dir + "/theirs/keep"), "theirs");
  EXPECT_FALSE(fs::exists(dir + "/ours"));
}

TEST_F(PrivateDir, TheStaleSweepRemovesOnlyOurOwnDeadAgentsDirectories) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  const pid_t dead = dead_pid();
  const std::string prefix = "pm-pmix.";
  const std::string stem = root_ + "/" + prefix + std::to_string(dead);
  // Ours, of a dead agent: removed, with what it holds.
  fs::create_directories(stem + ".ours/pmix");
  write(stem + ".ours/pmix/file", "x");
  // A link named like one, to a directory with a file: the link may go, what it names stays.
  const std::string victim = root_ + "/victim";
  fs::create_directory(victim);
  write(victim + "/precious", "precious");
  ASSERT_EQ(::symlink(victim.c_str(), (stem + ".link").c_str()), 0);
  // Of a process that runs (this one): left.
  const std::string alive = root_ + "/" + prefix + std::to_string(::getpid()) + ".alive";
  fs::create_directory(alive);
  // Another user's, of a dead pid: left, with what it holds.
  const std::string theirs = stem + ".theirs";
  if (other) {
    fs::create_directory(theirs);
    write(theirs + "/keep", "theirs");
    ASSERT_TRUE(other->give(theirs));
    ASSERT_TRUE(other->give(theirs + "/keep"));
  }
  pm::agent::remove_stale_private_dirs(root_, prefix);
  EXPECT_FALSE(fs::exists(stem + ".ours"));
  EXPECT_EQ(read(victim + "/precious"), "precious");
  EXPECT_TRUE(fs::exists(alive));
  if (other) {
    EXPECT_EQ(read(theirs + "/keep"), "theirs");
  } else {
    GTEST_SKIP() << "another user's directory not tried: " << why;
  }
}

}  // namespace
