// The tree launch's launcher side (transport/relay): the line for a child's ssh that ended, and
// the relay itself over real socket pairs and a real io_context: child_open goes to the parent
// only once it is greeted, bytes cross both ways as child_data, child_closed ends the stream
// (255 before the hello may be retried), a parent that is lost ends its children at once.
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <optional>
#include <string>
#include <vector>

#include "link/messages.hpp"
#include "transport/relay/relay_transport.hpp"

namespace {

using namespace std::chrono_literals;
namespace ln = pm::link;

pm::host named(std::string name) {
  pm::host h;
  h.name = std::move(name);
  return h;
}

TEST(RelayChildEnd, ExitZeroSaysNothing) {
  const auto e =
      pm::relay::child_end(ln::child_closed{3, 0, 0, ""}, named("node4"), "/x/pmd", "node1", true);
  EXPECT_TRUE(e.how.empty());
  EXPECT_FALSE(e.retryable);
}

TEST(RelayChildEnd, SshFailureBeforeTheHelloNamesBothHostsAndMayBeRetried) {
  const auto e =
      pm::relay::child_end(ln::child_closed{3, 255, 0, "Connection closed by 10.0.0.4 port 22"},
                           named("node4"), "/x/pmd", "node1", false);
  EXPECT_NE(e.how.find("node4"), std::string::npos) << e.how;
  EXPECT_NE(e.how.find("from node1"), std::string::npos) << e.how;
  EXPECT_NE(e.how.find("Connection closed"), std::string::npos) << e.how;
  EXPECT_TRUE(e.retryable);  // what sshd's MaxStartups does under a burst
  // A refused connection is final: trying again at once would only delay the line.
  const auto refused = pm::relay::child_end(ln::child_closed{3, 255, 0, "Connection refused"},
                                            named("node4"), "/x/pmd", "node1", false);
  EXPECT_NE(refused.how.find("Connection refused"), std::string::npos) << refused.how;
  EXPECT_FALSE(refused.retryable);
  const auto later = pm::relay::child_end(ln::child_closed{3, 255, 0, ""}, named("node4"), "/x/pmd",
                                          "node1", true);
  EXPECT_FALSE(later.retryable);  // after the hello the job may have run: never again
}

TEST(RelayChildEnd, AMissingAgentAndASignalAndNoSshAreSaid) {
  auto e = pm::relay::child_end(ln::child_closed{3, 127, 0, ""}, named("node4"), "/x/pmd", "node1",
                                false);
  EXPECT_NE(e.how.find("not found on node4"), std::string::npos) << e.how;
  e = pm::relay::child_end(ln::child_closed{3, 137, 0, "bash: line 1: 7 Killed"}, named("node4"),
                           "/x/pmd", "node1", true);
  EXPECT_EQ(e.how, "the agent pmd on node4 was killed by SIGKILL, from node1") << e.how;
  e = pm::relay::child_end(ln::child_closed{3, -1, 9, ""}, named("node4"), "/x/pmd", "node1", true);
  EXPECT_NE(e.how.find("SIGKILL"), std::string::npos) << e.how;
  e = pm::relay::child_end(ln::child_closed{3, -1, 0, "no ssh"}, named("node4"), "/x/pmd", "node1",
                           false);
  EXPECT_NE(e.how.find("could not start ssh to node4: no ssh"), std::string::npos) << e.how;
  EXPECT_FALSE(e.retryable);
}

struct relay_rig {
  boost::asio::io_context io;
  std::vector<std::pair<std::uint32_t, ln::message>> sent;  // (parent, message)
  std::unique_ptr<pm::relay::relay_transport> relay;
  std::optional<pm::agent_stream> stream;
  std::optional<std::string> failure;

  relay_rig() {
    pm::remote_launch opts;
    opts.rsh_agent = {"ssh", "-F", "/cfg"};
    pm::relay::relay_hooks h;
    h.send = [this](std::uint32_t parent, const ln::message& m) { sent.emplace_back(parent, m); };
    h.parent_of = [](std::uint32_t) { return 0u; };
    h.name_of = [](std::uint32_t host) { return "node" + std::to_string(host + 1); };
    relay = std::make_unique<pm::relay::relay_transport>(io, opts, std::move(h));
  }
  ~relay_rig() {
    if (stream) ::close(stream->read_fd);
  }
  void open_child(std::uint32_t host) {
    pm::agent_target t;
    t.host = host;
    t.info = named("node" + std::to_string(host + 1));
    t.agent_argv = {"/opt/pm/bin/pmd", "--stdio", "--nonce", "00000000000000ab"};
    t.environment = {"SECRET=launcher-only"};
    relay->open(
        t, [this](pm::agent_stream s) { stream = s; },
        [this](std::string why) { failure = std::move(why); });
  }
  void run() {
    io.restart();
    io.run_for(50ms);
  }
  template <class T>
  std::vector<T> sent_of() const {
    std::vector<T> out;
    for (const auto& [p, m] : sent) {
      if (const auto* x = std::get_if<T>(&m)) out.push_back(*x);
    }
    return out;
  }
};

TEST(RelayTransport, StartsAChildOnlyOnceItsParentIsGreetedWithTheSshCommandLine) {
  relay_rig r;
  r.open_child(3);
  r.run();
  EXPECT_TRUE(r.sent.empty());
  EXPECT_FALSE(r.stream);
  r.relay->parent_greeted(0);
  r.run();
  const auto opens = r.sent_of<ln::child_open>();
  ASSERT_EQ(opens.size(), 1u);
  EXPECT_EQ(opens[0].host, 3u);
  const auto& argv = opens[0].argv;
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_EQ(argv[argv.size() - 2], "node4");
  EXPECT_EQ(argv.back(), "/opt/pm/bin/pmd --stdio --nonce 00000000000000ab; exit");
  for (const auto& a : argv) EXPECT_EQ(a.find("SECRET"), std::string::npos);
  ASSERT_TRUE(r.stream);
  EXPECT_FALSE(r.stream->socket);  // no descriptor crosses a relay
}

TEST(RelayTransport, BytesCrossBothWaysAndChildClosedEndsTheStreamAfterThem) {
  relay_rig r;
  r.relay->parent_greeted(0);
  r.open_child(3);
  r.run();
  ASSERT_TRUE(r.stream);
  const int fd = r.stream->read_fd;
  ASSERT_EQ(::write(fd, "to-agent", 8), 8);
  r.run();
  std::string up;
  for (const auto& d : r.sent_of<ln::child_data>()) {
    EXPECT_EQ(d.host, 3u);
    up += d.bytes;
  }
  EXPECT_EQ(up, "to-agent");
  ln::message down = ln::child_data{3, std::string("\0from-agent", 11)};
  r.relay->from_parent(0, down);
  ln::message other_parent = ln::child_data{3, "not-its-parent"};
  r.relay->from_parent(5, other_parent);  // ignored: host 3's parent is 0
  ln::message closed = ln::child_closed{3, 255, 0, "Connection reset"};
  r.relay->from_parent(0, closed);
  r.run();
  char buf[64];
  std::string got;
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  EXPECT_EQ(got, std::string("\0from-agent", 11));  // then end-of-file
  std::optional<pm::agent_end> end;
  r.relay->close(3, [&](pm::agent_end e) { end = e; });
  r.run();
  ASSERT_TRUE(end);
  EXPECT_TRUE(end->retryable);
  EXPECT_NE(end->how.find("Connection reset"), std::string::npos) << end->how;
}

TEST(RelayTransport, ALostParentEndsItsChildrenAtOnceNamingIt) {
  relay_rig r;
  r.relay->parent_greeted(0);
  r.open_child(3);
  r.run();
  ASSERT_TRUE(r.stream);
  r.relay->parent_down(0);
  r.run();
  char buf[8];
  EXPECT_EQ(::read(r.stream->read_fd, buf, sizeof buf), 0);  // end-of-file now
  std::optional<pm::agent_end> end;
  r.relay->close(3, [&](pm::agent_end e) { end = e; });
  r.run();
  ASSERT_TRUE(end);
  EXPECT_NE(end->how.find("host node1"), std::string::npos) << end->how;
  EXPECT_FALSE(end->retryable);
  // A child opened after its parent was lost fails with the same words.
  r.open_child(4);
  r.run();
  ASSERT_TRUE(r.failure);
  EXPECT_NE(r.failure->find("node1"), std::string::npos) << *r.failure;
}

TEST(RelayTransport, AtMostMaxConcurrentChildrenOfAParentAreSetUpAtOnce) {
  boost::asio::io_context io;
  std::vector<std::uint32_t> opened;
  pm::remote_launch opts;
  opts.max_concurrent = 2;
  pm::relay::relay_hooks h;
  h.send = [&](std::uint32_t, const ln::message& m) {
    if (const auto* o = std::get_if<ln::child_open>(&m)) opened.push_back(o->host);
  };
  h.parent_of = [](std::uint32_t) { return 0u; };
  h.name_of = [](std::uint32_t host) { return "node" + std::to_string(host + 1); };
  pm::relay::relay_transport relay(io, opts, std::move(h));
  relay.parent_greeted(0);
  std::vector<int> fds;
  for (std::uint32_t host = 1; host <= 4; ++host) {
    pm::agent_target t;
    t.host = host;
    t.info = named("node" + std::to_string(host + 1));
    t.agent_argv = {"/pmd", "--stdio"};
    relay.open(
        t, [&](pm::agent_stream s) { fds.push_back(s.read_fd); }, [](std::string) {});
  }
  io.run_for(50ms);
  EXPECT_EQ(opened, (std::vector<std::uint32_t>{1, 2}));
  relay.established(1);
  io.restart();
  io.run_for(50ms);
  EXPECT_EQ(opened, (std::vector<std::uint32_t>{1, 2, 3}));
  for (int fd : fds) ::close(fd);
}

}  // namespace
