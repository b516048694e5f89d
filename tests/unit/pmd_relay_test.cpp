// pmd's PMIx relay (tools/pmd/tcp_relay.hpp) between real sockets: ranks' TCP connections on
// 127.0.0.1, a Unix socket standing for the server. What is checked is the order in which the
// server learns that clients left: one at a time, each once the server closed the last one's end
// (libpmix 4.2.2 answers a fence of this host's ranks again for every further loss it handles in
// one pass, and the second answer meets a freed fence: docs/pmix.md, "Clients that leave
// together").
#include "tcp_relay.hpp"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "link/socket.hpp"
#include "support/pmix_handshake_bytes.hpp"
#include "support/scratch_dir.hpp"

namespace {

using pm::link::owned_fd;

constexpr std::uint64_t tag_base = std::uint64_t{1} << 56;

// A relay fed by its own epoll set, with the ranks' listener and the server's.
class relay_bench {
 public:
  relay_bench() : dir_("pmd-relay"), path_(dir_.file("server")) {
    epoll_ = owned_fd(::epoll_create1(EPOLL_CLOEXEC));
    server_ = owned_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path_.c_str());
    EXPECT_EQ(::bind(server_.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(server_.get(), 16), 0);
    ranks_ = owned_fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(ranks_.get(), reinterpret_cast<const sockaddr*>(&in), sizeof in), 0);
    EXPECT_EQ(::listen(ranks_.get(), 16), 0);
    socklen_t len = sizeof in;
    ::getsockname(ranks_.get(), reinterpret_cast<sockaddr*>(&in), &len);
    port_ = in.sin_port;
    pmd::tcp_relay::options o;
    o.owner = ::geteuid();
    o.server = [this]() -> std::optional<std::string> { return path_; };
    o.say = [this](const std::string& line) { said_.push_back(line); };
    relay_.emplace(epoll_.get(), tag_base, std::move(o));
  }

  // A rank connects through the relay and sends its handshake; returns its socket and the
  // server's end of the relayed connection (the handshake read from it).
  std::pair<owned_fd, owned_fd> connect_rank() {
    owned_fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    in.sin_port = port_;
    EXPECT_EQ(::connect(client.get(), reinterpret_cast<const sockaddr*>(&in), sizeof in), 0);
    relay_->add(owned_fd(::accept4(ranks_.get(), nullptr, nullptr, SOCK_CLOEXEC)));
    const auto hello = pm::test::handshake(0).bytes();
    EXPECT_EQ(::send(client.get(), hello.data(), hello.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(hello.size()));
    pump();
    owned_fd server_end(::accept4(server_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    EXPECT_TRUE(server_end);
    std::vector<char> got(hello.size());
    std::size_t have = 0;
    while (have < got.size()) {
      const ssize_t n = ::recv(server_end.get(), got.data() + have, got.size() - have, 0);
      if (n <= 0) break;
      have += static_cast<std::size_t>(n);
    }
    EXPECT_EQ(have, hello.size());
    return {std::move(client), std::move(server_end)};
  }

  // Runs the relay until its sockets are quiet for 100 ms.
  void pump() {
    epoll_event ev[16];
    for (;;) {
      const int n = ::epoll_wait(epoll_.get(), ev, 16, 100);
      if (n <= 0) return;
      for (int i = 0; i < n; ++i) {
        if (relay_->owns(ev[i].data.u64)) relay_->on_event(ev[i].data.u64, ev[i].events);
      }
    }
  }

  pmd::tcp_relay& relay() { return *relay_; }
  void end_relay() { relay_.reset(); }
  const std::vector<std::string>& said() const { return said_; }

 private:
  pm::test::scratch_dir dir_;
  std::string path_;
  owned_fd epoll_, server_, ranks_;
  in_port_t port_ = 0;
  std::vector<std::string> said_;
  std::optional<pmd::tcp_relay> relay_;
};

// True when the server's end reads end-of-stream (the relay shut its side), false while it is
// open and quiet.
bool ended(const owned_fd& server_end) {
  char c;
  const ssize_t n = ::recv(server_end.get(), &c, 1, MSG_DONTWAIT);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == EAGAIN)) << "n " << n << " errno " << errno;
  return n == 0;
}

std::vector<std::size_t> ended_ones(const std::vector<owned_fd>& server_ends) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < server_ends.size(); ++i) {
    if (server_ends[i] && ended(server_ends[i])) out.push_back(i);
  }
  return out;
}

// `n` ranks connected through the relay: their sockets and the server's ends.
void connect_ranks(relay_bench& bench, int n, std::vector<owned_fd>& clients,
                   std::vector<owned_fd>& server_ends) {
  for (int i = 0; i < n; ++i) {
    auto [client, server_end] = bench.connect_rank();
    clients.push_back(std::move(client));
    server_ends.push_back(std::move(server_end));
  }
}

TEST(PmdRelay, RanksThatLeaveTogetherReachTheServerOneAtATime) {
  relay_bench bench;
  std::vector<owned_fd> clients, server_ends;
  connect_ranks(bench, 4, clients, server_ends);
  ASSERT_EQ(bench.relay().size(), 4u);
  EXPECT_TRUE(ended_ones(server_ends).empty());

  clients.clear();  // the four ranks die at once
  bench.pump();
  for (int left = 4; left > 0; --left) {
    const auto now = ended_ones(server_ends);
    ASSERT_EQ(now.size(), 1u) << left << " left";
    // The server handles the loss and closes its end; only then is the next one told.
    server_ends[now[0]].reset();
    bench.pump();
  }
  EXPECT_EQ(bench.relay().size(), 0u);
  EXPECT_TRUE(bench.said().empty());
}

TEST(PmdRelay, AServerThatClosesAWaitingOnesEndItselfDoesNotHoldUpTheRest) {
  relay_bench bench;
  std::vector<owned_fd> clients, server_ends;
  connect_ranks(bench, 3, clients, server_ends);
  clients.clear();
  bench.pump();
  auto now = ended_ones(server_ends);
  ASSERT_EQ(now.size(), 1u);
  // The server drops a waiting one on its own (as PMIx_server_deregister_client does), then the
  // one it was told of: the last one is told next.
  const std::size_t told = now[0];
  const std::size_t dropped = (told + 1) % 3;
  server_ends[dropped].reset();
  bench.pump();
  EXPECT_EQ(ended_ones(server_ends), std::vector<std::size_t>{told});  // no one else yet
  server_ends[told].reset();
  bench.pump();
  now = ended_ones(server_ends);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0], 3 - told - dropped);
  server_ends[now[0]].reset();
  bench.pump();
  EXPECT_EQ(bench.relay().size(), 0u);
}

TEST(PmdRelay, AtPmdsEndTheServersSidesStayOpenUntilTheRelayGoes) {
  relay_bench bench;
  std::vector<owned_fd> clients, server_ends;
  connect_ranks(bench, 3, clients, server_ends);
  bench.relay().close_all();
  // The ranks' sides are closed...
  char c;
  for (const auto& client : clients) EXPECT_EQ(::recv(client.get(), &c, 1, 0), 0);
  // ...the server's are not: it is never told of three losses at once.
  EXPECT_TRUE(ended_ones(server_ends).empty());
  bench.end_relay();
  EXPECT_EQ(ended_ones(server_ends).size(), 3u);
}

}  // namespace
