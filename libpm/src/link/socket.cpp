#include "link/socket.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/sigpipe_guard.hpp"
#include "pm/error.hpp"

namespace pm::link {

namespace {

// recvmsg stops after a chunk that carries descriptors, and one frame carries at most 2.
constexpr std::size_t max_fds_per_read = 16;

}  // namespace

void owned_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void stream_writer::attach(std::uint64_t offset, std::vector<owned_fd> fds) {
  if (!fds.empty()) pending_.emplace_back(offset, std::move(fds));
}

bool stream_writer::flush(const stream_fds& s, endpoint& ep, std::string& error) {
  return flush(s,
               output_queue{[&ep] { return ep.output(); }, [&ep] { return ep.output_offset(); },
                            [&ep](std::size_t n) { ep.consume_output(n); }},
               error);
}

bool stream_writer::flush(const stream_fds& s, const output_queue& ep, std::string& error) {
  // A pipe (ssh's stdin) whose reader died raises SIGPIPE on write: that killed the launcher
  // (an embedding program that does not ignore it) when an agent died before reading its hello.
  const bool guard_sigpipe = !s.socket && !ep.bytes().empty() && !io::sigpipe_ignored();
  while (!ep.bytes().empty()) {
    auto bytes = ep.bytes();
    const std::uint64_t at = ep.offset();
    // Descriptors queued for bytes already gone (the link went down and dropped its output).
    while (!pending_.empty() && pending_.front().first < at) pending_.pop_front();
    std::vector<owned_fd>* fds = nullptr;
    if (!pending_.empty()) {
      const std::uint64_t next = pending_.front().first;
      if (next == at) {
        fds = &pending_.front().second;
        // Only up to the next attachment, so that each goes with its own first byte.
        if (pending_.size() > 1) bytes = bytes.first(pending_[1].first - at);
      } else {
        bytes = bytes.first(next - at);
      }
    }
    ssize_t n = 0;
    if (s.socket) {
      iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
      if (fds != nullptr) {
        const std::size_t count = std::min<std::size_t>(fds->size(), 2);
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * count);
        for (std::size_t i = 0; i < count; ++i) {
          const int fd = (*fds)[i].get();
          std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
        }
      }
      n = ::sendmsg(s.write_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      const iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
      n = io::writev_guarded(s.write_fd, &iov, 1, guard_sigpipe);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      error = std::string("cannot write: ") + std::strerror(errno);
      return false;
    }
    // The peer holds its own copies once the first byte went out: ours can go.
    if (fds != nullptr && n > 0) pending_.pop_front();
    ep.consume(static_cast<std::size_t>(n));
  }
  return true;
}

stream_reader::status stream_reader::read_bytes(const stream_fds& s,
                                                std::span<const std::uint8_t>& got,
                                                std::string& error) {
  got = {};
  error.clear();
  for (;;) {
    ssize_t n = 0;
    if (s.socket) {
      iovec iov{buffer_.get(), buffer_size};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds_per_read)];
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      n = ::recvmsg(s.read_fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (n >= 0) {
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
          if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
          const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (std::size_t i = 0; i < count; ++i) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fds_.emplace_back(fd);
          }
        }
        if ((msg.msg_flags & MSG_CTRUNC) != 0) {
          error = "too many descriptors arrived at once";
          return status::closed;
        }
      }
    } else {
      n = ::read(s.read_fd, buffer_.get(), buffer_size);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return status::again;
      error = std::strerror(errno);
      return status::closed;
    }
    if (n == 0) return status::closed;
    got = {buffer_.get(), static_cast<std::size_t>(n)};
    return status::data;
  }
}

stream_reader::status stream_reader::read_once(const stream_fds& s, link_time now, endpoint& ep,
                                               std::vector<link_event>& out) {
  std::span<const std::uint8_t> got;
  std::string error;
  const auto st = read_bytes(s, got, error);
  if (st == status::closed) ep.closed(now, out, error);
  if (st == status::data) ep.received(now, got, out);
  return st;
}

std::vector<owned_fd> stream_reader::take_fds(std::uint32_t n, std::string_view message_type) {
  if (fds_.size() < n) {
    throw error(errc::launch, "agent link: a '" + std::string(message_type) +
                                  "' message announced " + std::to_string(n) + " descriptors but " +
                                  std::to_string(fds_.size()) + " arrived");
  }
  std::vector<owned_fd> taken;
  for (std::uint32_t i = 0; i < n; ++i) {
    taken.push_back(std::move(fds_.front()));
    fds_.pop_front();
  }
  return taken;
}

}  // namespace pm::link
