#include "transport/srun/callback_listener.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <optional>

#include "agent/host_facts.hpp"
#include "pm/error.hpp"
#include "transport/host_address.hpp"
#include "transport/srun/caller_gate.hpp"
#include "transport/srun/connect_back.hpp"
#include "transport/srun/refusal_log.hpp"

namespace pm::srun {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// How long a caller has to send its greeting line.
constexpr std::chrono::seconds greeting_deadline{5};

// The first IPv4 address `name` resolves to, if any (the launcher's route toward the nodes).
std::optional<std::string> ipv4_of(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  std::optional<std::string> out;
  if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) out = text;
  ::freeaddrinfo(found);
  return out;
}

}  // namespace

struct callback_listener::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, listener_options o) : io(context), opts(std::move(o)) {}

  struct caller {
    explicit caller(asio::io_context& io) : sock(io), timer(io) {}
    tcp::socket sock;
    asio::steady_timer timer;
    std::string got;
    std::string peer;
  };

  asio::io_context& io;
  listener_options opts;
  std::string token = fresh_token();
  caller_gate gate{token};
  // One listener on every address (0.0.0.0), or one per address --iface chose, all on one port.
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  refusal_log refusals;
  std::optional<asio::steady_timer> refusal_timer;
  bool refusal_timer_armed = false;
  std::vector<std::string> addresses;
  std::uint16_t port = 0;

  void notice(const std::string& line) const {
    if (opts.notice) opts.notice(line);
  }

  // This machine's addresses for the agents: --iface filters them; the one this machine sends
  // from toward the first node comes first (the nodes most likely reach it there).
  std::vector<std::string> agent_addresses(const std::string& first_node) const {
    std::vector<std::pair<std::string, std::string>> mine;  // address, interface
    for (const auto& a : agent::reachable_addresses()) {
      const auto pct = a.find('%');
      mine.emplace_back(a.substr(0, pct), pct == std::string::npos ? "" : a.substr(pct + 1));
    }
    std::vector<std::string> out;
    for (const auto& [addr, ifname] : mine) {
      bool ok = opts.iface.empty();
      for (const auto& f : opts.iface) ok = ok || net::address_matches(addr, ifname, f);
      if (ok) out.push_back(addr);
    }
    if (out.empty() && !opts.iface.empty()) {
      std::string list;
      for (const auto& f : opts.iface) list += (list.empty() ? "" : ",") + f;
      throw error(errc::launch, "no address of this machine matches --iface " + list +
                                    " for the agents to call back to");
    }
    if (const auto node = ipv4_of(first_node)) {
      if (const auto src = net::source_toward(*node)) {
        const auto it = std::find(out.begin(), out.end(), *src);
        if (it != out.end()) std::rotate(out.begin(), it, it + 1);
      }
    }
    if (out.empty()) out.emplace_back("127.0.0.1");  // nothing else: nodes on this machine only
    return out;
  }

  // Listens for the agents. Without --iface on every address of this machine (the agents are
  // told the addresses that route toward them, but a node may reach another one). With --iface
  // only on the addresses it chose, one listener each on one port: a caller from a network the
  // user left out cannot even connect.
  void listen(const std::string& first_node) {
    addresses = agent_addresses(first_node);
    std::vector<asio::ip::address_v4> binds;
    if (opts.iface.empty()) {
      binds.push_back(asio::ip::address_v4::any());
    } else {
      for (const auto& a : addresses) {
        boost::system::error_code ec;
        const auto address = asio::ip::make_address_v4(a, ec);
        if (!ec) binds.push_back(address);
      }
    }
    std::string failure;
    // Another program may hold the first listener's port on a later address: try a few ports.
    for (int attempt = 0; attempt < 8 && acceptors.empty(); ++attempt) {
      std::vector<std::unique_ptr<tcp::acceptor>> made;
      std::uint16_t chosen = 0;
      try {
        for (const auto& address : binds) {
          auto a = std::make_unique<tcp::acceptor>(io);
          a->open(tcp::v4());
          a->set_option(tcp::acceptor::reuse_address(true));
          a->bind(tcp::endpoint(address, chosen));
          a->listen(4096);
          if (chosen == 0) chosen = a->local_endpoint().port();
          made.push_back(std::move(a));
        }
        acceptors = std::move(made);
        port = chosen;
      } catch (const boost::system::system_error& e) {
        failure = e.what();
      }
    }
    if (acceptors.empty()) {
      throw error(errc::system, "cannot listen for the agents: " + failure);
    }
    for (std::size_t i = 0; i < acceptors.size(); ++i) accept_next(i);
  }

  void accept_next(std::size_t index) {
    if (index >= acceptors.size() || !acceptors[index]) return;
    auto c = std::make_shared<caller>(io);
    acceptors[index]->async_accept(c->sock, [weak = weak_from_this(), c,
                                             index](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || index >= self->acceptors.size() || !self->acceptors[index] ||
          ec == asio::error::operation_aborted) {
        return;
      }
      if (ec) {
        // Out of descriptors, or the like: try again shortly rather than spin.
        auto retry = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
        retry->async_wait([weak, retry, index](const boost::system::error_code& e) {
          auto s = weak.lock();
          if (!e && s) s->accept_next(index);
        });
        return;
      }
      self->greet(c);
      self->accept_next(index);
    });
  }

  void greet(const std::shared_ptr<caller>& c) {
    boost::system::error_code ec;
    const auto remote = c->sock.remote_endpoint(ec);
    c->peer = ec ? std::string("an unknown peer")
                 : remote.address().to_string() + ":" + std::to_string(remote.port());
    c->timer.expires_after(greeting_deadline);
    c->timer.async_wait([weak = weak_from_this(), c](const boost::system::error_code& e) {
      auto self = weak.lock();
      if (e || !self || !c->sock.is_open()) return;
      self->refuse(*c, "no greeting within " + std::to_string(greeting_deadline.count()) + " s",
                   "no greeting");
    });
    read_greeting(c);
  }

  // A refused caller is closed at once; what is said about it is bounded (refusal_log.hpp): its
  // first refusal of a kind from its address in full, the rest counted, one summary line at most
  // every 10 s, and the count left at the job's end.
  void refuse(caller& c, const std::string& why, const std::string& reason) {
    boost::system::error_code ignored;
    c.timer.cancel();
    c.sock.close(ignored);
    if (auto line = refusals.refused(c.peer, reason, why, std::chrono::steady_clock::now())) {
      notice(*line);
    }
    arm_refusal_summary();
  }

  void arm_refusal_summary() {
    const auto due = refusals.summary_due();
    if (!due || refusal_timer_armed) return;
    if (!refusal_timer) refusal_timer.emplace(io);
    refusal_timer_armed = true;
    refusal_timer->expires_at(*due);
    refusal_timer->async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->refusal_timer_armed = false;
      if (auto line = self->refusals.summary(std::chrono::steady_clock::now())) {
        self->notice(*line);
      }
      self->arm_refusal_summary();
    });
  }

  // The job's hosts are all closed: what was counted and not said yet is said now.
  void flush_refusals() {
    if (auto line = refusals.summary(std::chrono::steady_clock::now(), true)) notice(*line);
    if (refusal_timer) refusal_timer->cancel();
    refusal_timer_armed = false;
  }

  void read_greeting(const std::shared_ptr<caller>& c) {
    c->sock.async_wait(tcp::socket::wait_read,
                       [weak = weak_from_this(), c](const boost::system::error_code& ec) {
                         auto self = weak.lock();
                         if (!self || ec || !c->sock.is_open()) return;
                         self->on_greeting_bytes(c);
                       });
  }

  // Reads the greeting and nothing after it: the link's bytes stay in the socket for the link.
  void on_greeting_bytes(const std::shared_ptr<caller>& c) {
    const int fd = c->sock.native_handle();
    char buf[greeting_limit];
    const std::size_t room = greeting_limit - c->got.size();
    const ssize_t n = ::recv(fd, buf, room, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      read_greeting(c);
      return;
    }
    if (n <= 0) {
      refuse(*c, n == 0 ? "closed before its greeting" : std::strerror(errno),
             n == 0 ? "closed before its greeting" : "a broken connection");
      return;
    }
    const auto* nl = static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(n)));
    const auto take =
        nl != nullptr ? static_cast<std::size_t>(nl - buf + 1) : static_cast<std::size_t>(n);
    const ssize_t got = ::recv(fd, buf, take, MSG_DONTWAIT);
    if (got != static_cast<ssize_t>(take)) {
      refuse(*c, "the connection broke during its greeting", "a broken connection");
      return;
    }
    c->got.append(buf, take);
    const auto v = gate.judge(c->got);
    if (v.kind == caller_gate::verdict::refuse) {
      refuse(*c, v.why, v.reason);
      return;
    }
    if (v.kind == caller_gate::verdict::more) {
      read_greeting(c);
      return;
    }
    c->timer.cancel();
    boost::system::error_code ignored;
    c->sock.non_blocking(false, ignored);
    const int stream = c->sock.release(ignored);
    if (opts.accepted) {
      opts.accepted(v.host, stream);
    } else {
      ::close(stream);
    }
  }
};

callback_listener::callback_listener(asio::io_context& io, listener_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}

callback_listener::~callback_listener() {
  for (auto& a : impl_->acceptors) {
    boost::system::error_code ignored;
    if (a) a->close(ignored);
  }
  if (impl_->refusal_timer) impl_->refusal_timer->cancel();
}

void callback_listener::listen(const std::string& first_node) {
  if (impl_->acceptors.empty()) impl_->listen(first_node);
}
bool callback_listener::listening() const noexcept {
  return !impl_->acceptors.empty();
}
const std::vector<std::string>& callback_listener::addresses() const noexcept {
  return impl_->addresses;
}
std::uint16_t callback_listener::port() const noexcept {
  return impl_->port;
}
const std::string& callback_listener::token() const noexcept {
  return impl_->token;
}
void callback_listener::expect(std::uint32_t host, const std::string& node) {
  impl_->gate.expect(host, node);
}
void callback_listener::forget(std::uint32_t host) {
  impl_->gate.forget(host);
}
void callback_listener::flush_refusals() {
  impl_->flush_refusals();
}

}  // namespace pm::srun
