// `pmd --stdio` given something other than a launcher (issue 20, item 7): a silent input ends
// it within its hello bound, garbage or an input that ends at once within moments, each with one
// line on its stderr and a non-zero exit; an input it cannot wait on is refused in one line.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "support/command.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

std::string pmd_path() {
  return std::string(PM_BINARY_DIR) + "/bin/pmd";
}

struct ended {
  int status = -1;  // waitpid's, -1: killed by the test after `limit`
  std::string err;
  std::chrono::milliseconds took{0};
};

// Runs pmd with `args`; its stdin is a pipe this test writes `input` into and then keeps open
// (`close_input`: closes it at once instead), its stdout is drained, its stderr kept.
ended run_pmd(const std::vector<std::string>& args, const std::string& input, bool close_input,
              std::chrono::milliseconds limit) {
  int in[2], out[2], err[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  const auto t0 = clock_type::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    std::vector<std::string> argv = {pmd_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::signal(SIGPIPE, SIG_IGN);
  // Written whole (pmd reads its input as it comes; it writes little: its hello, one line).
  for (std::size_t at = 0; at < input.size();) {
    const ssize_t n = ::write(in[1], input.data() + at, input.size() - at);
    if (n <= 0) break;  // pmd left
    at += static_cast<std::size_t>(n);
  }
  if (close_input) ::close(in[1]);
  ended e;
  char buf[65536];
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(t0 + limit - clock_type::now());
    if (left.count() <= 0) break;
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    if (fds[0].revents != 0 && ::read(out[0], buf, sizeof buf) <= 0) out_open = false;
    if (fds[1].revents != 0) {
      const ssize_t n = ::read(err[0], buf, sizeof buf);
      if (n <= 0) {
        err_open = false;
      } else {
        e.err.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid ||
      (!out_open && !err_open && ::waitpid(pid, &status, 0) == pid)) {
    e.status = status;
  } else {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  e.took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0);
  if (!close_input) ::close(in[1]);
  ::close(out[0]);
  ::close(err[0]);
  return e;
}

std::size_t lines(const std::string& text) {
  return std::count(text.begin(), text.end(), '\n');
}

TEST(PmdStdio, ASilentInputEndsItWithinItsHelloBoundInOneLine) {
  const auto e = run_pmd({"--stdio", "--nonce", "1f", "--hello-ms", "500"}, "", false, 10s);
  ASSERT_NE(e.status, -1) << "pmd still waited after 10 s: " << e.err;
  EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) != 0) << e.status;
  EXPECT_GE(e.took, 400ms);
  EXPECT_LT(e.took, 5s);
  EXPECT_EQ(lines(e.err), 1u) << e.err;
  EXPECT_EQ(e.err, "pmd: no hello from the launcher within 0.5 s\n");
}

TEST(PmdStdio, GarbageEndsItAtOnceInOneLine) {
  // More than the noise a login shell may print before the link's magic (64 KiB), input kept
  // open: refused as soon as it is seen, not at the hello bound.
  const auto e = run_pmd({"--stdio", "--nonce", "1f"}, std::string(70000, 'x'), false, 10s);
  ASSERT_NE(e.status, -1) << "pmd still waited after 10 s: " << e.err;
  EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) != 0) << e.status;
  EXPECT_LT(e.took, 5s);
  EXPECT_EQ(lines(e.err), 1u) << e.err;
  EXPECT_EQ(e.err.rfind("pmd: agent link: the peer sent ", 0), 0u) << e.err;
}

TEST(PmdStdio, AnInputThatEndsBeforeTheHelloEndsItInOneLine) {
  const auto e = run_pmd({"--stdio", "--nonce", "1f"}, "garbage\n", true, 10s);
  ASSERT_NE(e.status, -1) << "pmd still waited after 10 s: " << e.err;
  EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) != 0) << e.status;
  EXPECT_LT(e.took, 5s);
  EXPECT_EQ(lines(e.err), 1u) << e.err;
  EXPECT_NE(e.err.find("closed the link before its hello"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("garbage"), std::string::npos) << e.err;  // what it said, for the user
}

TEST(PmdStdio, AnInputItCannotWaitOnIsRefusedInOneLine) {
  // /dev/null (or a regular file): epoll refuses it; pmd used to wait for ever without a word.
  char err_path[] = "/tmp/pmd-stdio-test.XXXXXX";
  const int err = ::mkstemp(err_path);
  ASSERT_GE(err, 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    const int out = ::open("/dev/null", O_WRONLY);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execl(pmd_path().c_str(), "pmd", "--stdio", "--nonce", "1f", "--hello-ms", "60000",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  const auto t0 = clock_type::now();
  while (::waitpid(pid, &status, WNOHANG) == 0 && clock_type::now() - t0 < 10s) {
    ::usleep(10000);
  }
  if (clock_type::now() - t0 >= 10s) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "pmd waited on /dev/null";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  std::string said(4096, '\0');
  const ssize_t n = ::pread(err, said.data(), said.size(), 0);
  said.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  ::close(err);
  ::unlink(err_path);
  EXPECT_EQ(lines(said), 1u) << said;
  EXPECT_EQ(said.rfind("pmd: its input cannot be waited on", 0), 0u) << said;
}

// pmd reads this host's shape through pmd-helper (it loads nothing itself): the summary line, or,
// when the helper cannot start, one line naming it and exit code 1.
TEST(PmdStdio, TheTopologyComesFromItsHelperOrOneLineSaysWhyNot) {
  const auto ok = pm::test::run_command({pmd_path(), "--topology"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.rfind("pmtopo1;", 0), 0u) << ok.out;
  const auto broken = pm::test::run_command(
      {"/usr/bin/env", "PM_PMD_HELPER=/nonexistent/pmd-helper", pmd_path(), "--topology"});
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_EQ(broken.out, "");
  EXPECT_EQ(broken.err,
            "pmd: topology: cannot start /nonexistent/pmd-helper: No such file or directory\n");
}

}  // namespace
