// Who is at the other end of a TCP connection on this host, as the kernel knows it (sock_diag).
//
// pmd's PMIx port listens on 127.0.0.1, which every local user reaches; PMIx 4.2.2 believes the
// uid a TCP client writes into its handshake. SO_PEERCRED does not work on TCP sockets, but the
// kernel's socket diagnostics do: an exact lookup (NETLINK_SOCK_DIAG, inet_diag_req_v2 with the
// peer's 4-tuple) returns the peer socket with its owner's uid. Unprivileged processes may ask.
//
// Only a live socket counts: the lookup refuses a peer whose socket is closed already (an
// orphaned or time-wait socket reports no inode, and a time-wait one reports uid 0, which must
// never pass for root). So a client that connects, writes and hangs up at once is refused: an
// honest PMIx client keeps its socket open until it has its answer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace pm::agent {

/// The owner of a connected socket's peer, or why it is not known.
struct peer_owner {
  std::optional<uid_t> uid;  ///< set when the kernel named a live peer socket
  std::string why;           ///< otherwise: what failed ("the peer's socket is closed", ...)
  bool closed = false;       ///< the peer's socket is closed: nobody is there to refuse
};

/// Looks up the owner of the peer of `fd` (a connected AF_INET or AF_INET6 TCP socket whose peer
/// is on this host, e.g. one accepted on a loopback listener). `diag_fd`: a NETLINK_SOCK_DIAG
/// socket to reuse (open_sock_diag()), or -1 to open one for this call. Never throws.
peer_owner tcp_peer_owner(int fd, int diag_fd = -1) noexcept;

/// A NETLINK_SOCK_DIAG socket (close-on-exec), or -1 with errno set.
int open_sock_diag() noexcept;

}  // namespace pm::agent
