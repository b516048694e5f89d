// libpmix 4.2.2 listens on TCP 127.0.0.1 and believes the uid a client claims: right after
// PMIx_server_init pmd puts a Unix socket in its private directory in that listener's place, so
// only pmd's relay (which asks the kernel who connects) reaches the server (docs/pmix.md, "Who
// reaches the server, and nothing holds it"; docs/security.md).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pm::agent::pmix {

/// A listening TCP socket of this process.
struct inet_listener {
  int fd = -1;
  ino_t inode = 0;
  std::uint16_t port = 0;
};

/// This process's listening TCP sockets (taken before PMIx_server_init, to tell the new one).
std::vector<inet_listener> inet_listeners();

/// Replaces the one TCP listener that is not in `before` by a Unix socket listening at `path`,
/// and cuts off the connections accepted on the TCP port meanwhile (their descriptors now read
/// end-of-stream; the other ends go to `decoys`, which the caller keeps open). Returns how many
/// were cut off; throws pm::error if the listener cannot be told or replaced, or libpmix takes no
/// connection on the new socket within answer_bound.
std::size_t replace_listener(const std::vector<inet_listener>& before, const std::string& path,
                             std::vector<int>& decoys);

/// The rendezvous files PMIx wrote for tools in `dir` name `address` (pmd's relay) instead.
void point_rendezvous_files(const std::string& dir, const std::string& address,
                            std::int64_t agent_pid = 0);

}  // namespace pm::agent::pmix
