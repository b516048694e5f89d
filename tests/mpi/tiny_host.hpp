// A tiny one-host pmd for the PMIx tests and the launch benchmark: spawns a job's local ranks
// with the environment the embedded server gives them, and runs one poll loop over the server's
// event fd, each rank's pidfd and each rank's output pipe (stdout and stderr merged).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"

extern char** environ;

namespace pm::test {

namespace px = pm::agent::pmix;

struct rank_process {
  std::string nspace;
  std::uint32_t rank = 0;
  pid_t pid = -1;
  int pidfd = -1;
  int out = -1;      // read end of stdout+stderr
  std::string text;  // everything it wrote
  bool exited = false;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
};

/// "NAME=value" lists: later entries replace earlier ones of the same name.
inline std::vector<std::string> merge_env(std::vector<std::string> base,
                                          const std::vector<std::string>& add) {
  auto name_of = [](std::string_view v) { return v.substr(0, v.find('=')); };
  for (const auto& a : add) {
    std::erase_if(base, [&](const std::string& b) { return name_of(b) == name_of(a); });
    base.push_back(a);
  }
  return base;
}

/// This process's environment without PMIx or Open MPI identity it may have inherited.
inline std::vector<std::string> own_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("PMIX_") || v.starts_with("OMPI_COMM_WORLD") || v.starts_with("PMI_")) {
      continue;
    }
    env.emplace_back(v);
  }
  return env;
}

class tiny_host {
 public:
  explicit tiny_host(px::server& s) : server_(s) {}
  tiny_host(const tiny_host&) = delete;
  tiny_host& operator=(const tiny_host&) = delete;
  ~tiny_host() {
    kill_all(SIGKILL);
    for (auto& r : ranks_) {
      if (!r.exited && r.pidfd >= 0) pm::sys::wait_exit(r.pidfd);
      close_fd(r.pidfd);
      close_fd(r.out);
    }
  }

  /// Starts every rank of `job` on this node: env = `base_env`, then the server's rank_env.
  void spawn(const px::job_info& job, const std::vector<std::string>& argv,
             const std::vector<std::string>& base_env) {
    for (std::uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      if (job.ranks[rank].node == job.node_index) spawn_rank(job, rank, argv, base_env);
    }
  }

  /// Starts one local rank of `job` (in `wdir`, "" ours).
  void spawn_rank(const px::job_info& job, std::uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& base_env, const std::string& wdir = {}) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pm::sys::spawn_request req;
    req.path = argv.at(0);
    req.argv = argv;
    req.env = merge_env(base_env, server_.rank_env(job.nspace, rank));
    req.wdir = wdir;
    req.stdout_fd = fds[1];
    req.stderr_fd = fds[1];
    rank_process r;
    r.nspace = job.nspace;
    r.rank = rank;
    r.out = fds[0];
    try {
      const auto p = pm::sys::spawn(req);
      r.pid = p.pid;
      r.pidfd = p.pidfd;
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw;
    }
    ::close(fds[1]);
    ranks_.push_back(r);
  }

  // ---- a one-host pmd's spawn, publish/lookup and connect ----

  /// The environment spawned jobs' ranks start from (then the app's, then rank_env), and the
  /// name of this host (the server's).
  std::vector<std::string> child_env;
  std::string hostname;

  /// PMIx_Spawn: one node, the apps' ranks in order; registered before the answer.
  void spawn_job(px::spawn_request req) {
    px::job_info job;
    job.nspace = req.requester.nspace + ".s" + std::to_string(spawned_.size() + 1);
    job.node_names = {hostname};
    job.spawned = true;
    job.parent = req.requester;
    for (std::uint32_t a = 0; a < req.apps.size(); ++a) {
      for (std::uint32_t i = 0; i < std::max(req.apps[a].max_procs, 1u); ++i) {
        px::rank_info info;
        info.app = a;
        info.local_rank = static_cast<std::uint16_t>(job.ranks.size());
        info.node_rank = info.local_rank;
        job.ranks.push_back(info);
      }
    }
    job.universe_size = static_cast<std::uint32_t>(job.ranks.size());
    try {
      server_.register_job(job);
    } catch (...) {
      req.done(px::status::error);
      return;
    }
    spawned_.push_back(job.nspace);
    for (std::uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      const px::spawn_app& app = req.apps[job.ranks[rank].app];
      spawn_rank(job, rank, app.argv, merge_env(child_env, app.env), app.wdir);
    }
    req.done(px::status::success, job.nspace);
  }
  /// The namespaces spawn_job registered (the test deregisters them).
  const std::vector<std::string>& spawned() const { return spawned_; }

  void publish(px::publish_request req) {
    for (auto& v : req.values) published_[v.key] = {req.publisher, std::move(v.value)};
    req.done(px::status::success);
    answer_waiting();
  }
  /// Without wait: not_found unless every key is there. With it: held until they are.
  void lookup(px::lookup_request req) {
    if (!all_published(req.keys) && req.wait) {
      waiting_.push_back(std::move(req));
      return;
    }
    answer(req);
  }
  void unpublish(px::unpublish_request req) {
    for (const auto& k : req.keys) published_.erase(k);
    req.done(px::status::success);
  }
  std::size_t waiting_lookups() const { return waiting_.size(); }

  /// Polls until every rank exited and closed its output, or the deadline passed (then false).
  bool run(std::chrono::milliseconds limit) {
    return run_until([] { return false; }, limit);
  }
  /// Likewise, but stops early (true) once `enough` says so.
  template <class Pred>
  bool run_until(Pred enough, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!all_done()) {
      if (enough()) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      std::vector<pollfd> fds;
      fds.push_back({server_.event_fd(), POLLIN, 0});
      for (auto& r : ranks_) {
        if (r.pidfd >= 0) fds.push_back({r.pidfd, POLLIN, 0});
        if (r.out >= 0) fds.push_back({r.out, POLLIN, 0});
      }
      const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
      if (n < 0 && errno != EINTR) return false;
      if ((fds[0].revents & POLLIN) != 0) server_.run_pending();
      for (auto& r : ranks_) {
        read_output(r);
        reap(r);
      }
    }
    server_.run_pending();  // a last look: e.g. client_finalized of the last rank
    return true;
  }

  /// SIGTERM/SIGKILL to each running rank's process group.
  void kill_all(int signo) {
    for (auto& r : ranks_) {
      if (!r.exited && r.pid > 0) ::kill(-r.pid, signo);
    }
  }
  void kill_rank(std::uint32_t rank, int signo) {
    for (auto& r : ranks_) {
      if (r.rank == rank && !r.exited) ::kill(-r.pid, signo);
    }
  }

  const std::vector<rank_process>& ranks() const { return ranks_; }
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    for (const auto& r : ranks_) out.push_back(r.pid);
    return out;
  }
  /// Every rank's output, in rank order.
  std::string all_output() const {
    std::string s;
    for (const auto& r : ranks_) s += r.text;
    return s;
  }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool all_done() const {
    for (const auto& r : ranks_) {
      if (!r.exited || r.out >= 0) return false;
    }
    return true;
  }
  void read_output(rank_process& r) {
    if (r.out < 0) return;
    pollfd p{r.out, POLLIN, 0};
    while (::poll(&p, 1, 0) > 0) {
      char buf[4096];
      const ssize_t n = ::read(r.out, buf, sizeof buf);
      if (n > 0) {
        r.text.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      close_fd(r.out);  // EOF or error
      return;
    }
  }
  void reap(rank_process& r) {
    if (r.exited || r.pidfd < 0) return;
    const auto end = pm::sys::check_exit(r.pidfd);
    if (!end.ended) return;
    r.exited = true;
    if (end.status && end.status->is_signal()) {
      r.signal = end.status->signal();
    } else if (end.status) {
      r.exit_code = end.status->code();
    }
    close_fd(r.pidfd);
  }

  bool all_published(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return published_.contains(k); });
  }
  void answer(px::lookup_request& req) {
    if (!all_published(req.keys)) {
      req.done(px::status::not_found);
      return;
    }
    std::vector<px::found_value> found;
    for (const auto& k : req.keys) {
      const auto& [who, bytes] = published_.at(k);
      found.push_back({k, who, bytes});
    }
    req.done(px::status::success, std::move(found));
  }
  void answer_waiting() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (all_published(it->keys)) {
        answer(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }

  px::server& server_;
  std::vector<rank_process> ranks_;
  std::vector<std::string> spawned_;
  std::map<std::string, std::pair<px::proc, std::vector<char>>> published_;
  std::vector<px::lookup_request> waiting_;
};

/// A one-node job of `n` ranks of one app.
inline px::job_info one_node_job(const std::string& nspace, std::uint32_t n,
                                 const std::string& hostname) {
  px::job_info job;
  job.nspace = nspace;
  job.universe_size = n;
  job.node_index = 0;
  job.node_names = {hostname};
  for (std::uint32_t r = 0; r < n; ++r) {
    px::rank_info info;
    info.local_rank = static_cast<std::uint16_t>(r);
    info.node_rank = static_cast<std::uint16_t>(r);
    job.ranks.push_back(info);
  }
  return job;
}

}  // namespace pm::test
