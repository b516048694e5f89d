#include "tcp_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pmd {

namespace {

// Enough for PMIx's messages (job data, fence results) without holding a reader back long.
constexpr std::size_t high_water = std::size_t{1} << 20;
// A queue emptied keeps at most this much capacity.
constexpr std::size_t keep_capacity = 4096;

}  // namespace

bool tcp_relay::add(pm::link::owned_fd accepted, std::uint16_t port, std::string& error) {
  pm::link::owned_fd server(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!server) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Blocking connect to loopback: it completes at once or fails at once.
  if (::connect(server.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    error = "cannot reach the PMIx server on 127.0.0.1:" + std::to_string(port) + ": " +
            std::strerror(errno);
    return false;
  }
  const int one = 1;
  for (const int fd : {accepted.get(), server.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  const std::uint64_t id = next_++;
  pair& p = pairs_[id];
  p.s[0].fd = std::move(accepted);
  p.s[1].fd = std::move(server);
  update(id, p);
  return true;
}

void tcp_relay::update(std::uint64_t id, pair& p) {
  for (int i = 0; i < 2; ++i) {
    side& me = p.s[i];
    const side& other = p.s[1 - i];
    // Read while the other side keeps up; write while something waits.
    const std::uint32_t want =
        (other.out.size() < high_water ? EPOLLIN : 0u) | (me.out.empty() ? 0u : EPOLLOUT);
    if (me.registered && want == me.interest) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = base_ | (id << 1) | static_cast<std::uint64_t>(i);
    ::epoll_ctl(epoll_, me.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, me.fd.get(), &ev);
    me.registered = true;
    me.interest = want;
  }
}

bool tcp_relay::drain(side& to) {
  while (!to.out.empty()) {
    const ssize_t n = ::send(to.fd.get(), to.out.data(), to.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      to.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // Emptied: give its capacity back. A rank's connection is idle nearly all its life, and 128
  // of them each keeping the largest message it ever queued (the job's data) held 5 MB of pmd.
  if (to.out.capacity() > keep_capacity) std::string().swap(to.out);
  return true;
}

// Sends `bytes` straight on when nothing waits before them; queues what the socket did not take.
bool tcp_relay::forward(side& to, const char* bytes, std::size_t n) {
  if (to.out.empty()) {
    while (n > 0) {
      const ssize_t sent = ::send(to.fd.get(), bytes, n, MSG_NOSIGNAL);
      if (sent > 0) {
        bytes += sent;
        n -= static_cast<std::size_t>(sent);
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
  }
  to.out.append(bytes, n);
  return drain(to);
}

bool tcp_relay::pump(pair& p, int from) {
  side& src = p.s[from];
  side& dst = p.s[1 - from];
  char buf[65536];
  while (dst.out.size() < high_water) {
    const ssize_t n = ::recv(src.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      if (!forward(dst, buf, static_cast<std::size_t>(n))) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // End of stream or an error: hand over what is left, then the pair is over (PMIx
    // connections are not half-closed; either end closing ends the conversation).
    drain(dst);
    return false;
  }
  return true;
}

void tcp_relay::on_event(std::uint64_t tag, std::uint32_t events) {
  const std::uint64_t id = (tag & mask) >> 1;
  const int which = static_cast<int>(tag & 1);
  auto it = pairs_.find(id);
  if (it == pairs_.end()) return;
  pair& p = it->second;
  bool alive = true;
  if ((events & EPOLLOUT) != 0) alive = drain(p.s[which]);
  if (alive && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) alive = pump(p, which);
  if (alive && (events & (EPOLLHUP | EPOLLERR)) != 0) {
    drain(p.s[1 - which]);
    alive = false;  // that side is gone for good
  }
  if (!alive) {
    for (auto& s : p.s) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s.fd.get(), nullptr);
    pairs_.erase(it);  // closes both
    return;
  }
  update(id, p);
}

}  // namespace pmd
