#include "transport/relay/relay_transport.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "pm/error.hpp"
#include "pm/exit_status.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm::relay {

namespace asio = boost::asio;

agent_end child_end(const link::child_closed& c, const pm::host& child,
                    const std::string& agent_path, const std::string& parent_name,
                    bool established) {
  agent_end e;
  if (c.code == 0 && c.signo == 0) return e;
  if (c.code == -1 && c.signo == 0) {
    e.how = "the agent on " + parent_name + " could not start ssh to " + child.name;
    if (!c.said.empty()) e.how += ": " + c.said;
    return e;
  }
  if (c.signo != 0) {
    e.how = "ssh from " + parent_name + " was killed by " + signal_name(c.signo);
    if (!c.said.empty()) e.how += ": " + c.said;
    return e;
  }
  // The flat launch's words (ssh::ssh_end), and the parent that ran the ssh.
  e = ssh::ssh_end(child, agent_path, c.code, 0, established, {});
  e.how += ", from " + parent_name;
  const bool killed = established && c.code > 128 && c.code <= 128 + 64;
  if (!c.said.empty() && !killed) e.how += ": " + c.said;
  e.retryable = c.code == 255 && !established && !ssh::ssh_failure_is_final(c.said);
  return e;
}

struct relay_transport::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, remote_launch o, relay_hooks h)
      : io(context), opts(std::move(o)), hooks(std::move(h)) {}

  enum class stage { queued, running, ended };
  struct child {
    std::uint32_t parent = 0;
    agent_target target;
    std::function<void(agent_stream)> opened;
    std::function<void(std::string)> failed;
    stage st = stage::queued;
    bool established = false;
    bool counted = false;                                 // holds one of its parent's set-up slots
    std::unique_ptr<asio::posix::stream_descriptor> end;  // the relay's end of the pair
    std::string to_link;  // child_data not yet written into it, from to_link_done on
    std::size_t to_link_done = 0;
    bool writing = false;
    bool close_after_write = false;
    agent_end how;
    std::vector<std::function<void(agent_end)>> waiting;
    std::unique_ptr<asio::steady_timer> close_timer;
  };
  struct parent_state {
    bool greeted = false;
    bool down = false;
    std::uint32_t setting_up = 0;
    std::deque<std::uint32_t> queue;
  };

  asio::io_context& io;
  remote_launch opts;
  relay_hooks hooks;
  std::unordered_map<std::uint32_t, child> children;
  std::unordered_map<std::uint32_t, parent_state> parents;
  std::vector<char> buffer = std::vector<char>(std::size_t{64} << 10);

  std::uint32_t cap() const { return std::max<std::uint32_t>(1, opts.max_concurrent); }

  void start_ready(std::uint32_t parent) {
    auto& p = parents[parent];
    while (p.greeted && !p.down && p.setting_up < cap() && !p.queue.empty()) {
      const auto host = p.queue.front();
      p.queue.pop_front();
      start(host);
    }
  }

  void start(std::uint32_t host) {
    auto& c = children.at(host);
    if (c.st != stage::queued) return;
    std::vector<std::string> argv;
    try {
      ssh::ssh_settings s;
      if (!opts.rsh_agent.empty()) s.agent = opts.rsh_agent;
      s.extra_args = opts.rsh_args;
      argv = ssh::ssh_argv(s, c.target.info, c.target.agent_argv);
    } catch (const pm::error& e) {
      c.st = stage::ended;
      asio::post(io, [f = std::move(c.failed), what = std::string(e.what())] { f(what); });
      return;
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      c.st = stage::ended;
      asio::post(io, [f = std::move(c.failed), what = std::string(std::strerror(errno))] {
        f("cannot create a socket pair: " + what);
      });
      return;
    }
    c.st = stage::running;
    c.counted = true;
    ++parents[c.parent].setting_up;
    c.end = std::make_unique<asio::posix::stream_descriptor>(io, pair[1]);
    c.end->non_blocking(true);
    hooks.send(c.parent, link::child_open{host, std::move(argv)});
    read_link(host);
    agent_stream s;
    s.read_fd = pair[0];
    s.write_fd = pair[0];
    s.socket = false;  // bytes only: no descriptor crosses a relay
    asio::post(io, [f = std::move(c.opened), s] { f(s); });
  }

  void release_slot(child& c) {
    if (!c.counted) return;
    c.counted = false;
    auto& p = parents[c.parent];
    if (p.setting_up > 0) --p.setting_up;
    start_ready(c.parent);
  }

  // Bytes the host's link wrote: to its parent, as child_data.
  void read_link(std::uint32_t host) {
    auto& c = children.at(host);
    if (!c.end || c.st != stage::running) return;
    c.end->async_wait(asio::posix::descriptor_base::wait_read,
                      [weak = weak_from_this(), host](const boost::system::error_code& ec) {
                        auto self = weak.lock();
                        if (!ec && self) self->on_link_bytes(host);
                      });
  }

  void on_link_bytes(std::uint32_t host) {
    auto& c = children.at(host);
    if (!c.end || c.st != stage::running) return;
    for (int round = 0; round < 16; ++round) {
      const ssize_t n = ::read(c.end->native_handle(), buffer.data(), buffer.size());
      if (n > 0) {
        hooks.send(c.parent,
                   link::child_data{host, std::string(buffer.data(), static_cast<std::size_t>(n))});
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      return;  // the host_link closed its end: close() follows
    }
    read_link(host);
  }

  void write_link(std::uint32_t host) {
    auto& c = children.at(host);
    if (!c.end || c.writing) return;
    while (c.to_link_done < c.to_link.size()) {
      // send, not write: a host_link that closed its end must not raise SIGPIPE in a program
      // that embeds libpm.
      const ssize_t n = ::send(c.end->native_handle(), c.to_link.data() + c.to_link_done,
                               c.to_link.size() - c.to_link_done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        // An offset, not erase: megabytes of output must not be moved for every write.
        c.to_link_done += static_cast<std::size_t>(n);
        if (c.to_link_done == c.to_link.size()) {
          c.to_link.clear();
          c.to_link_done = 0;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        c.writing = true;
        c.end->async_wait(asio::posix::descriptor_base::wait_write,
                          [weak = weak_from_this(), host](const boost::system::error_code& ec) {
                            auto self = weak.lock();
                            if (!self) return;
                            self->children.at(host).writing = false;
                            if (!ec) self->write_link(host);
                          });
        return;
      }
      c.to_link.clear();  // the host_link is gone
      c.to_link_done = 0;
    }
    if (c.close_after_write) close_end(c);
  }

  void close_end(child& c) {
    boost::system::error_code ignored;
    if (c.end) c.end->close(ignored);
    c.end.reset();
  }

  // The host's stream is over (`how`): the host_link reads what is left, then end-of-file.
  void end(std::uint32_t host, agent_end how, bool drain) {
    auto& c = children.at(host);
    if (c.st == stage::ended) return;
    const bool was_queued = c.st == stage::queued;
    c.st = stage::ended;
    c.how = std::move(how);
    c.close_timer.reset();
    release_slot(c);
    if (was_queued) {
      // Its link never got a stream: it fails with the line.
      auto& q = parents[c.parent].queue;
      std::erase(q, host);
      asio::post(io, [f = std::move(c.failed), line = c.how.how] { f(line); });
    } else if (drain && !c.to_link.empty()) {
      c.close_after_write = true;
      write_link(host);
    } else {
      close_end(c);
    }
    finish(host);
  }

  void finish(std::uint32_t host) {
    auto& c = children.at(host);
    if (c.st != stage::ended) return;
    for (auto& d : c.waiting) asio::post(io, [d = std::move(d), e = c.how] { d(e); });
    c.waiting.clear();
  }
};

relay_transport::relay_transport(asio::io_context& io, remote_launch options, relay_hooks hooks)
    : impl_(std::make_shared<impl>(io, std::move(options), std::move(hooks))) {}

relay_transport::~relay_transport() = default;

void relay_transport::open(const agent_target& target, std::function<void(agent_stream)> opened,
                           std::function<void(std::string reason)> failed) {
  const std::uint32_t host = target.host;
  const std::uint32_t parent = impl_->hooks.parent_of(host);
  auto& c = impl_->children[host];
  c = impl::child{};
  c.parent = parent;
  c.target = target;
  c.target.environment.clear();  // the launcher's environment never reaches another host
  c.opened = std::move(opened);
  c.failed = std::move(failed);
  auto& p = impl_->parents[parent];
  if (p.down) {
    impl_->end(host,
               agent_end{"host " + impl_->hooks.name_of(parent) +
                             ", whose agent was to start this one, was lost",
                         false},
               false);
    return;
  }
  p.queue.push_back(host);
  impl_->start_ready(parent);
}

void relay_transport::established(std::uint32_t host) {
  auto it = impl_->children.find(host);
  if (it == impl_->children.end()) return;
  it->second.established = true;
  impl_->release_slot(it->second);
}

void relay_transport::close(std::uint32_t host, std::function<void(agent_end)> done) {
  auto it = impl_->children.find(host);
  if (it == impl_->children.end()) {
    boost::asio::post(impl_->io, [done = std::move(done)] { done({}); });
    return;
  }
  auto& c = it->second;
  c.waiting.push_back(std::move(done));
  if (c.st == impl::stage::ended) {
    impl_->finish(host);
    return;
  }
  if (c.st == impl::stage::queued) {
    impl_->end(host, {}, false);
    return;
  }
  // Running: the parent ends the ssh (stdin closed, SIGTERM) and says how with child_closed; a
  // parent that cannot is lost, which ends it too. Bounded all the same.
  impl_->hooks.send(c.parent, link::child_close{host});
  if (!c.close_timer) {
    c.close_timer = std::make_unique<boost::asio::steady_timer>(impl_->io, std::chrono::seconds(3));
    c.close_timer->async_wait(
        [weak = std::weak_ptr<impl>(impl_), host](const boost::system::error_code& ec) {
          auto self = weak.lock();
          if (!ec && self) self->end(host, {}, false);
        });
  }
}

void relay_transport::parent_greeted(std::uint32_t parent) {
  auto it = impl_->parents.find(parent);
  if (it == impl_->parents.end()) {
    impl_->parents[parent].greeted = true;
    return;
  }
  it->second.greeted = true;
  impl_->start_ready(parent);
}

void relay_transport::from_parent(std::uint32_t parent, link::message& m) {
  if (auto* d = std::get_if<link::child_data>(&m)) {
    auto it = impl_->children.find(d->host);
    if (it == impl_->children.end() || it->second.parent != parent ||
        it->second.st != impl::stage::running) {
      return;
    }
    auto& c = it->second;
    if (c.to_link.empty()) {
      c.to_link = std::move(d->bytes);
    } else {
      if (c.to_link_done >= c.to_link.size() / 2) {  // the written half goes, amortised
        c.to_link.erase(0, c.to_link_done);
        c.to_link_done = 0;
      }
      c.to_link.append(d->bytes);
    }
    impl_->write_link(d->host);
  } else if (auto* c = std::get_if<link::child_closed>(&m)) {
    auto it = impl_->children.find(c->host);
    if (it == impl_->children.end() || it->second.parent != parent) return;
    const auto& ch = it->second;
    const std::string agent_path =
        ch.target.agent_argv.empty() ? std::string() : ch.target.agent_argv.front();
    impl_->end(
        c->host,
        child_end(*c, ch.target.info, agent_path, impl_->hooks.name_of(parent), ch.established),
        true);
  }
}

void relay_transport::parent_down(std::uint32_t parent) {
  auto& p = impl_->parents[parent];
  if (p.down) return;
  p.down = true;
  const agent_end how{"host " + impl_->hooks.name_of(parent) + ", which relayed its link, was lost",
                      false};
  std::vector<std::uint32_t> mine;
  for (const auto& [host, c] : impl_->children) {
    if (c.parent == parent && c.st != impl::stage::ended) mine.push_back(host);
  }
  for (const auto host : mine) impl_->end(host, how, false);
}

}  // namespace pm::relay
