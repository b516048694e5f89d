// Byte pumps between connections pmd accepted and a port on 127.0.0.1: how the ranks reach the
// PMIx server that pmd starts only when the first of them connects (pmix_gateway.hpp). The
// server listens on a port it picks at start; the ranks were told pmd's port at exec.
//
// Driven by an epoll set the owner polls: add() registers both descriptors of a pair under
// tags `tag_base | id << 1 | side`, and on_event() takes such a tag. One thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "link/socket.hpp"

namespace pmd {

class tcp_relay {
 public:
  /// `epoll_fd`: the owner's set; `tag_base`: the top bits that mark the relay's tags.
  tcp_relay(int epoll_fd, std::uint64_t tag_base) : epoll_(epoll_fd), base_(tag_base) {}

  /// Relays `accepted` to 127.0.0.1:port. False (and `accepted` closed) if it cannot connect.
  bool add(pm::link::owned_fd accepted, std::uint16_t port, std::string& error);
  /// An epoll event for one of the relay's tags.
  void on_event(std::uint64_t tag, std::uint32_t events);
  bool owns(std::uint64_t tag) const { return (tag & ~mask) == base_; }
  std::size_t size() const { return pairs_.size(); }

  static constexpr std::uint64_t mask = (std::uint64_t{1} << 48) - 1;

 private:
  struct side {
    pm::link::owned_fd fd;
    std::string out;  // bytes for this side, not yet written
    std::uint32_t interest = 0;
    bool registered = false;
  };
  struct pair {
    side s[2];  // 0: the rank, 1: the server
  };
  void update(std::uint64_t id, pair& p);
  bool pump(pair& p, int from);                              // false: the pair is over
  bool drain(side& to);                                      // false: write failed
  bool forward(side& to, const char* bytes, std::size_t n);  // false: write failed

  int epoll_;
  std::uint64_t base_;
  std::uint64_t next_ = 0;
  std::unordered_map<std::uint64_t, pair> pairs_;
};

}  // namespace pmd
