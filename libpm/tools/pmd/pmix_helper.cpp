#include "pmix_helper.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/host_facts.hpp"
#include "agent/private_dir.hpp"
#include "helper_program.hpp"
#include "pm/error.hpp"
#include "pmix_helper_frames.hpp"
#include "sys/pidfd.hpp"

namespace pmd {

namespace frames = helper_frames;

namespace {

constexpr std::uint64_t tag_listener = 1;
constexpr std::uint64_t tag_channel = 2;
constexpr std::uint64_t tag_helper = 3;

// How long pmd's end waits for the helper to close its server's connections and remove its
// directories before it kills it (libpmix 4.2.2 has hung at the end: issue 20).
constexpr int stop_wait_ms = 5000;
// How long a restart's sweep waits for the upcalls queued before its ranks' ends.
constexpr std::chrono::milliseconds drain_bound{2000};

[[noreturn]] void fail(const std::string& what) {
  throw pm::error(pm::errc::system, "PMIx: " + what + ": " + std::strerror(errno));
}

std::string tmp_root() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? std::string(t) : std::string("/tmp");
}

// Eight letters and digits from the kernel's random source.
std::string random_word() {
  static constexpr char alphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    fail("getrandom");
  }
  std::string word;
  for (const unsigned char b : bytes) word += alphabet[b % (sizeof alphabet - 1)];
  return word;
}

void watch(int epoll, int fd, std::uint32_t events, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    ::epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &ev);
  }
}

}  // namespace

pmix_helper::pmix_helper(const pm::link::pmix_job& job, reporter report)
    : job_(job), report_(std::move(report)), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_) fail("epoll_create1");
  // A host that runs none of the first job's ranks (one a spawned job brought in) learns its
  // name for PMIx from that job (the relay's pmix_host_named).
  if (job_.node < job_.nodes.size()) place_.hostname = job_.nodes[job_.node];
  // The ranks name pmd as their server's process: the pid in the directories' names lets a later
  // server tell this agent's leftovers (a SIGKILLed pmd takes its helper with it) from a live
  // one's.
  place_.server_pid = ::getpid();
  // Named now (the ranks are told), made when the server starts: a job that never calls PMIx
  // makes and removes nothing (measured: a directory on /tmp costs ms on a busy disk). The names
  // carry a random part no other user can guess, and mkdir fails rather than follows a name
  // someone made meanwhile.
  const std::string stem = "pm-pmix." + std::to_string(::getpid()) + "." + random_word();
  place_.dir = tmp_root() + "/" + stem;
  place_.shm_dir = "/dev/shm/" + stem;
  // Close-on-exec: only the helper gets it, as its descriptor 4 (start_helper).
  listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (!listener_ || ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listener_.get(), 1024) != 0 ||
      ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    fail("cannot listen on 127.0.0.1");
  }
  place_.port = ntohs(sa.sin_port);
  watch(epoll_.get(), listener_.get(), EPOLLIN, tag_listener);
  send(pm::agent::pmix_channel::setup{job_, place_});
}

pmix_helper::~pmix_helper() {
  stop();
}

pm::agent::pmix_host_facts pmix_helper::facts() const {
  pm::agent::pmix_host_facts f;
  f.place = place_;
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  f.cores = cores > 0 ? static_cast<unsigned>(cores) : 0;
  f.rdma = pm::agent::has_rdma_devices();
  f.gpus = pm::agent::has_gpu_devices();  // the host machine adds its summary's GPUs
  return f;
}

void pmix_helper::rank_bound(std::uint32_t rank, std::string cpus) {
  send(pm::agent::pmix_channel::rank_bound{rank, std::move(cpus)});
}

void pmix_helper::execute(pm::agent::pmix_action& a) {
  namespace ag = pm::agent;
  if (std::holds_alternative<ag::send>(a)) return;  // pmd's
  // A modex the server must answer starts it, as a rank's connection does.
  if (const auto* m = std::get_if<ag::pmix_serve_modex>(&a); m && !started_) start_helper();
  if (gone_ || failed_) {
    if (const auto* m = std::get_if<ag::pmix_serve_modex>(&a)) {
      report_(ag::pmix_local_modex_answered{m->link_id, false, {}});
    }
    return;
  }
  std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (!std::is_same_v<T, ag::send>) send(pm::agent::pmix_channel::to_helper{x});
      },
      a);
}

void pmix_helper::after_upcalls(std::function<void()> then) {
  if (!started_ || gone_ || failed_ || stopped_) {
    then();
    return;
  }
  const std::uint64_t n = next_sync_++;
  waiting_.emplace_back(n, std::move(then));
  std::string frame;
  frames::append(frame, frames::sync, frames::sync_body(n));
  out_ += frame;
  flush();
}

void pmix_helper::send(const pm::agent::pmix_channel::to_helper& m) {
  if (gone_ || failed_ || stopped_) return;
  std::string frame;
  frames::append(frame, frames::message, pm::agent::pmix_channel::encode(m));
  if (!started_) {
    kept_.push_back(std::move(frame));
    return;
  }
  out_ += frame;
  flush();
}

// pmd-helper with the channel as descriptor 3 and the listener as 4.
void pmix_helper::start_helper() {
  if (started_ || failed_) return;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    cannot_start(std::string("socketpair: ") + std::strerror(errno));
    return;
  }
  pm::link::owned_fd mine(pair[0]), theirs(pair[1]);
  // Above 4 first, so that neither dup2 below overwrites the other's source.
  pm::link::owned_fd channel_end(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, 10));
  pm::link::owned_fd listener_end(::fcntl(listener_.get(), F_DUPFD_CLOEXEC, 10));
  if (!channel_end || !listener_end) {
    cannot_start(std::string("fcntl: ") + std::strerror(errno));
    return;
  }
  std::string why;
  const pid_t pid = spawn_helper({"pmix", std::to_string(::getpid())},
                                 {{channel_end.get(), 3}, {listener_end.get(), 4}}, why);
  if (pid < 0) {
    cannot_start(why);
    return;
  }
  started_ = true;
  pid_ = pid;
  pidfd_.reset(pm::sys::open_pidfd(pid));
  channel_ = std::move(mine);
  // The helper accepts from now on; pmd's copy would only keep the port open after it ended.
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listener_.reset();
  watch(epoll_.get(), channel_.get(), EPOLLIN, tag_channel);
  if (pidfd_) watch(epoll_.get(), pidfd_.get(), EPOLLIN, tag_helper);
  for (auto& f : kept_) out_ += f;
  kept_.clear();
  flush();
}

// No server: the port closes, so that the ranks' connections are refused at once (their
// PMIx_Init fails) instead of waiting in its backlog; the agent hears a server that failed.
void pmix_helper::cannot_start(const std::string& why) {
  failed_ = true;
  if (listener_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listener_.reset();
  report_(pm::agent::pmix_server_said{"PMIx server: " + why});
  report_(pm::agent::pmix_server_failed{});
}

void pmix_helper::flush() {
  while (!out_.empty() && channel_) {
    const ssize_t n = ::send(channel_.get(), out_.data(), out_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    helper_gone(std::string("lost its channel: ") + std::strerror(errno));
    return;
  }
  if (channel_) {
    watch(epoll_.get(), channel_.get(), out_.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT, tag_channel);
  }
}

void pmix_helper::on_ready() {
  epoll_event events[8];
  const int n = ::epoll_wait(epoll_.get(), events, 8, 0);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t tag = events[i].data.u64;
    if (tag == tag_listener) {
      start_helper();
    } else if (tag == tag_channel) {
      if ((events[i].events & EPOLLOUT) != 0) flush();
      if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) read_channel();
    } else if (tag == tag_helper) {
      // Its last reports may still be in the channel.
      if (channel_) read_channel();
      helper_gone("ended");
    }
  }
}

void pmix_helper::read_channel() {
  char buf[65536];
  bool ended = false;
  int error = 0;
  while (channel_) {
    const ssize_t n = ::recv(channel_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ended = true;  // what came before still counts
    error = n < 0 ? errno : 0;
    break;
  }
  // Each frame leaves the buffer before it is carried out: carrying it out may read more
  // (drain_upcalls, from an action the report led to).
  try {
    while (!gone_) {
      const auto f = frames::next(in_);
      if (!f) break;
      const std::uint8_t kind = f->kind;
      std::string body(f->body);
      in_.erase(0, f->used);
      on_frame(kind, body);
    }
  } catch (const std::exception& e) {
    in_.clear();
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    helper_gone(e.what());
    return;
  }
  if (ended) {
    in_.clear();
    helper_gone(error == 0 ? "closed its channel"
                           : std::string("lost its channel: ") + std::strerror(error));
  }
}

void pmix_helper::drain_upcalls() {
  if (!started_ || gone_ || failed_ || stopped_) return;
  const std::uint64_t n = next_sync_++;
  bool done = false;
  waiting_.emplace_back(n, [&done] { done = true; });
  std::string frame;
  frames::append(frame, frames::sync, frames::sync_body(n));
  out_ += frame;
  const auto until = std::chrono::steady_clock::now() + drain_bound;
  while (!done && !gone_ && channel_) {
    flush();
    if (!channel_) break;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{channel_.get(), static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) break;
    if (r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_channel();
  }
  if (!done) {
    // A helper that does not answer in time (its server stuck): the agent goes on without it,
    // and this wait's marker must not outlive `done`.
    std::erase_if(waiting_, [n](const auto& w) { return w.first == n; });
    report_(pm::agent::pmix_server_said{"PMIx server: pmd-helper did not answer within " +
                                        std::to_string(drain_bound.count()) + " ms"});
  }
}

void pmix_helper::on_frame(std::uint8_t kind, std::string_view body) {
  if (kind == frames::message) {
    auto e = pm::agent::pmix_channel::decode_event(body);
    const bool up = std::holds_alternative<pm::agent::pmix_server_up>(e);
    report_(std::move(e));
    if (up) {
      // What the agent did about it (registrations) went out above; the helper waits for this.
      std::string frame;
      frames::append(frame, frames::server_up_handled, {});
      out_ += frame;
      flush();
    }
  } else if (kind == frames::sync) {
    const std::uint64_t n = frames::sync_number(body);
    while (!waiting_.empty() && waiting_.front().first <= n) {
      auto then = std::move(waiting_.front().second);
      waiting_.pop_front();
      then();
    }
  } else {
    throw pm::error(pm::errc::launch,
                    "PMIx helper channel: a frame of unknown kind " + std::to_string(kind));
  }
}

// The helper is gone before pmd's end: its server with it. The ranks' connections to it closed;
// what waits on an upcall's report is let go, and the agent hears it as a server that failed.
void pmix_helper::helper_gone(const std::string& why) {
  if (gone_) return;
  gone_ = true;
  if (channel_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, channel_.get(), nullptr);
  // Its pidfd stays readable until stop() reaps it: still watched, it would wake pmd for ever.
  if (pidfd_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pidfd_.get(), nullptr);
  channel_.reset();
  out_.clear();
  if (!stopped_) {
    // How it ended, when it did: its channel closes just before it becomes a zombie.
    std::string how = why;
    if (pidfd_) {
      pollfd p{pidfd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) == 1) {
        how = pm::sys::describe(pm::sys::check_exit(pidfd_.get(), pm::sys::reap_mode::keep_zombie));
      }
    }
    report_(pm::agent::pmix_server_said{"PMIx server: pmd-helper " + how});
    report_(pm::agent::pmix_server_failed{});
  }
  run_waiting();
}

void pmix_helper::run_waiting() {
  while (!waiting_.empty()) {
    auto then = std::move(waiting_.front().second);
    waiting_.pop_front();
    then();
  }
}

void pmix_helper::stop() {
  if (stopped_) return;
  stopped_ = true;
  run_waiting();          // what waits on the server's reports is told now: none will come
  if (!started_) return;  // nothing was made
  // The end of the channel tells the helper to stop; it closes its server's connections and
  // removes the directories, then ends.
  if (channel_) ::shutdown(channel_.get(), SHUT_WR);
  bool killed = false;
  if (pidfd_) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    killed = ::poll(&p, 1, stop_wait_ms) != 1;
    if (killed) pm::sys::send_signal(pidfd_.get(), SIGKILL);
    siginfo_t info{};
    ::waitid(pm::sys::pidfd_id, static_cast<id_t>(pidfd_.get()), &info, WEXITED);
  } else if (pid_ > 0) {
    // No pidfd (a kernel or a sandbox that refuses pidfd_open): the same wait, by polling.
    int status = 0;
    pid_t got = 0;
    for (int waited = 0; (got = ::waitpid(pid_, &status, WNOHANG)) == 0 && waited < stop_wait_ms;
         waited += 10) {
      ::poll(nullptr, 0, 10);
    }
    if (got == 0) {
      killed = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  pid_ = 0;
  channel_.reset();
  if (killed) {
    std::fprintf(stderr, "pmd: PMIx: pmd-helper did not end within %d ms: killed\n", stop_wait_ms);
  }
  // Gone already where the helper removed them; left where it was killed or crashed.
  std::string why;
  if (!pm::agent::remove_private_tree(place_.dir, &why)) {
    std::fprintf(stderr, "pmd: PMIx: %s\n", why.c_str());
  }
  if (!pm::agent::remove_private_tree(place_.shm_dir, &why)) {
    std::fprintf(stderr, "pmd: PMIx: %s\n", why.c_str());
  }
}

}  // namespace pmd
