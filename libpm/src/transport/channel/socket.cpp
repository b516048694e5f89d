#include "transport/channel/socket.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pm/error.hpp"

namespace pm::channel {

namespace {

// recvmsg stops after a chunk that carries descriptors, and one frame carries at most 2.
constexpr std::size_t max_fds_per_read = 16;

}  // namespace

void owned_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void outbox::push(const message& m, std::vector<owned_fd> fds) {
  item it;
  append_message(it.bytes, m, static_cast<std::uint32_t>(fds.size()));
  it.fds = std::move(fds);
  queue_.push_back(std::move(it));
}

bool outbox::flush(int sock, std::string& error) {
  while (!queue_.empty()) {
    item& it = queue_.front();
    iovec iov{it.bytes.data() + it.sent, it.bytes.size() - it.sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
    if (it.sent == 0 && !it.fds.empty()) {
      const std::size_t n = it.fds.size();
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * n);
      for (std::size_t i = 0; i < n; ++i) {
        const int fd = it.fds[i].get();
        std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
      }
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      error = std::string("agent channel: cannot write: ") + std::strerror(errno);
      return false;
    }
    // The peer holds its own copies once the first byte went out: ours can go.
    it.fds.clear();
    it.sent += static_cast<std::size_t>(n);
    if (it.sent == it.bytes.size()) queue_.pop_front();
  }
  return true;
}

inbox::status inbox::receive(int sock) {
  std::uint8_t buf[16384];
  for (;;) {
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds_per_read)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return status::open;
      throw error(errc::system, std::string("agent channel: cannot read: ") + std::strerror(errno));
    }
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
      throw error(errc::launch, "agent channel: too many descriptors arrived at once");
    }
    if (n == 0) {
      ended_ = true;
      return status::closed;
    }
    decoder_.feed({buf, static_cast<std::size_t>(n)});
  }
}

std::optional<incoming> inbox::next() {
  auto e = decoder_.next();
  if (!e) {
    if (ended_) decoder_.finish();
    return std::nullopt;
  }
  if (fds_.size() < e->fds) {
    throw error(errc::launch, "agent channel: a '" + std::string(type_name(e->msg)) +
                                  "' message announced " + std::to_string(e->fds) +
                                  " descriptors but " + std::to_string(fds_.size()) + " arrived");
  }
  incoming in{std::move(e->msg), {}};
  for (std::uint32_t i = 0; i < e->fds; ++i) {
    in.fds.push_back(std::move(fds_.front()));
    fds_.pop_front();
  }
  return in;
}

}  // namespace pm::channel
