#include "child_agents.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/rank_env.hpp"
#include "pm/error.hpp"
#include "sys/executable.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"

namespace pmd {

namespace ln = pm::link;

namespace {

// Below the largest control frame with room for the message around it, and small enough that one
// child's turn never holds the loop long.
constexpr std::size_t read_chunk = std::size_t{64} << 10;

void non_blocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

child_agents::~child_agents() {
  for (auto& [host, c] : children_) {
    if (!c.pidfd) continue;
    pm::sys::send_signal(c.pidfd.get(), SIGKILL);
    pm::sys::wait_exit(c.pidfd.get());
  }
}

void child_agents::execute(pm::agent::child_action& a) {
  namespace ag = pm::agent;
  if (const auto* s = std::get_if<ag::start_child>(&a)) {
    open(*s);
  } else if (const auto* w = std::get_if<ag::write_child>(&a)) {
    write(w->host, w->bytes);
  } else if (const auto* c = std::get_if<ag::close_child_input>(&a)) {
    if (auto it = children_.find(c->host); it != children_.end()) close_in(it->second);
  } else if (const auto* t = std::get_if<ag::stop_child>(&a)) {
    stop(t->host);
  } else if (const auto* k = std::get_if<ag::kill_child>(&a)) {
    if (auto it = children_.find(k->host); it != children_.end() && it->second.pidfd) {
      pm::sys::send_signal(it->second.pidfd.get(), k->signo);
    }
  }
}

void child_agents::open(const pm::agent::start_child& m) {
  try {
    pm::sys::spawn_request req;
    const auto path = pm::agent::find_variable(env_, "PATH");
    req.path = pm::sys::resolve_executable(
        m.argv.front(), path.empty() ? std::string_view("/usr/bin:/bin") : path, "");
    req.argv = m.argv;
    req.env = env_;
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0) throw pm::error(pm::errc::system, std::strerror(errno));
    ln::owned_fd in_r(in[0]), in_w(in[1]);
    if (::pipe2(out, O_CLOEXEC) != 0) throw pm::error(pm::errc::system, std::strerror(errno));
    ln::owned_fd out_r(out[0]), out_w(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) throw pm::error(pm::errc::system, std::strerror(errno));
    ln::owned_fd err_r(err[0]), err_w(err[1]);
    req.stdin_fd = in_r.get();
    req.stdout_fd = out_w.get();
    req.stderr_fd = err_w.get();
    // ssh ends with this agent even when it is SIGKILLed: no ssh outlives its parent agent.
    req.parent_death_signal = SIGTERM;
    const auto res = pm::sys::spawn(req);
    child& c = children_[m.host];
    c.pid = res.pid;
    c.pidfd.reset(res.pidfd);
    c.in = std::move(in_w);
    c.out = std::move(out_r);
    c.err = std::move(err_r);
    for (const int fd : {c.in.get(), c.out.get(), c.err.get()}) non_blocking(fd);
    hooks_.watch(c.pidfd.get(), EPOLLIN, tag_exit | m.host);
    hooks_.watch(c.err.get(), EPOLLIN, tag_err | m.host);
    c.out_watched = true;
    hooks_.watch(c.out.get(), EPOLLIN, tag_out | m.host);
    if (m.input_closed) close_in(c);  // clearing up already: it only gets end-of-file
  } catch (const std::exception& e) {
    hooks_.report(pm::agent::child_start_failed{m.host, e.what()});
  }
}

void child_agents::write(std::uint32_t host, const std::string& bytes) {
  auto it = children_.find(host);
  if (it == children_.end() || !it->second.in || it->second.closing_in) return;
  it->second.pending_in.append(bytes);
  write_in(host, it->second);
}

void child_agents::write_in(std::uint32_t host, child& c) {
  while (c.in && !c.pending_in.empty()) {
    const ssize_t n = ::write(c.in.get(), c.pending_in.data(), c.pending_in.size());
    if (n > 0) {
      c.pending_in.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!c.in_watched) {
        c.in_watched = true;
        hooks_.watch(c.in.get(), EPOLLOUT, tag_in | host);
      }
      return;
    }
    c.pending_in.clear();  // EPIPE: ssh is ending; its exit says how
  }
  if (c.in_watched && c.in) {
    hooks_.unwatch(c.in.get());
    c.in_watched = false;
  }
  if (c.closing_in) c.in.reset();
}

void child_agents::close_in(child& c) {
  c.closing_in = true;
  if (c.pending_in.empty() || !c.in) {
    if (c.in_watched && c.in) hooks_.unwatch(c.in.get());
    c.in_watched = false;
    c.in.reset();
  }
}

void child_agents::stop(std::uint32_t host) {
  auto it = children_.find(host);
  if (it == children_.end()) return;
  child& c = it->second;
  c.pending_in.clear();
  close_in(c);
  if (!c.pidfd || c.patience) return;
  // SIGTERM only if it has not ended after the patience the launcher gives its own ssh (ssh ends
  // once its agent has; the relay's end sequence sends the last signal).
  pm::link::owned_fd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  itimerspec at{};
  const auto patience = pm::sys::ssh_after_the_link.patience;
  at.it_value.tv_sec = static_cast<time_t>(patience.count() / 1000);
  at.it_value.tv_nsec = static_cast<long>(patience.count() % 1000) * 1000000L;
  if (!timer || ::timerfd_settime(timer.get(), 0, &at, nullptr) != 0) {
    pm::sys::send_signal(c.pidfd.get(), SIGTERM);
    return;
  }
  c.patience = std::move(timer);
  hooks_.watch(c.patience.get(), EPOLLIN, tag_patience | host);
}

void child_agents::patience_over(child& c) {
  if (!c.patience) return;
  hooks_.unwatch(c.patience.get());
  c.patience.reset();
  if (c.pidfd) pm::sys::send_signal(c.pidfd.get(), SIGTERM);
}

void child_agents::read_out(std::uint32_t host, child& c, bool drain) {
  if (!c.out) return;
  static thread_local std::vector<char> buf(read_chunk);
  for (int round = 0; round < 4 || drain; ++round) {
    if (!drain && hooks_.queued() >= max_queued) {
      if (c.out_watched) hooks_.unwatch(c.out.get());
      c.out_watched = false;
      c.paused = true;
      return;
    }
    const ssize_t n = ::read(c.out.get(), buf.data(), buf.size());
    if (n > 0) {
      hooks_.report(
          pm::agent::child_output{host, std::string(buf.data(), static_cast<std::size_t>(n))});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // End of stream: its exit comes next.
    if (c.out_watched) hooks_.unwatch(c.out.get());
    c.out_watched = false;
    c.out.reset();
    return;
  }
}

void child_agents::read_err(std::uint32_t host, child& c) {
  if (!c.err) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.err.get(), buf, sizeof buf);
    if (n > 0) {
      hooks_.report(pm::agent::child_said{host, std::string(buf, static_cast<std::size_t>(n))});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    hooks_.unwatch(c.err.get());
    c.err.reset();
    return;
  }
}

void child_agents::on_exit(std::uint32_t host) {
  auto it = children_.find(host);
  if (it == children_.end() || !it->second.pidfd) return;
  child& c = it->second;
  const auto end = pm::sys::check_exit(c.pidfd.get());
  if (!end.ended) return;
  // Everything it wrote goes first (a pipe holds at most 64 KiB more).
  read_out(host, c, true);
  read_err(host, c);
  pm::agent::child_ended ended{host,
                               end.status && !end.status->is_signal() ? end.status->code() : -1,
                               end.status ? end.status->signal() : 0};
  hooks_.unwatch(c.pidfd.get());
  if (c.out && c.out_watched) hooks_.unwatch(c.out.get());
  if (c.err) hooks_.unwatch(c.err.get());
  if (c.in && c.in_watched) hooks_.unwatch(c.in.get());
  if (c.patience) hooks_.unwatch(c.patience.get());
  children_.erase(it);
  hooks_.report(ended);
}

void child_agents::on_event(std::uint64_t tag) {
  const auto host = static_cast<std::uint32_t>(tag & 0xffffffffull);
  const auto kind = tag & (0xffull << 56);
  if (kind == tag_exit) {
    on_exit(host);
    return;
  }
  auto it = children_.find(host);
  if (it == children_.end()) return;
  if (kind == tag_out) {
    read_out(host, it->second, false);
  } else if (kind == tag_err) {
    read_err(host, it->second);
  } else if (kind == tag_in) {
    write_in(host, it->second);
  } else if (kind == tag_patience) {
    patience_over(it->second);
  }
}

void child_agents::resume() {
  if (hooks_.queued() >= max_queued) return;
  for (auto& [host, c] : children_) {
    if (!c.paused || !c.out) continue;
    c.paused = false;
    c.out_watched = true;
    hooks_.watch(c.out.get(), EPOLLIN, tag_out | host);
  }
}

bool child_agents::owns(pid_t pid) const {
  for (const auto& [host, c] : children_) {
    if (c.pid == pid) return true;
  }
  return false;
}

}  // namespace pmd
