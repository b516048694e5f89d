#include "tcp_relay.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include "agent/peer_owner.hpp"
#include "agent/pmix/handshake.hpp"

namespace pmd {

namespace {

// Enough for PMIx's messages (job data, fence results) without holding a reader back long.
constexpr std::size_t high_water = std::size_t{1} << 20;
// A queue emptied keeps at most this much capacity.
constexpr std::size_t keep_capacity = 4096;

std::string user_text(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(4096);
  std::string text = "uid " + std::to_string(uid);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    text += std::string(" (") + found->pw_name + ")";
  }
  return text;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

}  // namespace

tcp_relay::tcp_relay(int epoll_fd, std::uint64_t tag_base, options o)
    : epoll_(epoll_fd), base_(tag_base), opts_(std::move(o)) {}

tcp_relay::~tcp_relay() {
  close_all();
}

void tcp_relay::once(const std::string& kind, const std::string& line) {
  if (said_[kind]++ == 0 && opts_.say) opts_.say(line);
}

void tcp_relay::refuse(long uid, const std::string& why) {
  if (refused_[uid]++ > 0 || !opts_.say) return;
  const std::string owner = user_text(opts_.owner);
  if (uid < 0) {
    opts_.say("PMIx: refused a connection whose owner the kernel could not name (" + why +
              "); only " + owner + ", the job's owner, may connect (further ones are counted)");
  } else {
    opts_.say("PMIx: refused a connection from " + user_text(static_cast<uid_t>(uid)) + ": only " +
              owner + ", the job's owner, may connect (further ones from uid " +
              std::to_string(uid) + " are counted, not shown)");
  }
}

void tcp_relay::add(pm::link::owned_fd accepted) {
  if (!diag_) diag_.reset(pm::agent::open_sock_diag());
  const auto who = pm::agent::tcp_peer_owner(accepted.get(), diag_.get());
  if (!who.uid) {
    // A peer already gone is most likely one of the job's own ranks that died while it
    // connected: closed unread, and not reported as a stranger refused (which read like an attack).
    if (!who.closed) refuse(-1, who.why);
    return;  // closed here: not one byte was read
  }
  if (*who.uid != opts_.owner) {
    refuse(static_cast<long>(*who.uid), {});
    return;
  }
  const int one = 1;
  ::fcntl(accepted.get(), F_SETFL, ::fcntl(accepted.get(), F_GETFL) | O_NONBLOCK);
  ::setsockopt(accepted.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const std::uint64_t id = next_++;
  pair& p = pairs_[id];
  p.s[0].fd = std::move(accepted);
  p.deadline = clock::now() + opts_.handshake_deadline;
  update(id, p);
}

void tcp_relay::update(std::uint64_t id, pair& p) {
  for (int i = 0; i < 2; ++i) {
    side& me = p.s[i];
    if (!me.fd) continue;
    const side& other = p.s[1 - i];
    std::uint32_t want = 0;
    switch (p.ph) {
      case phase::greeting:
        want = EPOLLIN;  // only the client's side exists
        break;
      case phase::relaying:
        // Read while the other side keeps up; write while something waits.
        want = (other.out.size() < high_water ? EPOLLIN : 0u) | (me.out.empty() ? 0u : EPOLLOUT);
        break;
      case phase::waiting:
      case phase::draining:
        want = EPOLLIN;  // only the server's side is left; nothing more goes to it
        break;
    }
    if (me.registered && want == me.interest) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = base_ | (id << 1) | static_cast<std::uint64_t>(i);
    ::epoll_ctl(epoll_, me.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, me.fd.get(), &ev);
    me.registered = true;
    me.interest = want;
  }
}

void tcp_relay::remove(std::uint64_t id) {
  auto it = pairs_.find(id);
  if (it == pairs_.end()) return;
  for (auto& s : it->second.s) {
    if (s.fd && s.registered) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s.fd.get(), nullptr);
  }
  pairs_.erase(it);  // closes both
  if (draining_ == id) {
    draining_.reset();
    hang_up_next();
  }
}

void tcp_relay::close_all() {
  for (auto& [id, p] : pairs_) {
    for (auto& s : p.s) {
      if (s.fd && s.registered) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s.fd.get(), nullptr);
    }
    // The server's side stays open and unread: libpmix sees no loss (step 4) and never fails a
    // write to it; the process's end closes it.
    if (p.s[1].fd) held_.push_back(std::move(p.s[1].fd));
  }
  pairs_.clear();  // closes the clients' sides
  waiting_.clear();
  draining_.reset();
}

bool tcp_relay::drain(side& to) {
  while (!to.out.empty()) {
    const ssize_t n = ::send(to.fd.get(), to.out.data(), to.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      to.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // Emptied: give its capacity back. A rank's connection is idle nearly all its life, and 128
  // of them each keeping the largest message it ever queued (the job's data) held 5 MB of pmd.
  if (to.out.capacity() > keep_capacity) std::string().swap(to.out);
  return true;
}

// Sends `bytes` straight on when nothing waits before them; queues what the socket did not take.
bool tcp_relay::forward(side& to, const char* bytes, std::size_t n) {
  if (to.out.empty()) {
    while (n > 0) {
      const ssize_t sent = ::send(to.fd.get(), bytes, n, MSG_NOSIGNAL);
      if (sent > 0) {
        bytes += sent;
        n -= static_cast<std::size_t>(sent);
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
  }
  to.out.append(bytes, n);
  return drain(to);
}

// The client's first bytes: kept until they make a whole, well-formed handshake.
bool tcp_relay::greet(std::uint64_t id, pair& p) {
  namespace pmix = pm::agent::pmix;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(p.s[0].fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;  // gone before its handshake: the server never knew of it
    p.first.append(buf, static_cast<std::size_t>(n));
    const auto c = pmix::check_handshake(std::span<const std::uint8_t>(
        reinterpret_cast<const std::uint8_t*>(p.first.data()), p.first.size()));
    if (c.result == pmix::handshake_check::verdict::invalid) {
      once("garbage",
           "PMIx: closed a connection that did not start with a PMIx handshake (" + c.why + ")");
      return false;
    }
    if (c.result == pmix::handshake_check::verdict::complete) {
      if (!connect_server(p)) return false;
      // What the client sends next (its socket is level-triggered) goes on from the relay.
      update(id, p);
      return true;
    }
  }
}

bool tcp_relay::connect_server(pair& p) {
  const auto path = opts_.server ? opts_.server() : std::nullopt;
  if (!path) return false;  // the server could not start: said once by the gateway
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path->size() >= sizeof sa.sun_path) {
    once("path", "PMIx: the server's socket path is too long: " + *path);
    return false;
  }
  std::memcpy(sa.sun_path, path->c_str(), path->size() + 1);
  pm::link::owned_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s) {
    once("socket", std::string("PMIx: socket: ") + std::strerror(errno));
    return false;
  }
  // Room for the largest handshake (128 KiB) in one write: the server reads it with blocking
  // receives, and must never wait for pmd's thread to send the rest.
  const int room = 1 << 18;
  ::setsockopt(s.get(), SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    once("connect",
         "PMIx: cannot reach the server's socket " + *path + ": " + std::strerror(errno));
    return false;
  }
  p.s[1].fd = std::move(s);
  p.ph = phase::relaying;
  // The whole message, and whatever the client sent after it, in one write.
  std::string first = std::move(p.first);
  p.first = std::string();
  return forward(p.s[1], first.data(), first.size());
}

// 0: both sides go on; 1 + side: that side ended (read end-of-stream or an error, or a write
// to it failed).
int tcp_relay::pump(pair& p, int from) {
  side& src = p.s[from];
  side& dst = p.s[1 - from];
  char buf[65536];
  while (dst.out.size() < high_water) {
    const ssize_t n = ::recv(src.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      if (!forward(dst, buf, static_cast<std::size_t>(n))) return 2 - from;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    // End of stream or an error: hand over what is left (PMIx connections are not half-closed;
    // either end closing ends the conversation).
    drain(dst);
    return 1 + from;
  }
  return 0;
}

// The client left: the server's side is shut for writing, so that libpmix reads end-of-stream
// and tears the connection down by its normal path, and what libpmix still writes is read and
// dropped until it closes its end (or the deadline passes). Closing at once would fail those
// writes: libpmix 4.2.2 crashes when a write of its answer to a handshake fails (a tool that
// hangs up early), and prints a line for every other (an event to a rank that just ended).
void tcp_relay::client_gone(std::uint64_t id, pair& p) {
  if (p.s[0].fd && p.s[0].registered) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, p.s[0].fd.get(), nullptr);
  p.s[0] = side{};
  p.s[1].out.clear();
  std::string().swap(p.s[1].out);
  p.ph = phase::waiting;
  update(id, p);
  waiting_.push_back(id);
  if (!draining_) hang_up_next();
}

// One loss at a time (step 4): libpmix closes its end at the start of handling a loss, and the
// answers that handling queues run before its next look at the sockets, so the next shutdown is
// seen only after them.
void tcp_relay::hang_up_next() {
  while (!draining_ && !waiting_.empty()) {
    const std::uint64_t id = waiting_.front();
    waiting_.pop_front();
    auto it = pairs_.find(id);
    if (it == pairs_.end() || it->second.ph != phase::waiting) continue;  // libpmix closed first
    pair& p = it->second;
    ::shutdown(p.s[1].fd.get(), SHUT_WR);
    p.ph = phase::draining;
    p.deadline = clock::now() + opts_.drain_deadline;
    draining_ = id;
  }
}

void tcp_relay::on_event(std::uint64_t tag, std::uint32_t events) {
  const std::uint64_t id = (tag & mask) >> 1;
  const int which = static_cast<int>(tag & 1);
  auto it = pairs_.find(id);
  if (it == pairs_.end()) return;
  pair& p = it->second;
  if (!p.s[which].fd) return;  // a side closed earlier in this batch

  if (p.ph == phase::greeting) {
    if (!greet(id, p)) remove(id);
    return;
  }
  if (p.ph == phase::waiting || p.ph == phase::draining) {
    bool over = false;
    char buf[4096];
    while (!over) {
      const ssize_t n = ::recv(p.s[1].fd.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      over = n <= 0;  // libpmix closed its end (or an error): done
    }
    if (over) remove(id);
    return;
  }

  int ended = 0;  // 1 + the side that ended
  if ((events & EPOLLOUT) != 0 && !drain(p.s[which])) ended = 1 + which;
  if (ended == 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) ended = pump(p, which);
  if (ended == 0 && (events & (EPOLLHUP | EPOLLERR)) != 0) {
    drain(p.s[1 - which]);
    ended = 1 + which;  // that side is gone for good
  }
  if (ended == 1 && p.s[1].fd) {
    client_gone(id, p);
    return;
  }
  if (ended != 0) {
    remove(id);
    return;
  }
  update(id, p);
}

void tcp_relay::on_timer(clock::time_point now) {
  std::vector<std::uint64_t> due;
  for (const auto& [id, p] : pairs_) {
    if (has_deadline(p.ph) && p.deadline <= now) due.push_back(id);
  }
  for (const auto id : due) {
    if (pairs_.at(id).ph == phase::greeting) {
      once("slow", "PMIx: closed a connection that sent no whole PMIx handshake within " +
                       seconds_text(opts_.handshake_deadline) +
                       " (further ones are closed without a word)");
    }
    remove(id);
  }
}

std::optional<tcp_relay::clock::time_point> tcp_relay::next_deadline() const {
  std::optional<clock::time_point> first;
  for (const auto& [id, p] : pairs_) {
    if (!has_deadline(p.ph)) continue;
    if (!first || p.deadline < *first) first = p.deadline;
  }
  return first;
}

}  // namespace pmd
