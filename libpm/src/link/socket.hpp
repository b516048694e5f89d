// Moving an endpoint's bytes over a real descriptor: a Unix socket to a local pmd (which also
// carries descriptors), or the pipes of ssh's stdin/stdout.
//
// How a descriptor travels with a message over a Unix socket: the sender attaches the message's
// descriptors to the sendmsg call that carries the FIRST byte of its frame (the offset
// endpoint::send returned), and the message says `fds: N`. On Linux a Unix stream socket delivers
// ancillary data with the bytes it was sent with, so the receiver, which queues every descriptor
// it gets in arrival order, holds the message's N descriptors by the time the whole frame has
// arrived, and takes the first N of its queue. Descriptors are received with MSG_CMSG_CLOEXEC so
// that they never leak into an exec.
//
// Nothing here waits: the owner polls (pmd) or uses Asio (the launcher) and calls these when the
// descriptor is ready. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "link/endpoint.hpp"

namespace pm::link {

/// A descriptor owned by exactly one object; closed on destruction.
class owned_fd {
 public:
  owned_fd() noexcept = default;
  explicit owned_fd(int fd) noexcept : fd_(fd) {}
  owned_fd(owned_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  owned_fd& operator=(owned_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  owned_fd(const owned_fd&) = delete;
  owned_fd& operator=(const owned_fd&) = delete;
  ~owned_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// The byte stream under an endpoint: one socket (read and write) or two pipes.
struct stream_fds {
  int read_fd = -1;
  int write_fd = -1;
  bool socket = false;  ///< a Unix stream socket: sendmsg/recvmsg, descriptors may travel
};

/// Writes an endpoint's output, attaching queued descriptors to the byte they belong to.
class stream_writer {
 public:
  /// Descriptors to send with the byte at stream offset `offset` (endpoint::send's result).
  void attach(std::uint64_t offset, std::vector<owned_fd> fds);
  /// Writes as much as the descriptor takes. Returns false with `error` set if the stream broke
  /// (EPIPE, ECONNRESET, ...); true otherwise (then ep.output().empty() says whether all is out).
  bool flush(const stream_fds& s, endpoint& ep, std::string& error);
  /// The same from any queue of bytes numbered from the stream's start (the launcher machine's
  /// output for one host).
  struct output_queue {
    std::function<std::span<const std::uint8_t>()> bytes;
    std::function<std::uint64_t()> offset;
    std::function<void(std::size_t)> consume;
  };
  bool flush(const stream_fds& s, const output_queue& queue, std::string& error);

 private:
  std::deque<std::pair<std::uint64_t, std::vector<owned_fd>>> pending_;
};

/// Reads from a stream into an endpoint, one read at a time (the events' spans stay valid until
/// the next read). Received descriptors are appended to a queue that message_in's fds draw from.
class stream_reader {
 public:
  enum class status { data, again, closed };
  /// One read of at most the buffer's size; feeds the endpoint (received(), or closed() at
  /// end-of-stream or on a read error). Returns what happened.
  status read_once(const stream_fds& s, link_time now, endpoint& ep, std::vector<link_event>& out);
  /// The same read without an endpoint: `got` holds the bytes (valid until the next read) for
  /// `data`; `error` says why for `closed` (empty at end-of-file).
  status read_bytes(const stream_fds& s, std::span<const std::uint8_t>& got, std::string& error);
  /// Takes the first `n` received descriptors (for a message_in with fds = n); fewer than n is a
  /// protocol error: throws pm::error.
  std::vector<owned_fd> take_fds(std::uint32_t n, std::string_view message_type);

 private:
  static constexpr std::size_t buffer_size = std::size_t{256} << 10;
  // Not zero-filled: a page costs memory (and a fault) only once a read reaches it. Most links
  // carry a few hundred bytes at a time; zero-filling cost every launcher and pmd 64 page faults
  // and 256 KB of resident memory at start.
  std::unique_ptr<std::uint8_t[]> buffer_{new std::uint8_t[buffer_size]};
  std::deque<owned_fd> fds_;
};

}  // namespace pm::link
