// Running a command in a test: capture stdout, stderr and how it ended, with a deadline after
// which its whole process group is killed (tests never leave a process behind).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace pm::test {

/// Every process this test program started with run_command or background, so that a check for
/// leftovers can tell its own jobs' from those of tests running beside it (ctest -j).
inline std::vector<pid_t>& started_pids() {
  static std::vector<pid_t> pids;
  return pids;
}

struct command_result {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it
  bool timed_out = false;
  std::string out, err;
  pid_t pid = 0;
};

/// Runs argv (argv[0] a path) in its own process group with `input` on stdin.
inline command_result run_command(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds deadline = std::chrono::seconds(30),
                                  const std::string& input = "",
                                  const std::vector<std::string>* env = nullptr) {
  command_result result;
  int out[2], err[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) {
    result.err = "pipe failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (env != nullptr) {
    for (const auto& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(),
                             env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    result.err = "spawn failed";
    return result;
  }
  result.pid = pid;
  started_pids().push_back(pid);
  // Stdin is fed beside the reading, a piece whenever the pipe takes one: a command that stops
  // reading its input cannot hold the test past its deadline.
  std::size_t fed = 0;
  if (input.empty()) {
    close(in[1]);
    in[1] = -1;
  } else {
    signal(SIGPIPE, SIG_IGN);
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 3, static_cast<int>(left.count())) <= 0) continue;
    if (fds[2].fd >= 0 && fds[2].revents != 0) {
      const ssize_t n = write(fds[2].fd, input.data() + fed, input.size() - fed);
      if (n > 0) fed += static_cast<std::size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || fed == input.size()) {
        close(fds[2].fd);  // all of it, or the command closed its stdin
        fds[2].fd = -1;
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > until) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(1000);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  kill(-pid, SIGKILL);  // whatever it left in its group
  return result;
}

inline std::string pmrun_path() {
  return std::string(PM_BINARY_DIR) + "/bin/pmrun";
}
inline std::string payload_path() {
  return std::string(PM_BINARY_DIR) + "/tests/pm_payload";
}

}  // namespace pm::test
