// What /proc says of a process for --stall-timeout (sys/proc_sample.hpp): the stat line's
// fields, a fake /proc tree with descendants, and this very process.
#include "sys/proc_sample.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;
using pm::sys::parse_stat;
using pm::sys::read_activity;

TEST(ProcSample, StatFieldsCountFromTheLastParenthesis) {
  // utime 7, stime 3, cutime 2, cstime 1; the command holds ") S 1 2".
  const auto f =
      parse_stat("4711 (evil) S 1 2) D 1 4711 4711 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5 0");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->state, 'D');
  EXPECT_EQ(f->ticks, 13u);
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("4711 (cut"));
  EXPECT_FALSE(parse_stat("4711 (short) S 1 2 3"));
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string stat_line(int pid, char state, int utime, int stime) {
  return std::to_string(pid) + " (x) " + state + " 1 " + std::to_string(pid) +
         " 1 0 -1 0 0 0 0 0 " + std::to_string(utime) + " " + std::to_string(stime) +
         " 0 0 20 0 1 0 5 0\n";
}

TEST(ProcSample, ALeaderAndItsDescendantsAddUp) {
  char templ[] = "/tmp/pm-proc-test.XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const fs::path proc = templ;
  const long hz = ::sysconf(_SC_CLK_TCK);
  // 100 <- 101 (thread 102 forked 103) ; 104 vanished between the lists and its stat.
  write(proc / "100/stat", stat_line(100, 'S', static_cast<int>(hz), 0));
  write(proc / "100/wchan", "do_wait");
  write(proc / "100/io", "rchar: 5\nwchar: 10\nsyscr: 1\n");
  write(proc / "100/task/100/children", "101 104 ");
  write(proc / "101/stat", stat_line(101, 'S', 0, static_cast<int>(hz)));
  write(proc / "101/io", "wchar: 20\n");
  write(proc / "101/task/101/children", "");
  write(proc / "101/task/102/children", "103");
  write(proc / "103/stat", stat_line(103, 'R', static_cast<int>(hz) / 2, 0));
  write(proc / "103/io", "wchar: 30\n");
  const auto a = read_activity(100, proc.string());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->state, 'S');
  EXPECT_EQ(a->wchan, "do_wait");
  EXPECT_EQ(a->cpu_ms, 2500u);
  EXPECT_EQ(a->written, 60u);
  // A leader whose stat cannot be read is gone; "0" in wchan is no wait channel.
  EXPECT_FALSE(read_activity(999, proc.string()));
  write(proc / "100/wchan", "0");
  EXPECT_EQ(read_activity(100, proc.string())->wchan, "");
  fs::remove_all(proc);
}

TEST(ProcSample, ThisProcessIsRunningAndHasWritten) {
  const auto a = read_activity(::getpid());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->state, 'R');  // it is reading its own stat
  std::ofstream("/dev/null") << "x" << std::flush;
  const auto b = read_activity(::getpid());
  ASSERT_TRUE(b);
  EXPECT_GE(b->written, a->written);
}

}  // namespace
