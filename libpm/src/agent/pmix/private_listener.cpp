// libpmix's TCP listener replaced by a Unix socket only pmd can reach (docs/pmix.md, "Who reaches
// the server, and nothing holds it"; docs/security.md).
#include "agent/pmix/private_listener.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include "agent/pmix/pmix_host.hpp"
#include "pm/error.hpp"

namespace pm::agent::pmix {

namespace {

// The port of a TCP/IP socket's own end (0: not one).
std::uint16_t own_port(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return 0;
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  return 0;
}

// Calls `each(fd, stat, listening)` for every socket descriptor of this process.
template <class F>
void for_each_socket(F each) {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  const int own = ::dirfd(d);
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) {
      continue;
    }
    each(static_cast<int>(fd), st, listening != 0);
  }
  ::closedir(d);
}

}  // namespace

std::vector<inet_listener> inet_listeners() {
  std::vector<inet_listener> out;
  for_each_socket([&](int fd, const struct stat& st, bool listening) {
    if (!listening) return;
    if (const std::uint16_t port = own_port(fd); port != 0) out.push_back({fd, st.st_ino, port});
  });
  return out;
}

namespace {

// Cuts off every connection this process accepted on TCP port `port` (the server's, before it
// was replaced): libpmix's descriptor is pointed at one end of a socket pair instead (dup3), the
// TCP socket is shut (the peer is gone; a receive blocked on it returns), and the pair's other end
// is kept in `decoys` with its write side shut. So libpmix reads end-of-stream and tears the
// connection down by its normal path, and whatever it still writes (the rest of a handshake's
// answer) is taken: libpmix 4.2.2 crashes when a handshake write fails. Returns how many.
std::size_t cut_off_accepted(std::uint16_t port, std::vector<int>& decoys) {
  std::size_t n = 0;
  for_each_socket([&](int fd, const struct stat&, bool listening) {
    if (listening || own_port(fd) != port) return;
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      ::shutdown(fd, SHUT_RDWR);  // no pair: cut it off all the same
      ++n;
      return;
    }
    const int tcp = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    ::shutdown(pair[1], SHUT_WR);
    ::dup3(pair[0], fd, O_CLOEXEC);
    ::close(pair[0]);
    if (tcp >= 0) {
      ::shutdown(tcp, SHUT_RDWR);
      ::close(tcp);
    }
    decoys.push_back(pair[1]);
    ++n;
  });
  return n;
}

// A connection to the server's new socket carrying a header libpmix refuses (a payload beyond
// PMIX_MAX_CRED_SIZE). Once libpmix closed it, its listener thread took this connection, so it
// took every earlier one, and its progress thread handled it, so it handled every connection
// queued before it (libevent runs active events of one priority in order).
class probe {
 public:
  explicit probe(const std::string& path) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const std::uint32_t header[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0};
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 &&
          ::send(fd_, header, sizeof header, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof header);
  }
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;
  ~probe() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// True once libpmix closed it; false if it did not within answer_bound.
  bool wait_closed() {
    if (!ok_) return false;
    const auto until = std::chrono::steady_clock::now() + answer_bound;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd_, POLLIN, 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return false;
      char buf[64];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace

// The first line of each rendezvous file PMIx wrote for tools ("pmix.<host>.tool.<pid>", ...)
// names the server's TCP address after a ';': it becomes `address` (pmd's relay). A file named
// after this process's pid is written under `agent_pid` too (the pid tools are shown), never over
// an existing name (O_EXCL), 0600 like PMIx's own.
void point_rendezvous_files(const std::string& dir, const std::string& address,
                            std::int64_t agent_pid) {
  const std::string own_suffix = "." + std::to_string(::getpid());
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  const int lfd = ::dup(dfd);
  DIR* d = lfd < 0 ? nullptr : ::fdopendir(lfd);
  if (d == nullptr) {
    if (lfd >= 0) ::close(lfd);
    ::close(dfd);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "pmix.", 5) != 0) continue;
    const int fd = ::openat(dfd, e->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 65536) {
      text.resize(static_cast<std::size_t>(st.st_size));
      if (::pread(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        text.clear();
      }
    }
    const auto eol = text.find('\n');
    const auto semi = text.find(';');
    if (eol != std::string::npos && semi != std::string::npos && semi < eol) {
      text = text.substr(0, semi + 1) + address + text.substr(eol);
      if (::ftruncate(fd, 0) == 0) {
        [[maybe_unused]] const auto n = ::pwrite(fd, text.data(), text.size(), 0);
      }
      const std::string_view name = e->d_name;
      if (agent_pid > 0 && agent_pid != ::getpid() && name.ends_with(own_suffix)) {
        const std::string alias = std::string(name.substr(0, name.size() - own_suffix.size())) +
                                  "." + std::to_string(agent_pid);
        const int afd = ::openat(dfd, alias.c_str(),
                                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (afd >= 0) {
          [[maybe_unused]] const auto n = ::write(afd, text.data(), text.size());
          ::close(afd);
        }
      }
    }
    ::close(fd);
  }
  ::closedir(d);
  ::close(dfd);
}

// Right after PMIx_server_init: the one TCP listener libpmix made (a listening socket that was
// not there before) is replaced by a Unix socket listening at `path`. libpmix's
// listener thread select()s on the same descriptor number with a 2 s timeout and accept()s on
// it (ptl_base_listener.c, 4.2.2), so it takes the private socket's connections from its next
// round on; shutting the TCP socket ends its port at once (connections waiting in its backlog are
// reset) and wakes that thread. Connections libpmix accepted on the port meanwhile are shut, after
// a probe has made sure its threads are past all of them; a tool among them was named untrusted
// (on_tool_connected). libpmix handles the Unix socket as it did the TCP one: it only sets
// (non)blocking mode, receives and sends, and ignores the peer address.
std::size_t replace_listener(const std::vector<inet_listener>& before, const std::string& path,
                             std::vector<int>& decoys) {
  std::vector<inet_listener> fresh;
  for (const auto& l : inet_listeners()) {
    if (std::none_of(before.begin(), before.end(),
                     [&](const inet_listener& b) { return b.inode == l.inode; })) {
      fresh.push_back(l);
    }
  }
  if (fresh.size() != 1) {
    throw pm::error(pm::errc::system, "PMIx: cannot tell which socket the server listens on (" +
                                          std::to_string(fresh.size()) + " new listening sockets)");
  }
  const inet_listener server_socket = fresh.front();
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) {
    throw pm::error(pm::errc::system, "PMIx: socket path too long: " + path);
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int u = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (u < 0 || ::bind(u, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(u, SOMAXCONN) != 0) {
    const int e = errno;
    if (u >= 0) ::close(u);
    throw pm::error(pm::errc::system, "PMIx: cannot listen on " + path + ": " + std::strerror(e));
  }
  const int tcp = ::fcntl(server_socket.fd, F_DUPFD_CLOEXEC, 0);
  if (tcp < 0 || ::dup3(u, server_socket.fd, O_CLOEXEC) < 0) {
    const int e = errno;
    ::close(u);
    if (tcp >= 0) ::close(tcp);
    throw pm::error(pm::errc::system,
                    std::string("PMIx: cannot replace the server's socket: ") + std::strerror(e));
  }
  ::close(u);
  // The probe waits on the new socket before the TCP one is shut: shutting it wakes the listener
  // thread from its select(), whose next look at the descriptor then finds the probe (Linux's
  // select() waits on what the descriptor named when it began; without a connection pending on
  // the new socket it would sleep out its 2 s timeout).
  probe first(path);
  ::shutdown(tcp, SHUT_RDWR);
  ::close(tcp);
  // Connections taken meanwhile: cut off before waiting for the probe (a silent one would hold
  // the progress thread in a blocking receive), and again after it (one the listener thread was
  // accepting while its socket was replaced).
  std::size_t cut = cut_off_accepted(server_socket.port, decoys);
  if (!first.wait_closed()) {
    throw pm::error(pm::errc::system, "PMIx: the server took no connection on " + path +
                                          " within " + std::to_string(answer_bound.count()) + " s");
  }
  cut += cut_off_accepted(server_socket.port, decoys);
  return cut;
}

}  // namespace pm::agent::pmix
