// The rank leaders pmd started, as it holds them: one pidfd each until its exit was seen with
// WNOWAIT (the leader stays a zombie, so its pid, its group's id, is never reused while the job
// runs), the orphans reparented to pmd reaped as they end, and the final sweep that kills and
// reaps every child (docs/agent.md, "Lifecycle" 5 and 6). Driven by the owner's epoll set.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "event_set.hpp"
#include "link/socket.hpp"
#include "pm/exit_status.hpp"

namespace pmd {

class rank_processes {
 public:
  /// Epoll tag: the kind in the top byte, the rank below.
  static constexpr std::uint64_t tag_pidfd = 4ull << 56;
  /// Children pmd holds otherwise (the child agents' ssh, reaped through their own pidfds).
  using kept = std::function<bool(pid_t)>;

  explicit rank_processes(event_set& events) : events_(events) {}

  /// A rank leader started: its pidfd is watched from now on.
  void add(std::uint32_t rank, pid_t pid, pm::link::owned_fd pidfd);
  /// The rank's pidfd became readable: its exit, seen without reaping it (nullopt: not yet, or
  /// reaped already by a sweep).
  std::optional<pm::exit_status> exit_of(std::uint32_t rank);
  /// Reaps the children that ended and are neither rank leaders nor `kept_elsewhere`.
  void reap_orphans(const kept& kept_elsewhere);
  /// SIGKILL to every child but `kept_elsewhere` and the group each leads, reaps what ended
  /// (rank leaders too: their groups got SIGKILL before); returns how many children are left.
  std::size_t sweep(const kept& kept_elsewhere);
  /// A restart's sweep (pm::agent::sweep_ranks): SIGKILL to every child but `kept_elsewhere` and
  /// the group each leads; the exits of rank leaders not reported yet are added to `exits` (by
  /// rank), seen without reaping; then reaps every child that ended but a leader whose exit is
  /// still unknown. Returns how many children are left besides `kept_elsewhere`.
  std::size_t sweep_ranks(const kept& kept_elsewhere,
                          std::vector<std::pair<std::uint32_t, pm::exit_status>>& exits);
  /// A restart is complete: every leader was reaped; the same rank numbers come again.
  void forget();
  /// --enable-recovery (pm::agent::forget_rank): the rank's leader ended (its group got SIGKILL
  /// just before); it is reaped and forgotten, and the rank number may come again.
  void forget(std::uint32_t rank);

 private:
  struct leader {
    pid_t pid = 0;
    pm::link::owned_fd pidfd;  // closed once the exit was seen (the leader stays a zombie)
  };
  event_set& events_;
  std::unordered_map<std::uint32_t, leader> ranks_;
  // Each leader's pid, for the orphan reaping that every SIGCHLD asks for: a restart's abort of
  // 127 ranks asked it 127 times, each a scan of every rank per child (a quadratic 5 ms).
  std::unordered_map<pid_t, std::uint32_t> rank_of_pid_;
};

}  // namespace pmd
