#include "transport/local/local_transport.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "pm/error.hpp"
#include "transport/channel/socket.hpp"
#include "transport/local/spawner.hpp"

extern char** environ;

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace pm::local {

namespace {

namespace asio = boost::asio;
namespace ch = pm::channel;
namespace fs = std::filesystem;

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// "exited with code 3" / "was killed by SIGKILL"
std::string describe(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with code " + std::to_string(info.si_status);
  const char* abbrev = ::sigabbrev_np(info.si_status);
  return "was killed by " + (abbrev != nullptr ? std::string("SIG") + abbrev
                                               : "signal " + std::to_string(info.si_status));
}

}  // namespace

std::string default_agent_path() {
  if (const char* env = std::getenv("PM_AGENT"); env != nullptr && *env != '\0') {
    if (!executable(env)) {
      throw error(errc::launch, std::string("PM_AGENT names '") + env +
                                    "', which is not an "
                                    "executable file");
    }
    return env;
  }
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back(exe.parent_path());
  }
  // The object holding libpm (libpm.so when shared; the executable when static).
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&default_agent_path), &info) != 0 &&
      info.dli_fname != nullptr) {
    const fs::path lib = fs::weakly_canonical(info.dli_fname, ec).parent_path();
    if (!lib.empty() && (dirs.empty() || dirs.front() != lib)) dirs.push_back(lib);
  }
  std::vector<fs::path> candidates;
  for (const auto& d : dirs) {
    candidates.push_back(d / "pmd");
    candidates.push_back(d.parent_path() / "libexec" / "pmd");
    candidates.push_back(d.parent_path() / "bin" / "pmd");
  }
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) candidates.push_back(fs::path(dir) / "pmd");
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const auto& c : candidates) {
    if (executable(c)) return c.string();
  }
  std::string where = dirs.empty() ? std::string("$PATH") : dirs.front().string() + ", $PATH";
  throw error(errc::launch, "cannot find the agent program pmd (looked in " + where +
                                "); set PM_AGENT to its path");
}

struct local_transport::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, transport_callbacks callbacks)
      : io(context), cb(std::move(callbacks)), sock(context), pidfd(context) {}

  asio::io_context& io;
  transport_callbacks cb;
  asio::posix::stream_descriptor sock;   // the launcher's end of the channel
  asio::posix::stream_descriptor pidfd;  // pmd's
  std::int64_t pid = 0;
  ch::inbox inbox;
  ch::outbox outbox;
  bool writing = false;        // a wait for writability is pending
  bool lost = false;           // the channel is gone (host_lost reported or pending)
  bool shutdown_sent = false;  // the job is over: no more reports
  bool exited = false;         // pmd reaped
  std::optional<std::string> loss_after_exit;  // host_lost to report once pmd's status is known
  std::vector<std::function<void()>> done;

  void post_event(event e) {
    if (shutdown_sent || !cb.on_event) return;
    asio::post(io, [f = cb.on_event, e = std::move(e)]() mutable { f(std::move(e)); });
  }

  void start_read() {
    if (lost || !sock.is_open()) return;
    sock.async_wait(asio::posix::descriptor_base::wait_read,
                    [self = shared_from_this()](const boost::system::error_code& ec) {
                      if (!ec) self->on_readable();
                    });
  }

  void on_readable() {
    if (lost) return;
    ch::inbox::status st = ch::inbox::status::open;
    try {
      st = inbox.receive(sock.native_handle());
      while (auto in = inbox.next()) {
        handle(std::move(*in));
        if (lost) return;
      }
    } catch (const pm::error& e) {
      lose(e.what());
      return;
    }
    if (st == ch::inbox::status::closed) {
      // pmd closed the channel: say why once its exit status is known.
      close_channel();
      if (!shutdown_sent) loss_after_exit = "agent channel closed";
      return;
    }
    start_read();
  }

  void handle(ch::incoming in) {
    std::visit(
        [&](auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, ch::hello>) {
            if (m.version != ch::protocol_version) {
              lose("the agent speaks protocol version " + std::to_string(m.version) +
                   ", this launcher speaks " + std::to_string(ch::protocol_version));
            }
          } else if constexpr (std::is_same_v<T, ch::started>) {
            // Output first, so that the output layer owns the pipes before the rank counts.
            for (std::size_t i = 0; i < in.fds.size(); ++i) {
              const int fd = in.fds[i].release();
              const stream_kind k = i == 0 ? stream_kind::out : stream_kind::err;
              if (cb.on_output_fd && !shutdown_sent) {
                asio::post(io, [f = cb.on_output_fd, r = m.rank, k, fd] { f(r, k, fd); });
              } else {
                ::close(fd);
              }
            }
            post_event(rank_started{m.rank, m.pid});
          } else if constexpr (std::is_same_v<T, ch::spawn_failed>) {
            post_event(rank_spawn_failed{m.rank, m.code, m.reason});
          } else if constexpr (std::is_same_v<T, ch::exited>) {
            post_event(rank_exited{m.rank, m.status});
          } else if constexpr (std::is_same_v<T, ch::shutdown_done>) {
            // pmd exits next; the pidfd says when.
          } else if constexpr (std::is_same_v<T, ch::heartbeat>) {
            // A local pmd is watched by its pidfd and socket; a heartbeat only says it lives.
          } else if constexpr (std::is_same_v<T, ch::agent_error>) {
            lose("agent: " + m.text);
          } else {
            lose("agent channel: unexpected '" + std::string(ch::type_name(in.msg)) +
                 "' message from the agent");
          }
        },
        in.msg);
  }

  void close_channel() {
    lost = true;
    boost::system::error_code ignored;
    sock.close(ignored);  // pmd sees end-of-file and clears everything
  }

  void lose(const std::string& reason) {
    if (lost) return;
    close_channel();
    post_event(host_lost{0, reason});
  }

  void send(const ch::message& m, std::vector<ch::owned_fd> fds = {}) {
    if (lost) return;
    outbox.push(m, std::move(fds));
    flush();
  }

  void flush() {
    if (lost) return;
    std::string err;
    if (!outbox.flush(sock.native_handle(), err)) {
      lose(err);
      return;
    }
    if (outbox.empty() || writing) return;
    writing = true;
    sock.async_wait(asio::posix::descriptor_base::wait_write,
                    [self = shared_from_this()](const boost::system::error_code& ec) {
                      self->writing = false;
                      if (!ec) self->flush();
                    });
  }

  void watch_agent() {
    pidfd.async_wait(asio::posix::descriptor_base::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       if (!ec) self->on_agent_exit();
                     });
  }

  void on_agent_exit() {
    siginfo_t info{};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd.native_handle()), &info,
                 WEXITED | WNOHANG) != 0 ||
        info.si_pid == 0) {
      if (errno == EINTR || info.si_pid == 0) watch_agent();
      return;
    }
    exited = true;
    boost::system::error_code ignored;
    pidfd.close(ignored);
    const std::string how = "the agent pmd (pid " + std::to_string(pid) + ") " + describe(info);
    if (loss_after_exit) {
      post_event(host_lost{0, *loss_after_exit + ": " + how});
      loss_after_exit.reset();
    } else if (!lost && !shutdown_sent) {
      lose(how);
    }
    close_channel();
    for (auto& d : done) asio::post(io, std::move(d));
    done.clear();
  }
};

local_transport::local_transport(boost::asio::io_context& io, transport_callbacks callbacks,
                                 local_transport_options options)
    : impl_(std::make_shared<impl>(io, std::move(callbacks))) {
  const std::string path =
      options.agent_path.empty() ? default_agent_path() : std::move(options.agent_path);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw error(errc::system,
                std::string("cannot create the agent channel: ") + std::strerror(errno));
  }
  ch::owned_fd ours(sv[0]), theirs(sv[1]);
  // pmd reads the channel on its stdin: no descriptor numbering to agree on, and the same
  // command line shape works over ssh later.
  spawn_request req;
  req.path = path;
  req.argv = {path, "--local", "0", "--grace-ms", std::to_string(options.lost_grace.count())};
  for (char** e = environ; *e != nullptr; ++e) req.env.emplace_back(*e);
  req.stdin_fd = theirs.get();
  req.stdout_fd = -1;             // /dev/null: pmd never writes there
  req.stderr_fd = STDERR_FILENO;  // pmd's last-resort diagnostics reach the user
  spawned_process res;
  try {
    res = pm::local::spawn(req);
  } catch (const pm::error& e) {
    throw error(errc::launch, std::string("cannot start the agent: ") + e.what());
  }
  impl_->pid = res.pid;
  impl_->pidfd.assign(res.pidfd);
  impl_->sock.assign(ours.release());
  impl_->sock.non_blocking(true);
  theirs.reset();  // only pmd holds the other end now, so its death is our end-of-file
  impl_->send(ch::hello{ch::protocol_version, 0});
  impl_->start_read();
  impl_->watch_agent();
}

local_transport::~local_transport() {
  impl& s = *impl_;
  if (!s.exited && s.pidfd.is_open()) {
    if (!s.lost && !s.shutdown_sent) {
      s.shutdown_sent = true;
      s.outbox.push(ch::shutdown_request{});
      std::string ignored;
      s.outbox.flush(s.sock.native_handle(), ignored);
    }
    s.shutdown_sent = true;  // no reports from now on
    s.close_channel();
    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(s.pidfd.native_handle()),
                    &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    s.exited = true;
  }
  boost::system::error_code ignored;
  s.pidfd.close(ignored);
  s.sock.close(ignored);
  s.done.clear();
}

void local_transport::spawn(std::uint32_t host, std::vector<rank_launch> ranks, int stdin_fd) {
  if (host != 0) {
    throw error(errc::internal,
                "local transport: host " + std::to_string(host) + " is not this host");
  }
  ch::spawn_request m;
  m.ranks.reserve(ranks.size());
  bool wants_stdin = false;
  for (auto& r : ranks) {
    wants_stdin = wants_stdin || r.stdin_from_launcher;
    m.ranks.push_back(ch::rank_spec{r.rank, std::move(r.path), std::move(r.argv), std::move(r.env),
                                    std::move(r.wdir), r.stdin_from_launcher, r.streams});
  }
  std::vector<ch::owned_fd> fds;
  if (wants_stdin) {
    ch::owned_fd copy(stdin_fd >= 0 ? ::fcntl(stdin_fd, F_DUPFD_CLOEXEC, 3) : -1);
    if (!copy) {
      // No descriptor to give: those ranks read /dev/null instead.
      for (auto& r : m.ranks) r.stdin_from_launcher = false;
    } else {
      fds.push_back(std::move(copy));
    }
  }
  impl_->send(m, std::move(fds));
}

void local_transport::signal(std::uint32_t host, const std::vector<std::uint32_t>& ranks,
                             int signo) {
  if (host != 0) {
    throw error(errc::internal,
                "local transport: host " + std::to_string(host) + " is not this host");
  }
  impl_->send(ch::signal_request{ranks, signo});
}

void local_transport::shutdown(std::function<void()> done) {
  impl& s = *impl_;
  if (s.exited) {
    if (done) boost::asio::post(s.io, std::move(done));
    return;
  }
  if (done) s.done.push_back(std::move(done));
  if (!s.shutdown_sent) {
    s.send(ch::shutdown_request{});
    s.shutdown_sent = true;
  }
}

std::int64_t local_transport::agent_pid() const noexcept {
  return impl_->pid;
}

}  // namespace pm::local
