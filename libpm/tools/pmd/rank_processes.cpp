#include "rank_processes.hpp"

#include <signal.h>
#include <sys/epoll.h>

#include <algorithm>
#include <vector>

#include "agent/children.hpp"
#include "sys/pidfd.hpp"

namespace pmd {

void rank_processes::add(std::uint32_t rank, pid_t pid, pm::link::owned_fd pidfd) {
  leader& r = ranks_[rank];
  if (r.pid > 0) rank_of_pid_.erase(r.pid);
  r.pid = pid;
  rank_of_pid_[pid] = rank;
  r.pidfd = std::move(pidfd);
  events_.watch(r.pidfd.get(), EPOLLIN, tag_pidfd | rank);
}

std::optional<pm::exit_status> rank_processes::exit_of(std::uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.pidfd) return std::nullopt;
  // keep_zombie: the leader stays a zombie, so its pid (its group's id) cannot be reused.
  const auto end = pm::sys::check_exit(it->second.pidfd.get(), pm::sys::reap_mode::keep_zombie);
  if (!end.ended) return std::nullopt;
  events_.unwatch(it->second.pidfd.get());
  it->second.pidfd.reset();
  return end.status;  // none: reaped already (by the sweep), nothing more to say
}

void rank_processes::reap_orphans(const kept& kept_elsewhere) {
  std::vector<pid_t> orphans = pm::agent::list_children();
  std::erase_if(orphans, [&](pid_t pid) {
    if (kept_elsewhere && kept_elsewhere(pid)) return true;  // reaped through their pidfds
    return rank_of_pid_.contains(pid);  // rank leaders stay zombies until the sweep
  });
  pm::agent::reap_ended(orphans);
}

// A child that leads a group (a rank, or a descendant that called setsid) takes its group along;
// its pid cannot name another group while it is our child, alive or zombie.
std::size_t rank_processes::sweep(const kept& kept_elsewhere) {
  if (kept_elsewhere) {
    // Child agents' ssh end by themselves once their stdin is closed (their agents clear their
    // own ranks first); they still count as children left, so the sweep comes back.
    std::vector<pid_t> others = pm::agent::list_children();
    std::erase_if(others, [&](pid_t pid) { return kept_elsewhere(pid); });
    for (const pid_t pid : others) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    pm::agent::reap_ended(others);
  } else {
    for (const pid_t pid : pm::agent::list_children()) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    pm::agent::reap_all_ended();
  }
  for (auto& [rank, r] : ranks_) r.pidfd.reset();  // their exits are of no interest any more
  return pm::agent::list_children().size();
}

std::size_t rank_processes::sweep_ranks(
    const kept& kept_elsewhere, std::vector<std::pair<std::uint32_t, pm::exit_status>>& exits) {
  const auto others = [&] {
    std::vector<pid_t> pids = pm::agent::list_children();
    if (kept_elsewhere) std::erase_if(pids, [&](pid_t pid) { return kept_elsewhere(pid); });
    return pids;
  };
  std::vector<pid_t> children = others();
  for (const pid_t pid : children) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  // A leader is reaped only once its end was said (the launcher hears every rank's end).
  const std::size_t first = exits.size();
  for (auto& [rank, r] : ranks_) {
    if (!r.pidfd) continue;
    const auto end = pm::sys::check_exit(r.pidfd.get(), pm::sys::reap_mode::keep_zombie);
    if (!end.ended) continue;
    events_.unwatch(r.pidfd.get());
    r.pidfd.reset();
    if (end.status) exits.emplace_back(rank, *end.status);
  }
  std::sort(exits.begin() + static_cast<std::ptrdiff_t>(first), exits.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::erase_if(children, [&](pid_t pid) {
    const auto it = rank_of_pid_.find(pid);
    return it != rank_of_pid_.end() && static_cast<bool>(ranks_.at(it->second).pidfd);
  });
  pm::agent::reap_ended(children);
  return others().size();
}

void rank_processes::forget(std::uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  if (it->second.pidfd) events_.unwatch(it->second.pidfd.get());
  if (it->second.pid > 0) {
    pm::agent::reap_ended({it->second.pid});
    rank_of_pid_.erase(it->second.pid);
  }
  ranks_.erase(it);
}

void rank_processes::forget() {
  for (auto& [rank, r] : ranks_) {
    if (r.pidfd) events_.unwatch(r.pidfd.get());
  }
  ranks_.clear();
  rank_of_pid_.clear();
}

}  // namespace pmd
