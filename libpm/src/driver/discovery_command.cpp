#include "driver/discovery_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <optional>

#include "link/socket.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "sys/watched_process.hpp"

extern char** environ;

namespace pm::driver {

namespace asio = boost::asio;

namespace {

constexpr std::size_t most_output = std::size_t{1} << 20;

std::string seconds(std::chrono::milliseconds ms) {
  const auto s = ms.count() / 1000;
  return ms.count() % 1000 == 0 ? std::to_string(s) + " s" : std::to_string(ms.count()) + " ms";
}

}  // namespace

struct discovery_command::state : std::enable_shared_from_this<state> {
  state(asio::io_context& io_, std::string cmd, done_fn d)
      : io(io_), command(std::move(cmd)), done(std::move(d)), out(io_), timer(io_) {}
  asio::io_context& io;
  std::string command;
  done_fn done;
  asio::posix::stream_descriptor out;
  asio::steady_timer timer;
  std::unique_ptr<sys::watched_process> proc;
  std::string text;
  char buf[4096];
  bool eof = false;
  bool too_much = false;
  bool timed_out = false;
  std::optional<sys::exit_check> end;
  std::chrono::milliseconds bound{};

  void read() {
    out.async_read_some(asio::buffer(buf), [self = shared_from_this()](
                                               const boost::system::error_code& ec, std::size_t n) {
      if (ec == asio::error::operation_aborted) return;
      if (n > 0 && !self->too_much) {
        self->text.append(self->buf, n);
        if (self->text.size() > most_output) self->too_much = true;
      }
      if (ec) {
        self->eof = true;
        self->maybe_done();
        return;
      }
      self->read();
    });
  }

  void kill_group() {
    if (proc && !proc->ended()) ::kill(-proc->pid(), SIGKILL);
  }

  void maybe_done() {
    if (!eof || !end || !done) return;
    timer.cancel();
    launch::launcher::discovery found;
    const std::string who = "'" + command + "'";
    if (timed_out) {
      found.failure = who + " was not done within " + seconds(bound) + " (killed)";
    } else if (!end->status || !end->status->success()) {
      found.failure = who + " " + sys::describe(*end);
    } else if (too_much) {
      found.failure = who + " printed more than 1 MiB";
    } else {
      try {
        found.hosts = parse_discovered_hosts(text);
        const auto me = local_host_info();
        for (auto& h : found.hosts) {
          if (me.is_me(h.name)) {
            h.name = me.hostname;
            h.local = true;
          }
        }
      } catch (const pm::error& e) {
        found.failure = who + " printed " + e.what();
      }
    }
    auto d = std::move(done);
    done = nullptr;
    d(std::move(found));
  }
};

discovery_command::discovery_command(asio::io_context& io, std::string command,
                                     std::chrono::milliseconds bound, done_fn done)
    : state_(std::make_shared<state>(io, std::move(command), std::move(done))) {
  auto& s = *state_;
  s.bound = bound;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw error(errc::system, std::string("host discovery: pipe: ") + std::strerror(errno));
  }
  link::owned_fd read_end(fds[0]), write_end(fds[1]);
  sys::spawn_request r;
  r.path = "/bin/sh";
  r.argv = {"sh", "-c", s.command};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) r.env.emplace_back(*e);
  r.stdout_fd = write_end.get();
  r.stderr_fd = STDERR_FILENO;
  r.new_process_group = true;
  s.proc = std::make_unique<sys::watched_process>(io, sys::spawn(r));
  write_end = link::owned_fd();
  s.out.assign(read_end.release());
  std::weak_ptr<state> weak = state_;
  s.proc->on_exit([weak](const sys::exit_check& c) {
    if (auto self = weak.lock()) {
      self->end = c;
      self->maybe_done();
    }
  });
  s.timer.expires_after(bound);
  s.timer.async_wait([weak](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    self->timed_out = true;
    self->kill_group();
  });
  s.read();
}

discovery_command::~discovery_command() {
  auto& s = *state_;
  s.done = nullptr;
  s.timer.cancel();
  boost::system::error_code ignored;
  s.out.close(ignored);
  if (s.proc && !s.proc->ended()) {
    s.kill_group();
    s.proc->stop_now(
        sys::stop_sequence{std::chrono::milliseconds(0), SIGKILL, std::chrono::milliseconds(0), 0});
  }
}

}  // namespace pm::driver
