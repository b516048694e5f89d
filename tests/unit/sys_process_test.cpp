// libpm/src/sys with real children: waiting through the pidfd, the exit texts, and the stop
// sequence (a child that ignores SIGTERM gets SIGKILL after the grace; one that ends at SIGTERM
// gets nothing more), on an io_context and blocking.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "support/processes.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "sys/watched_process.hpp"

namespace pm::sys {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// `sh -c script`; when `ready` is asked for, returns once the script printed its first line (so
// that a trap it sets is in place before the test signals it).
spawned_process start_sh(const std::string& script, bool ready = false) {
  int p[2] = {-1, -1};
  if (ready) {
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  }
  spawn_request req;
  req.path = "/bin/sh";
  req.argv = {"sh", "-c", script};
  req.env = {"PATH=/usr/bin:/bin"};
  req.stdout_fd = p[1];
  const auto child = spawn(req);
  if (ready) {
    ::close(p[1]);
    char c = 0;
    EXPECT_EQ(::read(p[0], &c, 1), 1);
    ::close(p[0]);
  }
  return child;
}

// A child that ignores SIGTERM; exec keeps the disposition, so no shell stays behind it.
const std::string ignores_term = "trap '' TERM; echo ready; exec sleep 30";
// A child that SIGTERM ends.
const std::string ends_at_term = "echo ready; exec sleep 30";

// Runs `io` until `done` holds or 10 s passed.
template <class Pred>
bool run_until(boost::asio::io_context& io, Pred done) {
  const auto until = steady::now() + 10s;
  while (!done() && steady::now() < until) {
    io.restart();
    io.run_for(20ms);
  }
  return done();
}

TEST(SysPidfd, ExitTexts) {
  EXPECT_EQ(describe({true, exit_status::exited(3), 0}), "exited with code 3");
  EXPECT_EQ(describe({true, exit_status::signaled(SIGKILL), 0}), "was killed by SIGKILL");
  EXPECT_EQ(describe({true, exit_status::signaled(SIGTERM), 0}), "was killed by SIGTERM");
  EXPECT_EQ(describe({true, std::nullopt, ECHILD}),
            "ended; its status is lost: No child processes");
  EXPECT_EQ(describe({}), "is still running");
}

TEST(SysPidfd, WaitsForACodeAndASignal) {
  const auto code = start_sh("exit 3");
  const auto got = wait_exit(code.pidfd);
  ::close(code.pidfd);
  ASSERT_TRUE(got.ended);
  EXPECT_EQ(got.status, exit_status::exited(3));
  EXPECT_EQ(describe(got), "exited with code 3");

  const auto killed = start_sh("exec sleep 30");
  EXPECT_FALSE(check_exit(killed.pidfd).ended);
  EXPECT_TRUE(send_signal(killed.pidfd, SIGKILL));
  const auto end = wait_exit(killed.pidfd);
  EXPECT_EQ(end.status, exit_status::signaled(SIGKILL));
  EXPECT_EQ(describe(end), "was killed by SIGKILL");
  EXPECT_FALSE(send_signal(killed.pidfd, SIGKILL));  // reaped: nothing to signal
  ::close(killed.pidfd);
}

TEST(SysPidfd, KeepZombieLeavesThePidTaken) {
  const auto child = start_sh("exit 5");
  ASSERT_TRUE(wait_ended(child.pidfd, 10s));
  const auto first = check_exit(child.pidfd, reap_mode::keep_zombie);
  EXPECT_EQ(first.status, exit_status::exited(5));
  EXPECT_EQ(::kill(child.pid, 0), 0);  // a zombie still holds its pid
  EXPECT_EQ(check_exit(child.pidfd).status, exit_status::exited(5));
  EXPECT_NE(::kill(child.pid, 0), 0);
  ::close(child.pidfd);
}

TEST(SysPidfd, AChildReapedElsewhereEndsWithItsStatusLost) {
  const auto child = start_sh("exit 0");
  ASSERT_EQ(::waitpid(child.pid, nullptr, 0), child.pid);
  const auto got = check_exit(child.pidfd);
  ::close(child.pidfd);
  EXPECT_TRUE(got.ended);
  EXPECT_FALSE(got.status);
  EXPECT_EQ(got.error, ECHILD);
}

TEST(SysPidfd, OpenPidfdOfAChild) {
  const auto child = start_sh("exec sleep 30");
  const int second = open_pidfd(child.pid);
  ASSERT_GE(second, 0);
  EXPECT_TRUE(send_signal(second, SIGKILL));
  EXPECT_EQ(wait_exit(second).status, exit_status::signaled(SIGKILL));
  ::close(second);
  ::close(child.pidfd);
}

TEST(SysStopSequence, BlockingSigkillAfterTheGraceForAChildThatIgnoresSigterm) {
  const auto child = start_sh(ignores_term, true);
  const auto start = steady::now();
  const auto end = stop_and_reap(child.pidfd, {0ms, SIGTERM, 300ms, SIGKILL});
  ::close(child.pidfd);
  EXPECT_EQ(end.status, exit_status::signaled(SIGKILL));
  EXPECT_GE(steady::now() - start, 300ms);
}

TEST(SysStopSequence, BlockingNoSigkillForAChildThatEndsAtSigterm) {
  const auto child = start_sh(ends_at_term, true);
  const auto start = steady::now();
  const auto end = stop_and_reap(child.pidfd, {0ms, SIGTERM, 5s, SIGKILL});
  ::close(child.pidfd);
  EXPECT_EQ(end.status, exit_status::signaled(SIGTERM));
  EXPECT_LT(steady::now() - start, 5s);
}

TEST(SysStopSequence, BlockingNoSignalForAChildThatEndsWithinItsPatience) {
  const auto child = start_sh("sleep 0.1; exit 4");
  const auto end = stop_and_reap(child.pidfd, {5s, SIGKILL, 0ms, SIGKILL});
  ::close(child.pidfd);
  EXPECT_EQ(end.status, exit_status::exited(4));
}

TEST(SysWatchedProcess, ReportsTheExitOnTheIoContext) {
  boost::asio::io_context io;
  watched_process p(io, start_sh("sleep 0.1; exit 3"));
  std::optional<exit_check> got;
  p.on_exit([&](const exit_check& c) { got = c; });
  ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
  EXPECT_EQ(got->status, exit_status::exited(3));
  EXPECT_TRUE(p.ended());
  EXPECT_EQ(p.end().status, exit_status::exited(3));
  EXPECT_FALSE(test::alive(p.pid()));
  // Asked again after the end: answered (posted), not lost.
  std::optional<exit_check> again;
  p.on_exit([&](const exit_check& c) { again = c; });
  ASSERT_TRUE(run_until(io, [&] { return again.has_value(); }));
  EXPECT_EQ(again->status, exit_status::exited(3));
}

TEST(SysWatchedProcess, SigkillAfterTheGraceForAChildThatIgnoresSigterm) {
  boost::asio::io_context io;
  watched_process p(io, start_sh(ignores_term, true));
  std::optional<exit_check> got;
  p.on_exit([&](const exit_check& c) { got = c; });
  const auto start = steady::now();
  p.stop({50ms, SIGTERM, 300ms, SIGKILL});
  EXPECT_TRUE(p.stopping());
  ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
  EXPECT_EQ(got->status, exit_status::signaled(SIGKILL));
  EXPECT_GE(steady::now() - start, 350ms);
  EXPECT_FALSE(p.stopping());
}

TEST(SysWatchedProcess, NoSigkillForAChildThatEndsAtSigterm) {
  boost::asio::io_context io;
  watched_process p(io, start_sh(ends_at_term, true));
  std::optional<exit_check> got;
  p.on_exit([&](const exit_check& c) { got = c; });
  p.stop({0ms, SIGTERM, 300ms, SIGKILL});
  ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
  EXPECT_EQ(got->status, exit_status::signaled(SIGTERM));
  // The grace's timer is cancelled with the end: running on past it sends nothing, finds nothing.
  io.restart();
  io.run_for(400ms);
  EXPECT_EQ(p.end().status, exit_status::signaled(SIGTERM));
}

TEST(SysWatchedProcess, NoFirstSignalOnlyTheLastAfterTheGrace) {
  // A local pmd's sequence: it ends by itself, or SIGKILL after the grace.
  boost::asio::io_context io;
  watched_process p(io, start_sh(ends_at_term, true));
  std::optional<exit_check> got;
  p.on_exit([&](const exit_check& c) { got = c; });
  p.stop({0ms, 0, 200ms, SIGKILL});
  ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
  EXPECT_EQ(got->status, exit_status::signaled(SIGKILL));  // SIGTERM would have ended it
}

TEST(SysWatchedProcess, StopNowBlocksAndReaps) {
  boost::asio::io_context io;
  auto p = std::make_unique<watched_process>(io, start_sh(ignores_term, true));
  const pid_t pid = p->pid();
  bool called = false;
  p->on_exit([&](const exit_check&) { called = true; });
  p->stop_now({0ms, SIGTERM, 100ms, SIGKILL});
  EXPECT_TRUE(p->ended());
  EXPECT_EQ(p->end().status, exit_status::signaled(SIGKILL));
  EXPECT_NE(::kill(pid, 0), 0);  // reaped, not a zombie
  p.reset();
  io.restart();
  io.run_for(50ms);
  EXPECT_FALSE(called);  // stop_now's end is its caller's to read
}

TEST(SysWatchedProcess, DestroyedBeforeTheEndNeverCallsBack) {
  boost::asio::io_context io;
  const auto child = start_sh(ignores_term, true);
  const int own = open_pidfd(child.pid);  // the test's own handle, to end and reap the child
  ASSERT_GE(own, 0);
  bool called = false;
  {
    watched_process p(io, child);
    p.on_exit([&](const exit_check&) { called = true; });
    p.stop({0ms, SIGTERM, 5s, SIGKILL});
    io.run_for(50ms);  // SIGTERM went; the grace runs
  }
  // Destroyed: neither its grace's SIGKILL nor its exit handler comes any more.
  ASSERT_TRUE(send_signal(own, SIGUSR1));
  io.restart();
  io.run_for(100ms);
  EXPECT_FALSE(called);
  EXPECT_EQ(wait_exit(own).status, exit_status::signaled(SIGUSR1));
  ::close(own);
}

}  // namespace
}  // namespace pm::sys
