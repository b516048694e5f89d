#include "transport/local/forked_agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "pm/error.hpp"
#include "sys/pidfd.hpp"

extern char** environ;

// LeakSanitizer's check, when the program has it (sanitizer builds): the child ends with _exit,
// which skips the check an exec'd pmd would get at its exit.
extern "C" void __lsan_do_leak_check() __attribute__((weak));

namespace pm::local {

namespace {

// The child's set-up, then the agent. Never returns.
[[noreturn]] void become_agent(early_agent::agent_entry entry, std::vector<char*>& argv,
                               std::vector<char*>& envp, int link_fd,
                               const std::optional<rlimit>& nofile) {
  ::setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  // Above the standard three first, so that the dup2s below cannot close it.
  const int link = ::fcntl(link_fd, F_DUPFD, 3);
  if (link < 0 || ::dup2(link, STDIN_FILENO) < 0 || ::dup2(link, STDOUT_FILENO) < 0) _exit(126);
  if (nofile) ::setrlimit(RLIMIT_NOFILE, &*nofile);
  // Every other descriptor: the launcher's are not the agent's.
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 65536; ++fd) ::close(fd);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::environ = envp.data();
  ::prctl(PR_SET_NAME, "pmd", 0, 0, 0);
  const int code = entry(static_cast<int>(argv.size()) - 1, argv.data());
  std::fflush(nullptr);
  if (__lsan_do_leak_check != nullptr) __lsan_do_leak_check();
  // Not exit(): the launcher's atexit handlers and static objects are not the agent's to run.
  _exit(code);
}

}  // namespace

sys::spawned_process fork_agent(early_agent::agent_entry entry,
                                const std::vector<std::string>& argv,
                                const std::vector<std::string>& env, int link_fd,
                                std::optional<rlimit> nofile) {
  // Built before the fork: the child allocates nothing of its own before the agent runs.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Nothing buffered may be written twice, once by each process.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw error(errc::launch, std::string("cannot fork the agent: ") + std::strerror(errno));
  }
  if (pid == 0) become_agent(entry, args, envp, link_fd, nofile);
  const int pidfd = sys::open_pidfd(pid);
  if (pidfd < 0) {
    const int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw error(errc::launch, std::string("pidfd_open: ") + std::strerror(e));
  }
  return {pid, pidfd};
}

}  // namespace pm::local
