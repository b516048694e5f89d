// Watching processes in a test: alive or gone, pids a payload printed, and a command run in the
// background whose stdout is read as it comes. Written once for every test.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <vector>
#include "command.hpp"

#include <gtest/gtest.h>

namespace pm::test {

/// Alive = exists and is not a zombie (only its parent could still reap a zombie).
inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto close = text.rfind(')');
  return close != std::string::npos && text.size() > close + 2 && text[close + 2] != 'Z';
}

/// True once none of `pids` is alive, checked every 5 ms until `within` has passed.
inline bool all_gone(const std::vector<pid_t>& pids,
                     std::chrono::milliseconds within = std::chrono::seconds(3)) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    bool any = false;
    for (auto p : pids) any = any || alive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Every pid printed as "<word> PID" (pm_payload's grandchild/daemon/pid lines) in `out`.
inline std::vector<pid_t> printed_pids(const std::string& out, const std::string& word) {
  std::vector<pid_t> pids;
  std::regex re(word + R"( (\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1])));
  }
  return pids;
}

/// A command started in the background in its own process group, its stdout on a pipe; the
/// group is killed and the command reaped when the object goes, whatever the test did.
struct background {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  explicit background(const std::vector<std::string>& argv) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      dup2(p[1], 1);
      close(p[0]);
      started_pids().push_back(pid);
      close(p[1]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(p[1]);
    out = p[0];
  }
  background(const background&) = delete;
  background& operator=(const background&) = delete;
  /// Reads stdout until `count` lines arrived (or 10 s).
  void wait_lines(std::size_t count) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    char buf[4096];
    while (static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) < count &&
           std::chrono::steady_clock::now() < until) {
      pollfd pfd{out, POLLIN, 0};
      if (poll(&pfd, 1, 100) == 1) {
        auto n = read(out, buf, sizeof buf);
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  /// Its wait status once it ended (within `seconds`; else it is killed and -1 returned).
  int wait_status(int seconds = 10) {
    int status = 0;
    for (int i = 0; i < seconds * 100; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    pid = -1;
    return -1;
  }
  ~background() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
  }
};

}  // namespace pm::test
