#include "agent/peer_owner.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace pm::agent {

int open_sock_diag() noexcept {
  return ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

peer_owner tcp_peer_owner(int fd, int diag_fd) noexcept {
  peer_owner out;
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof local, plen = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
    out.why = std::string("the connection is gone: ") + std::strerror(errno);
    return out;
  }
  if (local.ss_family != peer.ss_family ||
      (local.ss_family != AF_INET && local.ss_family != AF_INET6)) {
    out.why = "not a TCP/IP connection";
    return out;
  }

  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } request{};
  static std::atomic<std::uint32_t> sequence{1};
  const std::uint32_t seq = sequence.fetch_add(1);
  request.nlh.nlmsg_len = sizeof request;
  request.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.nlh.nlmsg_flags = NLM_F_REQUEST;  // an exact lookup, not a dump
  request.nlh.nlmsg_seq = seq;
  request.req.sdiag_family = local.ss_family;
  request.req.sdiag_protocol = IPPROTO_TCP;
  request.req.idiag_states = ~0u;
  // The PEER's socket: its own (source) side is the peer address, its destination ours.
  inet_diag_sockid& id = request.req.id;
  if (local.ss_family == AF_INET) {
    const auto& l = reinterpret_cast<const sockaddr_in&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
    id.idiag_sport = p.sin_port;
    id.idiag_dport = l.sin_port;
    std::memcpy(id.idiag_src, &p.sin_addr, sizeof p.sin_addr);
    std::memcpy(id.idiag_dst, &l.sin_addr, sizeof l.sin_addr);
  } else {
    const auto& l = reinterpret_cast<const sockaddr_in6&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
    id.idiag_sport = p.sin6_port;
    id.idiag_dport = l.sin6_port;
    std::memcpy(id.idiag_src, &p.sin6_addr, sizeof p.sin6_addr);
    std::memcpy(id.idiag_dst, &l.sin6_addr, sizeof l.sin6_addr);
  }
  id.idiag_if = 0;
  id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  int own = -1;
  if (diag_fd < 0) {
    own = open_sock_diag();
    if (own < 0) {
      out.why = std::string("cannot open a sock_diag socket: ") + std::strerror(errno);
      return out;
    }
    diag_fd = own;
  }
  struct closer {
    int fd;
    ~closer() {
      if (fd >= 0) ::close(fd);
    }
  } guard{own};

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent;
  do {
    sent = ::sendto(diag_fd, &request, sizeof request, 0, reinterpret_cast<sockaddr*>(&kernel),
                    sizeof kernel);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof request)) {
    out.why = std::string("sock_diag: ") + std::strerror(errno);
    return out;
  }
  // The kernel answers an exact lookup while handling the request: the reply is queued before
  // sendto returns, so reading never waits. Replies of other sequence numbers (none, unless a
  // reader gave up on one) are skipped.
  alignas(nlmsghdr) char buf[8192];
  for (int round = 0; round < 8; ++round) {
    const ssize_t n = ::recv(diag_fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      out.why = std::string("sock_diag gave no answer: ") +
                (n < 0 ? std::strerror(errno) : "empty reply");
      return out;
    }
    // Netlink messages, each 4-byte aligned (NLMSG_NEXT, without its casts).
    const auto total = static_cast<std::size_t>(n);
    constexpr std::size_t header = (sizeof(nlmsghdr) + 3) & ~std::size_t{3};
    for (std::size_t off = 0; total - off >= sizeof(nlmsghdr);) {
      nlmsghdr h{};
      std::memcpy(&h, buf + off, sizeof h);
      if (h.nlmsg_len < sizeof h || h.nlmsg_len > total - off) break;
      const char* data = buf + off + header;
      const std::size_t size = h.nlmsg_len - std::min<std::size_t>(h.nlmsg_len, header);
      off += (h.nlmsg_len + 3) & ~std::size_t{3};
      if (h.nlmsg_seq != seq) continue;
      if (h.nlmsg_type == NLMSG_ERROR) {
        nlmsgerr e{};
        std::memcpy(&e, data, std::min(size, sizeof e));
        out.closed = e.error == -ENOENT;
        out.why = out.closed ? std::string("the peer's socket is closed")
                             : std::string("sock_diag: ") + std::strerror(-e.error);
        return out;
      }
      if (h.nlmsg_type != SOCK_DIAG_BY_FAMILY || size < sizeof(inet_diag_msg)) continue;
      inet_diag_msg m{};
      std::memcpy(&m, data, sizeof m);
      if (m.id.idiag_sport != id.idiag_sport || m.id.idiag_dport != id.idiag_dport) {
        out.why = "sock_diag named another socket";
        return out;
      }
      // A closed peer: a time-wait socket (uid 0, no inode) or an orphan (no inode). Neither
      // owner may be trusted, and no honest client has closed before it got its answer.
      if (m.idiag_inode == 0 || m.idiag_state == TCP_TIME_WAIT) {
        out.closed = true;
        out.why = "the peer's socket is closed";
        return out;
      }
      out.uid = m.idiag_uid;
      return out;
    }
  }
  out.why = "sock_diag gave no answer";
  return out;
}

}  // namespace pm::agent
