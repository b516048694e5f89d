// The local agent forked without an exec (transport/local/forked_agent, docs/agent.md "The local
// agent, forked"): the child must start as the exec'd pmd would, whatever the launcher's own
// state. Here the "agent" is a function of this test that reports what it started with on its
// stdout (the socket) and exits 7.
#include "transport/local/forked_agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "sys/pidfd.hpp"

extern char** environ;

namespace {

// What the child saw, as "key=value" lines on fd 1.
int report(int argc, char** argv) {
  std::string out;
  out += "argc=" + std::to_string(argc) + "\n";
  for (int i = 0; i < argc; ++i) out += "argv=" + std::string(argv[i]) + "\n";
  char comm[17] = {};
  ::prctl(PR_GET_NAME, comm, 0, 0, 0);
  out += "comm=" + std::string(comm) + "\n";
  out += "own_group=" + std::to_string(::getpgrp() == ::getpid()) + "\n";
  std::string fds;
  for (int fd = 0; fd < 64; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) fds += std::to_string(fd) + " ";
  }
  out += "fds=" + fds + "\n";
  struct sigaction sa {};
  ::sigaction(SIGINT, nullptr, &sa);
  out += "sigint_default=" + std::to_string(sa.sa_handler == SIG_DFL) + "\n";
  ::sigaction(SIGPIPE, nullptr, &sa);
  out += "sigpipe_default=" + std::to_string(sa.sa_handler == SIG_DFL) + "\n";
  sigset_t mask;
  ::sigprocmask(SIG_SETMASK, nullptr, &mask);
  out += "sigterm_blocked=" + std::to_string(sigismember(&mask, SIGTERM)) + "\n";
  int vars = 0;
  for (char** e = environ; *e != nullptr; ++e) ++vars;
  out += "vars=" + std::to_string(vars) + "\n";
  const char* a = std::getenv("A");
  out += "A=" + std::string(a != nullptr ? a : "(unset)") + "\n";
  out += "HOME=" + std::string(std::getenv("HOME") != nullptr ? "set" : "(unset)") + "\n";
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  out += "nofile=" + std::to_string(lim.rlim_cur) + "\n";
  [[maybe_unused]] const auto n = ::write(1, out.data(), out.size());
  return 7;
}

TEST(ForkedAgent, StartsAsTheExecdPmdWouldAndEndsWithItsResult) {
  // The launcher's state the child must not inherit: a handler, an ignored signal, a blocked
  // one, a descriptor without close-on-exec.
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  struct sigaction old_int {};
  ASSERT_EQ(::sigaction(SIGINT, &handler, &old_int), 0);
  ASSERT_EQ(::signal(SIGPIPE, SIG_IGN) != SIG_ERR, true);
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, &old_mask);
  const int stray = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(stray, 3);
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  rlimit asked = lim;
  asked.rlim_cur = lim.rlim_cur > 100 ? lim.rlim_cur - 1 : lim.rlim_cur;

  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const auto child = pm::local::fork_agent(&report, {"/x/pmd", "--stdio", "--nonce", "1f"},
                                           {"A=1", "B=2"}, sv[1], asked);
  ::close(sv[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(sv[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(sv[0]);
  const auto end = pm::sys::wait_exit(child.pidfd);
  ::close(child.pidfd);
  ::close(stray);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::signal(SIGPIPE, SIG_DFL);

  ASSERT_TRUE(end.status.has_value());
  EXPECT_EQ(*end.status, pm::exit_status::exited(7));
  EXPECT_EQ(got,
            "argc=4\nargv=/x/pmd\nargv=--stdio\nargv=--nonce\nargv=1f\ncomm=pmd\nown_group=1\n"
            "fds=0 1 2 \nsigint_default=1\nsigpipe_default=1\nsigterm_blocked=0\nvars=2\nA=1\n"
            "HOME=(unset)\nnofile=" +
                std::to_string(asked.rlim_cur) + "\n");
}

}  // namespace
