// Another local user, for the tests in which another user is the attacker: a user of its own per
// test (a random name, so that `ctest -j` and a crashed run's leftovers never collide), created
// with useradd and removed with userdel when the test ends, after every process it still runs
// (found by its uid, which no one but this test uses) is killed.
#pragma once

#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "command.hpp"

namespace pm::test {

class other_user {
 public:
  /// A new user, or nullopt with `why` set (not root, no useradd): the caller skips.
  static std::optional<other_user> create(std::string& why) {
    if (::geteuid() != 0) {
      why = "creating a second user needs root";
      return std::nullopt;
    }
    if (::access("/usr/sbin/useradd", X_OK) != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
      why = "useradd or setpriv is missing";
      return std::nullopt;
    }
    std::random_device rd;
    char name[16];
    std::snprintf(name, sizeof name, "pmt%08x", static_cast<unsigned>(rd()));
    // useradd locks /etc/passwd; tests running beside each other take turns.
    for (int attempt = 0; attempt < 50; ++attempt) {
      const auto r = run_command(
          {"/usr/sbin/useradd", "-M", "-N", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name});
      if (r.exit_code == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const passwd* pw = ::getpwnam(name);
    if (pw == nullptr) {
      why = std::string("useradd ") + name + " failed";
      return std::nullopt;
    }
    return other_user(name, pw->pw_uid, pw->pw_gid);
  }

  other_user(other_user&& o) noexcept : name_(std::move(o.name_)), uid_(o.uid_), gid_(o.gid_) {
    o.name_.clear();
  }
  other_user& operator=(other_user&&) = delete;
  other_user(const other_user&) = delete;

  ~other_user() {
    if (name_.empty()) return;
    kill_processes();
    for (int attempt = 0; attempt < 50; ++attempt) {
      if (run_command({"/usr/sbin/userdel", name_}).exit_code == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill_processes();
    }
  }

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

  /// `argv` run as this user, with no groups and a small clean environment (plus `env`).
  std::vector<std::string> as(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env = {}) const {
    std::vector<std::string> out = {"/usr/bin/setpriv",
                                    "--reuid=" + std::to_string(uid_),
                                    "--regid=" + std::to_string(gid_),
                                    "--clear-groups",
                                    "--",
                                    "/usr/bin/env",
                                    "-i",
                                    "HOME=/nonexistent",
                                    "PATH=/usr/local/bin:/usr/bin:/bin"};
    out.insert(out.end(), env.begin(), env.end());
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  /// Makes `path` (a file or directory the test created) this user's.
  bool give(const std::string& path) const { return ::chown(path.c_str(), uid_, gid_) == 0; }

  /// Every process that runs as this user: they are all this test's.
  std::vector<pid_t> processes() const {
    std::vector<pid_t> pids;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return pids;
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      struct stat st {};
      if (::stat((std::string("/proc/") + e->d_name).c_str(), &st) == 0 && st.st_uid == uid_) {
        pids.push_back(static_cast<pid_t>(pid));
      }
    }
    ::closedir(d);
    return pids;
  }

 private:
  other_user(std::string name, uid_t uid, gid_t gid)
      : name_(std::move(name)), uid_(uid), gid_(gid) {}

  void kill_processes() const {
    for (const pid_t pid : processes()) ::kill(pid, SIGKILL);
  }

  std::string name_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace pm::test

/// In a test: a second user named `var` (an other_user&) for the rest of it, or a skip (not root,
/// no useradd).
#define PM_OTHER_USER(var)                                   \
  std::string why_##var;                                     \
  auto var##_made = pm::test::other_user::create(why_##var); \
  if (!var##_made) GTEST_SKIP() << why_##var;                \
  const pm::test::other_user& var = *var##_made
