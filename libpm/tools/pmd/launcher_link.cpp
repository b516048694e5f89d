#include "launcher_link.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "transport/srun/connect_back.hpp"

namespace pmd {

namespace ln = pm::link;

ln::stream_fds launcher_link::open_stream(bool connect) {
  if (connect) {
    const int fd = pm::srun::connect_from_environment();
    return ln::stream_fds{fd, fd, false};
  }
  struct stat st {};
  return ln::stream_fds{0, 1, ::fstat(0, &st) == 0 && S_ISSOCK(st.st_mode)};
}

std::string launcher_link::attach(int epoll_fd) {
  epoll_ = epoll_fd;
  for (const int fd : {fds_.read_fd, fds_.write_fd}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_in;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fds_.read_fd, &ev) != 0) return std::strerror(errno);
  if (fds_.write_fd != fds_.read_fd) {
    // A separate write end (ssh's stdout) stays watched, edge-triggered, from the start: no
    // epoll_ctl each time it fills and drains.
    ev.events = EPOLLOUT | EPOLLET;
    ev.data.u64 = tag_out;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fds_.write_fd, &ev);
    // Behind ssh: a larger pipe to sshd takes more output per wake-up (best effort; a socket or
    // a file refuses it).
    ::fcntl(fds_.write_fd, F_SETPIPE_SZ, 1 << 20);
  }
  return {};
}

void launcher_link::send(const ln::message& m, std::vector<ln::owned_fd> fds) {
  if (!open_) return;
  const auto at = ep_.send(m, static_cast<std::uint32_t>(fds.size()));
  writer_.attach(at, std::move(fds));
}

void launcher_link::read(ln::link_time now,
                         const std::function<void(std::vector<ln::link_event>&)>& take) {
  for (int round = 0; round < 16 && open_; ++round) {
    std::vector<ln::link_event> events;
    const auto st = reader_.read_once(fds_, now, ep_, events);
    take(events);
    if (st != ln::stream_reader::status::data) return;
  }
}

std::vector<ln::owned_fd> launcher_link::take_fds(std::uint32_t n, std::string_view type) {
  return reader_.take_fds(n, type);
}

// While the end is known to be full, only the writable event writes: every other attempt failed
// with EAGAIN (a host's pmd made 7,214 such writes for 64 MiB of output behind ssh).
bool launcher_link::flush(bool writable, std::string& error) {
  if (!open_) return true;
  if (want_write_ && !writable) return true;
  if (!writer_.flush(fds_, ep_, error)) return false;
  const bool need = !ep_.output().empty();
  if (need != want_write_) {
    want_write_ = need;
    if (fds_.write_fd == fds_.read_fd) {
      epoll_event ev{};
      ev.events = EPOLLIN | (need ? EPOLLOUT : 0u);
      ev.data.u64 = tag_in;
      ::epoll_ctl(epoll_, EPOLL_CTL_MOD, fds_.read_fd, &ev);
    }
  }
  return true;
}

void launcher_link::close() {
  if (!open_) return;
  open_ = false;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fds_.read_fd, nullptr);
  if (fds_.write_fd != fds_.read_fd) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fds_.write_fd, nullptr);
}

void launcher_link::last_words() {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::seconds(2);
  while (open_ && !ep_.output().empty() && clock::now() < deadline) {
    std::string error;
    if (!writer_.flush(fds_, ep_, error)) break;
    if (!ep_.output().empty()) ::usleep(1000);
  }
}

}  // namespace pmd
