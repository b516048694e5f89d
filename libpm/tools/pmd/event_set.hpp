// pmd's one epoll set: every descriptor its loop waits on, each under a tag whose top byte says
// which part of pmd it belongs to (docs/agent.md, "Lifecycle" 2).
#pragma once

#include <sys/epoll.h>

#include <cerrno>
#include <cstdint>

#include "link/socket.hpp"

namespace pmd {

class event_set {
 public:
  event_set() : fd_(::epoll_create1(EPOLL_CLOEXEC)) {}
  int fd() const noexcept { return fd_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(fd_); }
  /// Watches `fd` for `events` under `tag`, or changes what it is watched for.
  void watch(int fd, std::uint32_t events, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (::epoll_ctl(fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
      ::epoll_ctl(fd_.get(), EPOLL_CTL_MOD, fd, &ev);
    }
  }
  void unwatch(int fd) { ::epoll_ctl(fd_.get(), EPOLL_CTL_DEL, fd, nullptr); }

 private:
  pm::link::owned_fd fd_;
};

}  // namespace pmd
