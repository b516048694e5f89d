// The first message a PMIx 4.2 client or tool sends its server, as pmd's relay checks it before
// the server sees a byte of it (docs/pmix.md, "Who reaches the server").
//
// libpmix 4.2.2 reads this message with blocking receives on its progress thread
// (ptl_base_connection_hdlr.c): a connection that sends half of it, or nothing, holds the whole
// server (every rank's PMIx_Init on the host waits, and PMIx_server_finalize waits for it). So the
// relay buffers the message whole, within a deadline, checks its layout, and only then connects to
// the server and hands it over in one piece. The layout (ptl_base_fns.c, construct_message):
//
//   header, 16 bytes in the sender's byte order: int32 pindex (-1), uint32 tag (0xffffffff),
//       uint32 nbytes (what follows), uint32 padding
//   payload, nbytes (at most PMIX_MAX_CRED_SIZE, 128 KiB):
//       psec module name, NUL-terminated; uint32 credential length (network order); credential
//       uint8 type: 0 rank, 1/2 legacy tool/launcher, 3/6 tool/launcher that needs a name,
//           4/7 one that named itself, 5/8 one a server started, 9 singleton
//       rank: namespace (NUL-terminated), uint32 rank; the others: uint32 uid, uint32 gid, and
//           for 4, 5, 7, 8, 9 a namespace and rank
//       version, NUL-terminated ("4.2.2"); unless it is 2.0.x: bfrops module name, uint8 buffer
//           type, gds module name, NUL-terminated each; the rest: the packed info array
//
// Pure: no PMIx, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pm::agent::pmix {

/// The header's size and the largest payload libpmix 4.2.2 accepts (PMIX_MAX_CRED_SIZE).
inline constexpr std::size_t handshake_header_size = 16;
inline constexpr std::size_t max_handshake_payload = 131072;

struct handshake_check {
  enum class verdict {
    more,      ///< a well-formed beginning: wait for more bytes
    complete,  ///< the whole message is there (`size` bytes) and well-formed
    invalid,   ///< not a PMIx handshake (`why`): close the connection
  };
  verdict result = verdict::more;
  std::size_t size = 0;  ///< complete: the message's length, header included
  bool tool = false;     ///< complete: a tool, launcher or singleton (not a rank)
  /// complete: how many bytes the server answers a successful handshake with (libpmix 4.2.2):
  /// 8 to a rank (status, index); to a tool its status, its name if it asked for one, the
  /// server's name and rank, the credential's status.
  std::size_t reply_size = 0;
  std::string why;  ///< invalid: what is wrong, in a few words
};

/// Checks `bytes`, the start of what a connection sent.
handshake_check check_handshake(std::span<const std::uint8_t> bytes);

}  // namespace pm::agent::pmix
