// The local spawner with real processes: child hygiene, exec failures, pidfd.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "pm/error.hpp"
#include "sys/executable.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"

namespace {

using pm::sys::spawn;
using pm::sys::spawn_request;

struct result {
  std::string out;
  siginfo_t info{};
};

// Runs `sh -c script` with stdout into a pipe; waits through the pidfd.
result run_sh(const std::string& script, spawn_request req = {}) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  req.path = "/bin/sh";
  req.argv = {"sh", "-c", script};
  if (req.env.empty()) req.env = {"PATH=/usr/bin:/bin"};
  req.stdout_fd = p[1];
  auto child = spawn(req);
  close(p[1]);
  result r;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  pollfd pfd{child.pidfd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 10000), 1);  // readable once it exited
  EXPECT_EQ(waitid(pm::sys::pidfd_id, static_cast<id_t>(child.pidfd), &r.info, WEXITED), 0);
  close(child.pidfd);
  return r;
}

TEST(Spawner, OwnProcessGroup) {
  auto r = run_sh("echo $$ $(ps -o pgid= -p $$)");
  std::string pid = r.out.substr(0, r.out.find(' '));
  std::string pgid = r.out.substr(r.out.find(' ') + 1);
  pgid.erase(0, pgid.find_first_not_of(' '));
  pgid.erase(pgid.find_last_not_of(" \n") + 1);
  EXPECT_EQ(pid, pgid);
}

TEST(Spawner, SignalsResetEvenIfTheParentIgnoresAndBlocksThem) {
  struct sigaction ign {
  }, old_int{}, old_pipe{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGPIPE, &ign, &old_pipe);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  auto r = run_sh("grep -E '^Sig(Ign|Blk)' /proc/self/status");
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_EQ(r.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST(Spawner, OnlyStandardDescriptorsAreOpen) {
  int leaked = open("/dev/null", O_RDONLY);  // no O_CLOEXEC, as an embedding program might
  ASSERT_GE(leaked, 3);
  auto r = run_sh("ls /proc/self/fd | sort -n | tr '\\n' ' '");
  close(leaked);
  // 0 1 2 and the descriptor ls itself opens for /proc/self/fd.
  EXPECT_EQ(r.out, "0 1 2 3 ");
}

TEST(Spawner, WorkingDirectoryAndEnvironment) {
  spawn_request req;
  req.wdir = "/tmp";
  req.env = {"PATH=/usr/bin:/bin", "ONLY=this"};
  auto r = run_sh("pwd; env | grep -v '^PWD=\\|^SHLVL=\\|^_=' | sort", req);
  EXPECT_EQ(r.out, "/tmp\nONLY=this\nPATH=/usr/bin:/bin\n");
}

TEST(Spawner, RestoresTheOriginalDescriptorLimit) {
  rlimit original{};
  getrlimit(RLIMIT_NOFILE, &original);
  rlimit lowered = original;
  lowered.rlim_cur = 200;
  spawn_request req;
  req.nofile = lowered;  // what the rank should get back
  auto r = run_sh("ulimit -n", req);
  EXPECT_EQ(r.out, "200\n");
}

TEST(Spawner, ExitStatusThroughThePidfd) {
  auto r = run_sh("exit 7");
  EXPECT_EQ(r.info.si_code, CLD_EXITED);
  EXPECT_EQ(r.info.si_status, 7);
  auto k = run_sh("kill -9 $$");
  EXPECT_EQ(k.info.si_code, CLD_KILLED);
  EXPECT_EQ(k.info.si_status, SIGKILL);
}

TEST(Spawner, ExecFailuresAreReportedSynchronously) {
  spawn_request req;
  req.path = "/nonexistent/app";
  req.argv = {"app"};
  try {
    spawn(req);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::not_found);
    EXPECT_STREQ(e.what(), "cannot execute '/nonexistent/app': No such file or directory");
  }
  const std::string plain = "/tmp/pm-spawner-test-plain-" + std::to_string(getpid());
  close(open(plain.c_str(), O_CREAT | O_WRONLY, 0644));  // exists, not executable
  req.path = plain;
  EXPECT_THROW(spawn(req), pm::error);
  unlink(plain.c_str());
  EXPECT_EQ(pm::sys::exec_failure_code(ENOENT), 127);
  EXPECT_EQ(pm::sys::exec_failure_code(EACCES), 126);
}

TEST(Spawner, AWorkingDirectoryThatFailsIsNamedNotTheProgram) {
  spawn_request req;
  req.path = "/bin/true";
  req.argv = {"true"};
  const auto failure = [&](const std::string& wdir) -> std::pair<pm::errc, std::string> {
    req.wdir = wdir;
    try {
      spawn(req);
    } catch (const pm::error& e) {
      return {e.code(), e.what()};
    }
    return {pm::errc::usage, "(started)"};
  };
  EXPECT_EQ(failure("/no/such/dir"),
            std::make_pair(pm::errc::not_found,
                           std::string("cannot enter the working directory '/no/such/dir': No "
                                       "such file or directory")));
  EXPECT_EQ(failure("/etc/passwd"),
            std::make_pair(pm::errc::not_executable,
                           std::string("cannot enter the working directory '/etc/passwd': Not a "
                                       "directory")));
  EXPECT_EQ(failure("/no\nline").second,
            "cannot enter the working directory '/no\\nline': No such file or directory");
}

TEST(Spawner, ManySpawnsLeakNoDescriptors) {
  auto count_fds = [] {
    int n = 0;
    for (int fd = 0; fd < 1024; ++fd) n += fcntl(fd, F_GETFD) >= 0;
    return n;
  };
  const int before = count_fds();
  for (int i = 0; i < 50; ++i) run_sh("true");
  EXPECT_EQ(count_fds(), before);
}

TEST(Executable, Resolution) {
  EXPECT_EQ(pm::sys::resolve_executable("sh", "/nonexistent:/bin", ""), "/bin/sh");
  EXPECT_EQ(pm::sys::resolve_executable("/bin/sh", "", ""), "/bin/sh");
  EXPECT_EQ(pm::sys::resolve_executable("./sh", "", "/bin"), "/bin/./sh");
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const pm::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { pm::sys::resolve_executable("nosuch-program", "/bin:/usr/bin", ""); }),
            "program 'nosuch-program' not found in PATH");
  EXPECT_EQ(message([] { pm::sys::resolve_executable("./nosuch", "", "/tmp"); }),
            "'./nosuch' does not exist (in '/tmp')");
  EXPECT_EQ(message([] { pm::sys::resolve_executable("/tmp", "", ""); }), "'/tmp' is a directory");
  const std::string plain = "/tmp/pm-executable-test-plain-" + std::to_string(getpid());
  close(open(plain.c_str(), O_CREAT | O_WRONLY, 0644));
  EXPECT_EQ(message([&] { pm::sys::resolve_executable(plain, "", ""); }),
            "'" + plain + "' is not executable (Permission denied)");
  unlink(plain.c_str());
}

}  // namespace
