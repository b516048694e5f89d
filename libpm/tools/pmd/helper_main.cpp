// pmd-helper: what pmd would otherwise load into itself with dlopen, so that pmd links statically
// (docs/agent.md, "Lifecycle"; docs/pmix.md, "The server's process"). Started by pmd only when a
// job needs it, beside pmd in the same bin directory:
//
//   pmd-helper topology   this host's shape as libpm-topology.so reads it, on stdout (exit 0), or
//                         one line saying why there is none (exit 1)
//   pmd-helper pmix PPID  the ranks' PMIx server (pmix_gateway, libpm-pmix.so): the channel to pmd
//                         is descriptor 3 (pmix_helper_frames.hpp), the socket the ranks connect
//                         to is descriptor 4; it ends when pmd closes the channel or dies.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/pmix_channel.hpp"
#include "host_shape.hpp"
#include "pmix_gateway.hpp"
#include "pmix_helper_frames.hpp"

namespace {

namespace frames = pmd::helper_frames;
namespace channel = pm::agent::pmix_channel;

constexpr int channel_fd = 3;
constexpr int listener_fd = 4;
// How long the server is quiet before it gives its freed memory back.
constexpr int idle_trim_after_ms = 100;

int run_topology() {
  const auto shape = pmd::read_topology_module();
  if (!shape.error.empty()) {
    std::printf("%s\n", shape.error.c_str());
    return 1;
  }
  std::printf("%s\n", shape.text.c_str());
  return 0;
}

// Blocking: pmd never blocks on its end (it buffers), so a full channel only waits for pmd's
// next turn.
void write_all(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(channel_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // pmd is gone: nothing is left to serve.
      std::_Exit(0);
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

class server_process {
 public:
  int run() {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return fail(std::string("epoll_create1: ") + std::strerror(errno));
    epoll_ = ep;
    watch(channel_fd, 1);
    char buf[65536];
    epoll_event events[8];
    bool busy = false;  // since the last trim
    for (;;) {
      const int n = ::epoll_wait(epoll_, events, 8, busy ? idle_trim_after_ms : -1);
      if (n < 0 && errno != EINTR) return fail(std::string("epoll_wait: ") + std::strerror(errno));
      if (n == 0 && busy) {
        // Quiet after a burst (the ranks' connections, a fence, their finalize): the server's
        // freed per-client buffers go back to the system; glibc keeps them resident otherwise
        // (about 8 KB a rank given back, 1.1 MB at 128 ranks: docs/benchmarks.md).
        ::malloc_trim(0);
        busy = false;
        continue;
      }
      busy = busy || n > 0;
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == 2) {
          if (gateway_) gateway_->on_ready();
          continue;
        }
        const ssize_t got = ::recv(channel_fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return end();  // pmd's stop, or pmd is gone
        in_.append(buf, static_cast<std::size_t>(got));
        try {
          while (auto f = take_frame()) on_frame(f->first, f->second);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "pmd-helper: %s\n", e.what());
          return end();
        }
      }
      answer_deferred_syncs();
    }
  }

 private:
  void watch(int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  }

  void report(const pm::agent::pmix_event& e) {
    std::string frame;
    frames::append(frame, frames::message, channel::encode(e));
    write_all(frame);
  }

  // The first whole frame, out of the buffer before it is carried out: carrying it out may read
  // more (await_agent).
  std::optional<std::pair<std::uint8_t, std::string>> take_frame() {
    const auto f = frames::next(in_);
    if (!f) return std::nullopt;
    std::pair<std::uint8_t, std::string> out{f->kind, std::string(f->body)};
    in_.erase(0, f->used);
    return out;
  }

  // Until pmd says it acted on pmix_server_up, reading and carrying out what it sends meanwhile
  // (the spawned jobs' registrations): the gateway's first connection waits here.
  // A sync that comes meanwhile is answered once the gateway is out of its connection's handling
  // (answer_deferred_syncs): its on_ready() must not run inside itself.
  void await_agent() {
    char buf[65536];
    ++awaiting_;
    try {
      for (;;) {
        while (auto f = take_frame()) {
          if (f->first == frames::server_up_handled) {
            --awaiting_;
            return;
          }
          on_frame(f->first, f->second);
        }
        const ssize_t got = ::recv(channel_fd, buf, sizeof buf, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) end();  // pmd is gone
        in_.append(buf, static_cast<std::size_t>(got));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pmd-helper: %s\n", e.what());
      end();
    }
  }

  void answer_deferred_syncs() {
    while (!deferred_syncs_.empty()) {
      const std::string body = std::move(deferred_syncs_.front());
      deferred_syncs_.erase(deferred_syncs_.begin());
      on_frame(frames::sync, body);
    }
  }

  void on_frame(std::uint8_t kind, std::string_view body) {
    if (kind == frames::server_up_handled) return;  // awaited in await_agent only
    if (kind == frames::sync) {
      if (awaiting_ > 0) {
        deferred_syncs_.emplace_back(body);
        return;
      }
      // Every upcall the server queued by now is reported before the echo (pmix_helper.hpp).
      if (gateway_) gateway_->on_ready();
      std::string frame;
      frames::append(frame, frames::sync, body);
      write_all(frame);
      return;
    }
    auto m = channel::decode_to_helper(body);
    if (auto* s = std::get_if<channel::setup>(&m)) {
      gateway_ = std::make_unique<pmd::pmix_gateway>(
          s->job, s->place, pm::link::owned_fd(listener_fd),
          [this](pm::agent::pmix_event e) { report(e); }, [this] { await_agent(); });
      watch(gateway_->fd(), 2);
      return;
    }
    if (!gateway_) throw pm::error(pm::errc::launch, "PMIx helper channel: no setup first");
    if (auto* b = std::get_if<channel::rank_bound>(&m)) {
      gateway_->rank_bound(b->rank, std::move(b->cpus));
      return;
    }
    std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (!std::is_same_v<T, channel::setup> &&
                        !std::is_same_v<T, channel::rank_bound>) {
            pm::agent::pmix_action a{std::move(x)};
            gateway_->execute(a);
          }
        },
        m);
  }

  // The server's connections close and its directories go; it is not finalized (pmix_gateway's
  // stop), so the process ends without the destructors and atexit handlers its threads would meet.
  [[noreturn]] int end() {
    if (gateway_) gateway_->stop();
    std::fflush(stderr);
    std::_Exit(0);
  }

  static int fail(const std::string& what) {
    std::fprintf(stderr, "pmd-helper: %s\n", what.c_str());
    return 2;
  }

  int epoll_ = -1;
  std::string in_;
  int awaiting_ = 0;                         // inside await_agent
  std::vector<std::string> deferred_syncs_;  // syncs that came meanwhile
  std::unique_ptr<pmd::pmix_gateway> gateway_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "topology" && argc == 2) return run_topology();
  if (mode == "pmix" && argc == 3) {
    // pmd's death ends the server (a SIGKILLed pmd cannot say so); checked once after, for a pmd
    // that died before the request took effect.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (std::to_string(::getppid()) != argv[2]) return 0;
    // A terminal's Ctrl-C or hang-up is pmd's to act on (it clears the ranks, then ends this).
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    if (::fcntl(channel_fd, F_GETFD) < 0 || ::fcntl(listener_fd, F_GETFD) < 0) {
      std::fprintf(stderr, "pmd-helper: started without its descriptors (pmd starts it)\n");
      return 2;
    }
    ::fcntl(channel_fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(listener_fd, F_SETFD, FD_CLOEXEC);
    try {
      return server_process().run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pmd-helper: %s\n", e.what());
      return 2;
    }
  }
  std::fprintf(
      stderr, "usage: pmd-helper topology | pmd-helper pmix PPID (pmd starts it; docs/agent.md)\n");
  return 2;
}
