// pmd's end of its link to the launcher: the descriptors (a Unix socket, or ssh's pipes), the
// link's endpoint (pm::link::endpoint: handshake, heartbeats, flow control) and the reads and
// writes between them, descriptors attached where they travel. Watched in the owner's epoll set
// under tag_in (and tag_out for a separate write end); one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "link/endpoint.hpp"
#include "link/socket.hpp"

namespace pmd {

class launcher_link {
 public:
  static constexpr std::uint64_t tag_in = 1ull << 56;
  static constexpr std::uint64_t tag_out = 2ull << 56;

  /// The launcher's stream: pmd's stdin and stdout (one end of a socket pair from a launcher on
  /// this machine, or ssh's pipes), or with `connect` a TCP connection to the launcher made with
  /// the token in the environment, which leaves it (docs/slurm.md). Throws pm::error.
  static pm::link::stream_fds open_stream(bool connect);

  /// The agent's end of the link with the job's `nonce`; the launcher's hello must come within
  /// `hello_bound`.
  launcher_link(pm::link::stream_fds fds, std::uint64_t nonce,
                std::chrono::milliseconds hello_bound)
      : fds_(fds), ep_(options(nonce, hello_bound)) {}

  /// Makes the descriptors non-blocking and close-on-exec and watches them in `epoll_fd`; "" or
  /// why it cannot (an input epoll cannot wait on: a regular file, /dev/null).
  std::string attach(int epoll_fd);
  bool open() const noexcept { return open_; }
  pm::link::endpoint& endpoint() noexcept { return ep_; }
  const pm::link::endpoint& endpoint() const noexcept { return ep_; }

  void send(const pm::link::message& m, std::vector<pm::link::owned_fd> fds = {});
  /// Reads what is there (16 reads at most), handing each read's events to `take` while the link
  /// is open.
  void read(pm::link::link_time now,
            const std::function<void(std::vector<pm::link::link_event>&)>& take);
  /// The descriptors a message_in announced; throws pm::error when fewer came.
  std::vector<pm::link::owned_fd> take_fds(std::uint32_t n, std::string_view type);
  /// Writes what is queued. `writable`: epoll said the write end takes bytes again; while it is
  /// known to be full, only that event writes. False (and `error`) when the link broke.
  bool flush(bool writable, std::string& error);
  /// Stops watching; nothing is read or written any more.
  void close();
  /// Last words (shutdown_done or an error) before exiting: bounded, the launcher may be gone.
  void last_words();

 private:
  static pm::link::endpoint_options options(std::uint64_t nonce,
                                            std::chrono::milliseconds hello_bound) {
    pm::link::endpoint_options o;
    o.self = pm::link::role::agent;
    o.nonce = nonce;
    o.hello_timeout = hello_bound;
    return o;
  }

  pm::link::stream_fds fds_;
  pm::link::endpoint ep_;
  pm::link::stream_reader reader_;
  pm::link::stream_writer writer_;
  int epoll_ = -1;
  bool open_ = true;
  bool want_write_ = false;  // the write end is full: write again when it is writable
};

}  // namespace pmd
