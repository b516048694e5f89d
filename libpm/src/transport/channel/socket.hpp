// The agent channel over a non-blocking stream socket: framed messages out and in, with
// descriptors attached (SCM_RIGHTS) on a Unix socket.
//
// How a descriptor travels with a message: the sender attaches the message's descriptors to the
// sendmsg call that carries the FIRST byte of its frame, and writes `fds: N` in the message. On
// Linux a Unix stream socket delivers ancillary data with the bytes it was sent with, so the
// receiver, which queues every descriptor it gets in arrival order, holds the message's N
// descriptors by the time the whole frame has arrived, and takes the first N of its queue.
// Descriptors are received with MSG_CMSG_CLOEXEC so that they never leak into an exec.
//
// Both classes do no waiting: the owner polls (pmd) or uses Asio (the launcher) and calls them
// when the socket is ready. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/channel/messages.hpp"

namespace pm::channel {

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

/// Messages waiting to be written, with the descriptors that go along (closed once sent).
class outbox {
 public:
  /// Queues a message; `fds` (at most 2, see messages.hpp) travel with it.
  void push(const message& m, std::vector<owned_fd> fds = {});
  /// Writes as much as the socket takes. Returns false with `error` set if the socket broke
  /// (EPIPE, ECONNRESET, ...); true otherwise (then empty() says whether anything is left).
  bool flush(int sock, std::string& error);
  bool empty() const noexcept { return queue_.empty(); }

 private:
  struct item {
    std::vector<std::uint8_t> bytes;
    std::size_t sent = 0;
    std::vector<owned_fd> fds;  // sent with the first byte
  };
  std::deque<item> queue_;
};

/// A received message with its descriptors.
struct incoming {
  message msg;
  std::vector<owned_fd> fds;
};

/// Reads a socket and decodes messages; see the file comment for descriptors.
class inbox {
 public:
  enum class status { open, closed };
  /// Reads what is available (until EAGAIN). Returns closed at end of stream. Throws pm::error
  /// for a broken socket, a truncated last frame, garbage, or descriptors that went missing.
  status receive(int sock);
  /// The next decoded message, or nothing. Throws pm::error for an undecodable frame, and,
  /// once the stream ended, for a frame cut off by the end.
  std::optional<incoming> next();

 private:
  message_decoder decoder_;
  bool ended_ = false;
  std::deque<owned_fd> fds_;
};

}  // namespace pm::channel
