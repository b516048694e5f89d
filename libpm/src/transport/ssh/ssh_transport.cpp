#include "transport/ssh/ssh_transport.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "link/socket.hpp"
#include "pm/error.hpp"
#include "pm/exit_status.hpp"
#include "sys/executable.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "sys/watched_process.hpp"
#include "text/printable.hpp"
#include "transport/ssh/ssh_command.hpp"

extern char** environ;

namespace pm::ssh {

namespace {

namespace asio = boost::asio;

// When the transport goes: no waiting for ssh to end by itself.
constexpr sys::stop_sequence at_once{
    .first_signal = SIGTERM, .grace = std::chrono::milliseconds(1000), .last_signal = SIGKILL};

}  // namespace

struct ssh_transport::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, remote_launch o) : io(context), opts(std::move(o)) {}

  struct connection {
    std::unique_ptr<sys::watched_process> process;
    std::unique_ptr<asio::posix::stream_descriptor> err;  // ssh's stderr
    std::string stderr_text;                              // its last 8 KiB
    pm::host host;
    std::string agent_path;
    bool established = false;
    bool counted = false;  // holds one of the max_concurrent set-up slots
    std::vector<std::function<void(agent_end)>> waiting;
    bool exited() const { return process && process->ended(); }
  };
  struct queued {
    agent_target target;
    std::function<void(agent_stream)> opened;
    std::function<void(std::string)> failed;
  };

  asio::io_context& io;
  remote_launch opts;
  std::unordered_map<std::uint32_t, connection> conns;
  std::deque<queued> waiting_to_start;
  std::uint32_t setting_up = 0;
  // Capacity ssh's output pipes may still be given beyond the default (F_SETPIPE_SZ counts against
  // the user's pipe-user-pages-soft, 64 MiB, beyond which new pipes get one page).
  std::size_t pipe_budget = std::size_t{16} << 20;

  ssh_settings settings() const {
    ssh_settings s;
    if (!opts.rsh_agent.empty()) s.agent = opts.rsh_agent;
    s.extra_args = opts.rsh_args;
    return s;
  }

  void start(queued q) {
    const std::uint32_t host = q.target.host;
    try {
      const auto argv = ssh_argv(settings(), q.target.info, q.target.agent_argv);
      int in[2], out[2], err[2];
      if (::pipe2(in, O_CLOEXEC) != 0) throw error(errc::system, std::strerror(errno));
      link::owned_fd in_r(in[0]), in_w(in[1]);
      if (::pipe2(out, O_CLOEXEC) != 0) throw error(errc::system, std::strerror(errno));
      link::owned_fd out_r(out[0]), out_w(out[1]);
      // Every output frame of the host comes through it: a larger pipe lets ssh write on while
      // pmrun is busy, and pmrun take more per wake-up (best effort, while the budget lasts).
      constexpr std::size_t bigger = std::size_t{1} << 20;
      if (pipe_budget >= bigger &&
          ::fcntl(out_r.get(), F_SETPIPE_SZ, static_cast<int>(bigger)) >= 0)
        pipe_budget -= bigger;
      if (::pipe2(err, O_CLOEXEC) != 0) throw error(errc::system, std::strerror(errno));
      link::owned_fd err_r(err[0]), err_w(err[1]);
      sys::spawn_request req;
      req.path = argv.front();
      // The same lookup as a rank's program, in this process's PATH.
      const char* path = std::getenv("PATH");
      try {
        req.path = sys::resolve_executable(req.path, path != nullptr ? path : "/usr/bin:/bin", "");
      } catch (const pm::error& e) {
        throw error(errc::launch, std::string("the remote shell command: ") + e.what() +
                                      " (set plm_rsh_agent or PM_RSH_AGENT)");
      }
      req.argv = argv;
      for (char** e = environ; *e != nullptr; ++e) req.env.emplace_back(*e);
      req.stdin_fd = in_r.get();
      req.stdout_fd = out_w.get();
      req.stderr_fd = err_w.get();
      sys::spawned_process res;
      try {
        res = sys::spawn(req);
      } catch (const pm::error& e) {
        throw error(errc::launch, std::string("cannot start ssh: ") + e.what());
      }
      auto& c = conns[host];
      c = connection{};
      c.process = std::make_unique<sys::watched_process>(io, res);
      c.err = std::make_unique<asio::posix::stream_descriptor>(io, err_r.release());
      c.err->non_blocking(true);
      c.counted = true;
      c.host = q.target.info;
      c.agent_path = q.target.agent_argv.empty() ? std::string() : q.target.agent_argv.front();
      ++setting_up;
      c.process->on_exit([weak = weak_from_this(), host](const sys::exit_check&) {
        if (auto self = weak.lock()) self->on_exit(host);
      });
      read_stderr(host);
      agent_stream s;
      s.read_fd = out_r.release();
      s.write_fd = in_w.release();
      s.socket = false;
      s.pid = res.pid;
      asio::post(io, [opened = std::move(q.opened), s] { opened(s); });
    } catch (const pm::error& e) {
      asio::post(io,
                 [failed = std::move(q.failed), what = std::string(e.what())] { failed(what); });
    }
  }

  void release_slot(connection& c) {
    if (!c.counted) return;
    c.counted = false;
    --setting_up;
    while (!waiting_to_start.empty() &&
           setting_up < std::max<std::uint32_t>(1, opts.max_concurrent)) {
      auto q = std::move(waiting_to_start.front());
      waiting_to_start.pop_front();
      start(std::move(q));
    }
  }

  void read_stderr(std::uint32_t host) {
    auto& c = conns[host];
    if (!c.err) return;
    c.err->async_wait(asio::posix::descriptor_base::wait_read,
                      [self = shared_from_this(), host](const boost::system::error_code& ec) {
                        if (ec) return;
                        auto& cc = self->conns[host];
                        if (!cc.err) return;
                        char buf[4096];
                        for (;;) {
                          const ssize_t n = ::read(cc.err->native_handle(), buf, sizeof buf);
                          if (n > 0) {
                            cc.stderr_text.append(buf, static_cast<std::size_t>(n));
                            if (cc.stderr_text.size() > 8192) {
                              cc.stderr_text.erase(0, cc.stderr_text.size() - 8192);
                            }
                            continue;
                          }
                          if (n < 0 && errno == EINTR) continue;
                          if (n < 0 && errno == EAGAIN) {
                            self->read_stderr(host);
                            return;
                          }
                          boost::system::error_code ignored;
                          cc.err->close(ignored);
                          return;
                        }
                      });
  }

  void on_exit(std::uint32_t host) {
    auto& c = conns[host];
    // What ssh printed last may still be in the pipe.
    if (c.err) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(c.err->native_handle(), buf, sizeof buf)) > 0) {
        c.stderr_text.append(buf, static_cast<std::size_t>(n));
      }
    }
    release_slot(c);
    finish(host);
  }

  agent_end end_of(const connection& c) const {
    // Before the hello the exit status says what went wrong (127 no pmd there, 255 ssh itself);
    // after it, 128+N is the agent killed by signal N (ssh_end). -1: its status is lost.
    const auto& status = c.process->end().status;
    const int code = status && !status->is_signal() ? status->code() : -1;
    const int signo = status ? status->signal() : 0;
    return ssh_end(c.host, c.agent_path, code, signo, c.established,
                   text::last_line(c.stderr_text));
  }

  void finish(std::uint32_t host) {
    auto& c = conns[host];
    if (!c.exited()) return;
    for (auto& d : c.waiting) asio::post(io, [d = std::move(d), e = end_of(c)] { d(e); });
    c.waiting.clear();
  }
};

ssh_transport::ssh_transport(asio::io_context& io, remote_launch options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}

ssh_transport::~ssh_transport() {
  for (auto& [host, c] : impl_->conns) {
    if (c.process) c.process->stop_now(at_once);
  }
}

void ssh_transport::open(const agent_target& target, std::function<void(agent_stream)> opened,
                         std::function<void(std::string reason)> failed) {
  impl::queued q{target, std::move(opened), std::move(failed)};
  if (impl_->setting_up >= std::max<std::uint32_t>(1, impl_->opts.max_concurrent)) {
    impl_->waiting_to_start.push_back(std::move(q));
    return;
  }
  impl_->start(std::move(q));
}

void ssh_transport::established(std::uint32_t host) {
  auto it = impl_->conns.find(host);
  if (it == impl_->conns.end()) return;
  it->second.established = true;
  impl_->release_slot(it->second);
}

void ssh_transport::close(std::uint32_t host, std::function<void(agent_end)> done) {
  // A start still waiting for a set-up slot never begins (a launch that ends while many hosts
  // are still queued behind --max-ssh).
  std::erase_if(impl_->waiting_to_start,
                [host](const impl::queued& q) { return q.target.host == host; });
  auto it = impl_->conns.find(host);
  if (it == impl_->conns.end()) {
    boost::asio::post(impl_->io, [done = std::move(done)] { done({}); });
    return;
  }
  auto& c = it->second;
  c.waiting.push_back(std::move(done));
  if (c.exited()) {
    impl_->finish(host);
    return;
  }
  c.process->stop(sys::ssh_after_the_link);
}

}  // namespace pm::ssh
