// A real Slurm cluster on fake hosts for tests: tests/multihost/slurm.sh over a multihost_fixture.
//
// The constructor brings up N fake hosts (hosts.sh) and Slurm on them (munged, slurmctld on node1,
// a slurmd per host); the destructor stops Slurm, then the hosts, also when the test failed.
//
//   if (!pm::test::slurm_cluster::available()) GTEST_SKIP() << ...unavailable_reason();
//   pm::test::slurm_cluster c(3);
//   auto r = pm::test::run_command(c.on_node("node1", {"salloc", "-N3", "hostname"}));
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/command.hpp"
#include "support/multihost.hpp"

namespace pm::test {

class slurm_cluster {
 public:
  static std::string script() { return std::string(PM_SOURCE_DIR) + "/tests/multihost/slurm.sh"; }

  /// Why this machine cannot run the cluster, or "".
  static const std::string& unavailable_reason() {
    static const std::string reason = [] {
      if (!multihost_fixture::available()) return multihost_fixture::unavailable_reason();
      auto r = run_command({"/bin/bash", script(), "probe"}, std::chrono::seconds(20));
      if (r.exit_code == 0) return std::string();
      auto text = r.err.empty() ? std::string("slurm.sh probe failed") : r.err;
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text;
    }();
    return reason;
  }
  static bool available() { return unavailable_reason().empty(); }

  explicit slurm_cluster(int nodes = 3) : hosts_(nodes) {
    auto r = run_command({"/bin/bash", script(), "up", "--state", hosts_.state_dir()},
                         std::chrono::seconds(60));
    if (r.exit_code != 0) {
      run_command({"/bin/bash", script(), "down", "--state", hosts_.state_dir()});
      throw std::runtime_error("slurm.sh up failed: " + r.err);
    }
  }
  ~slurm_cluster() {
    auto r = run_command({"/bin/bash", script(), "down", "--state", hosts_.state_dir()},
                         std::chrono::seconds(60));
    if (r.exit_code != 0) ADD_FAILURE() << "slurm.sh down failed: " << r.err;
  }
  slurm_cluster(const slurm_cluster&) = delete;
  slurm_cluster& operator=(const slurm_cluster&) = delete;

  multihost_fixture& hosts() { return hosts_; }
  std::string conf() const { return hosts_.state_dir() + "/slurm/slurm.conf"; }

  /// argv running `argv` on `node` (its namespaces) with SLURM_CONF set: a Slurm client there.
  std::vector<std::string> on_node(const std::string& node,
                                   const std::vector<std::string>& argv) const {
    std::vector<std::string> out = {"/bin/bash",        script(), "exec", "--state",
                                    hosts_.state_dir(), node,     "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  /// The ids of the jobs Slurm knows (squeue), one per entry.
  std::vector<std::string> jobs() const {
    auto r = run_command(on_node("node1", {"squeue", "-h", "-o", "%i"}));
    std::vector<std::string> out;
    std::istringstream in(r.out);
    for (std::string id; in >> id;) out.push_back(id);
    return out;
  }

 private:
  multihost_fixture hosts_;
};

/// A command running in the background (own process group) with its stdout and stderr in files;
/// killed with its group if still running at destruction.
class background_command {
 public:
  background_command(const std::vector<std::string>& argv, std::string out_file,
                     std::string err_file)
      : out_(std::move(out_file)), err_(std::move(err_file)) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, &attr, args.data(), environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  ~background_command() {
    if (pid_ > 0 && !exited_) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  background_command(const background_command&) = delete;
  background_command& operator=(const background_command&) = delete;

  /// Waits up to `limit` for the exit; its code (128+signal for a signal), or -1 if still running.
  int wait(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!exited_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return code_;
  }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  pid_t pid_ = 0;
  bool exited_ = false;
  int code_ = -1;
  std::string out_, err_;
};

}  // namespace pm::test
