// The agent link's endpoint, both ends wired together in memory: handshake, noise before it,
// wrong peers, heartbeats and silence, suspend/resume, flow control, who may send what.
#include "link/endpoint.hpp"

#include <gtest/gtest.h>

#include "pm/error.hpp"

namespace pm::link {
namespace {

using namespace std::chrono_literals;
using bytes = std::vector<std::uint8_t>;

endpoint_options opts(role r, std::uint64_t nonce = 42) {
  endpoint_options o;
  o.self = r;
  o.nonce = nonce;
  return o;
}

// A launcher and an agent endpoint; deliver() moves what one wrote to the other.
struct pair_of_ends {
  endpoint launcher, agent;
  std::vector<link_event> at_launcher, at_agent;
  link_time now{0};

  explicit pair_of_ends(endpoint_options l = opts(role::launcher),
                        endpoint_options a = opts(role::agent))
      : launcher(l), agent(a) {}

  void start() {
    launcher.start(now, hello{});
    hello h;
    h.pid = 77;
    h.hostname = "node1";
    h.addrs = {"10.0.0.1%eth0"};
    h.port = 5555;
    agent.start(now, h);
  }
  // Moves bytes both ways until nothing is left to move.
  void deliver() {
    for (int i = 0; i < 10; ++i) {
      bool moved = false;
      if (!launcher.output().empty()) {
        const bytes b(launcher.output().begin(), launcher.output().end());
        launcher.consume_output(b.size());
        agent.received(now, b, at_agent);
        moved = true;
      }
      if (!agent.output().empty()) {
        const bytes b(agent.output().begin(), agent.output().end());
        agent.consume_output(b.size());
        launcher.received(now, b, at_launcher);
        moved = true;
      }
      if (!moved) return;
    }
  }
  void tick_both() {
    launcher.tick(now, at_launcher);
    agent.tick(now, at_agent);
  }
};

template <class T>
std::vector<T> all(const std::vector<link_event>& v) {
  std::vector<T> r;
  for (const auto& e : v) {
    if (const T* t = std::get_if<T>(&e)) r.push_back(*t);
  }
  return r;
}

std::string down_reason(const std::vector<link_event>& v) {
  const auto d = all<link_down>(v);
  return d.empty() ? std::string() : d.front().reason;
}

TEST(LinkEndpoint, GreetsBothWaysAndCarriesTheAgentFacts) {
  pair_of_ends p;
  p.start();
  p.deliver();
  ASSERT_EQ(all<peer_greeted>(p.at_launcher).size(), 1u);
  const auto h = all<peer_greeted>(p.at_launcher)[0].peer;
  EXPECT_EQ(h.pid, 77);
  EXPECT_EQ(h.hostname, "node1");
  EXPECT_EQ(h.addrs, (std::vector<std::string>{"10.0.0.1%eth0"}));
  EXPECT_EQ(h.port, 5555);
  EXPECT_EQ(h.nonce, 42u);
  EXPECT_EQ(all<peer_greeted>(p.at_agent).size(), 1u);
  EXPECT_TRUE(p.launcher.greeted());
  EXPECT_TRUE(p.agent.greeted());
}

TEST(LinkEndpoint, MessagesQueuedBeforeTheHandshakeArriveAfterIt) {
  pair_of_ends p;
  p.start();
  p.launcher.send(shutdown_request{});  // pipelined: no round trip before the first request
  p.deliver();
  ASSERT_EQ(all<message_in>(p.at_agent).size(), 1u);
  EXPECT_EQ(all<message_in>(p.at_agent)[0].msg, message(shutdown_request{}));
}

TEST(LinkEndpoint, SkipsWhatALoginShellPrintsBeforeTheAgentSpeaks) {
  pair_of_ends p;
  p.start();
  const std::string rc = "Last login: today\nWelcome!\n";
  p.launcher.received(p.now, bytes(rc.begin(), rc.end()), p.at_launcher);
  p.deliver();
  EXPECT_EQ(all<peer_greeted>(p.at_launcher).size(), 1u);
  EXPECT_TRUE(all<link_down>(p.at_launcher).empty());
}

TEST(LinkEndpoint, APeerThatClosesBeforeItsHelloIsNamedWithWhatItPrinted) {
  endpoint l(opts(role::launcher));
  l.start(link_time{0}, hello{});
  std::vector<link_event> ev;
  const std::string said = "sh: 1: /opt/pm/bin/pmd: not found\n";
  l.received(link_time{1}, bytes(said.begin(), said.end()), ev);
  l.closed(link_time{2}, ev);
  EXPECT_EQ(down_reason(ev),
            "the agent closed the link before its hello (it printed: 'sh: 1: /opt/pm/bin/pmd: not "
            "found')");
  EXPECT_TRUE(l.down());
  EXPECT_TRUE(l.output().empty());
}

TEST(LinkEndpoint, RefusesAnotherJobsNonceAndAnotherVersion) {
  {
    pair_of_ends p(opts(role::launcher, 1), opts(role::agent, 2));
    p.start();
    // Each side reads the other's hello (written before either read anything).
    const bytes from_launcher(p.launcher.output().begin(), p.launcher.output().end());
    const bytes from_agent(p.agent.output().begin(), p.agent.output().end());
    p.launcher.received(p.now, from_agent, p.at_launcher);
    p.agent.received(p.now, from_launcher, p.at_agent);
    EXPECT_EQ(down_reason(p.at_launcher),
              "the agent answered with another job's nonce (a stale or foreign peer)");
    EXPECT_EQ(down_reason(p.at_agent),
              "the launcher answered with another job's nonce (a stale or foreign peer)");
  }
  {
    endpoint l(opts(role::launcher));
    l.start(link_time{0}, hello{});
    bytes b(magic.begin(), magic.end());
    append_message(b, hello{2, 42, 1, "old", {}, 0});
    std::vector<link_event> ev;
    l.received(link_time{1}, b, ev);
    EXPECT_EQ(down_reason(ev), "the agent speaks agent link version 2, this launcher speaks " +
                                   std::to_string(protocol_version));
  }
}

TEST(LinkEndpoint, GarbageAndMessagesOutOfTurnEndTheLink) {
  {
    pair_of_ends p;
    p.start();
    p.deliver();
    // An agent may not send a launcher's message.
    p.agent.send(spawn_request{});
    p.deliver();
    EXPECT_EQ(down_reason(p.at_launcher), "unexpected 'spawn' message from the agent");
  }
  {
    endpoint l(opts(role::launcher));
    l.start(link_time{0}, hello{});
    bytes b(magic.begin(), magic.end());
    append_message(b, exited{{{1, exit_status::exited(0)}}});
    std::vector<link_event> ev;
    l.received(link_time{1}, b, ev);
    EXPECT_EQ(down_reason(ev), "'exited' message from the agent before its hello");
  }
  {
    endpoint l(opts(role::launcher));
    l.start(link_time{0}, hello{});
    bytes b(magic.begin(), magic.end());
    b.insert(b.end(), {0xff, 0xff, 0xff, 0xff});
    std::vector<link_event> ev;
    l.received(link_time{1}, b, ev);
    EXPECT_EQ(down_reason(ev), "agent link: frame of 4294967295 bytes exceeds the 64 MiB limit");
    // Nothing more is reported or sent after the link went down.
    ev.clear();
    l.received(link_time{2}, b, ev);
    l.closed(link_time{3}, ev);
    EXPECT_TRUE(ev.empty());
    l.send(shutdown_request{});
    EXPECT_TRUE(l.output().empty());
  }
}

TEST(LinkEndpoint, AHelloThatNeverComesIsADeadline) {
  auto o = opts(role::launcher);
  o.hello_timeout = 20s;
  endpoint l(o);
  l.start(link_time{0}, hello{});
  ASSERT_TRUE(l.deadline());
  EXPECT_EQ(*l.deadline(), link_time{20s});
  std::vector<link_event> ev;
  l.tick(link_time{19s}, ev);
  EXPECT_TRUE(ev.empty());
  l.tick(link_time{20s}, ev);
  EXPECT_EQ(down_reason(ev), "no hello from the agent within 20.0 s");
}

TEST(LinkEndpoint, HeartbeatsFlowAndSilenceEndsTheLink) {
  auto lo = opts(role::launcher);
  lo.heartbeat_interval = 500ms;
  lo.silence_timeout = 2s;
  auto ao = opts(role::agent);
  pair_of_ends p(lo, ao);
  p.start();
  p.deliver();
  p.agent.set_heartbeats(p.now, 500ms, 2s);
  // Both beat every 0.5 s: nobody is lost for ten seconds.
  for (int i = 1; i <= 20; ++i) {
    p.now = link_time{std::chrono::milliseconds(500 * i)};
    p.tick_both();
    p.deliver();
  }
  EXPECT_TRUE(all<link_down>(p.at_launcher).empty());
  EXPECT_TRUE(all<link_down>(p.at_agent).empty());
  // Heartbeats are the link's own business: no event for them.
  EXPECT_TRUE(all<message_in>(p.at_launcher).empty());
  // Then the agent goes silent (a cut network): lost 2 s after the last word.
  const auto last = p.now;
  for (int i = 1; i <= 5; ++i) {
    p.now = last + std::chrono::milliseconds(500 * i);
    p.launcher.tick(p.now, p.at_launcher);
  }
  EXPECT_EQ(down_reason(p.at_launcher), "no word from the agent for 2.0 s");
}

TEST(LinkEndpoint, ASuspendedLauncherIsNotLost) {
  auto lo = opts(role::launcher);
  pair_of_ends p(lo, opts(role::agent));
  p.start();
  p.deliver();
  p.agent.set_heartbeats(p.now, 500ms, 2s);
  p.launcher.suspend(p.now);  // ^Z: the launcher stops for a minute
  p.deliver();
  p.now = link_time{60s};
  p.agent.tick(p.now, p.at_agent);
  EXPECT_TRUE(all<link_down>(p.at_agent).empty());
  p.launcher.resume(p.now);
  p.deliver();
  p.now = link_time{61s};
  p.agent.tick(p.now, p.at_agent);
  EXPECT_TRUE(all<link_down>(p.at_agent).empty());
  p.now = link_time{62s};
  p.agent.tick(p.now, p.at_agent);
  EXPECT_EQ(down_reason(p.at_agent), "no word from the launcher for 2.0 s");
}

TEST(LinkEndpoint, OutputIsFlowControlledByAcknowledgements) {
  auto ao = opts(role::agent);
  ao.send_window = 1000;
  auto lo = opts(role::launcher);
  lo.ack_batch = 100;
  pair_of_ends p(lo, ao);
  p.start();
  p.deliver();
  EXPECT_EQ(p.agent.credit(), 1000u);
  p.agent.send_output(1, output_stream::out, bytes(600, 'a'));
  p.agent.send_output(1, output_stream::err, bytes(400, 'b'));
  EXPECT_EQ(p.agent.credit(), 0u);
  EXPECT_THROW(p.agent.send_output(1, output_stream::out, bytes(1, 'c')), pm::error);
  p.deliver();
  const auto out = all<output_in>(p.at_launcher);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 1u);
  EXPECT_EQ(out[0].stream, output_stream::out);
  EXPECT_EQ(out[0].bytes.size(), 600u);
  EXPECT_EQ(out[1].stream, output_stream::err);
  // The launcher consumed the output: acknowledged in batches, credit comes back, and the agent
  // hears that it may send again.
  p.launcher.acknowledge(50);
  p.deliver();
  EXPECT_EQ(p.agent.credit(), 0u);  // below the batch: not yet
  p.launcher.acknowledge(950);
  p.deliver();
  EXPECT_EQ(p.agent.credit(), 1000u);
  EXPECT_EQ(all<credit_granted>(p.at_agent).size(), 1u);
}

TEST(LinkEndpoint, LargeOutputIsSplitIntoFrames) {
  pair_of_ends p;
  p.start();
  p.deliver();
  p.agent.send_output(0, output_stream::out, bytes(max_data_bytes * 2 + 10, 'z'));
  p.deliver();
  const auto out = all<output_in>(p.at_launcher);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].bytes.size(), 10u);
}

// child_data is a relay frame: the launcher gets a view of the bytes (it feeds them to the
// relayed host's endpoint in place), the agent a child_data message (it writes it to a pipe);
// before the hello it ends the link like any data.
TEST(LinkEndpoint, RelayedBytesAreAViewAtTheLauncherAndAMessageAtTheAgent) {
  pair_of_ends p;
  p.start();
  p.deliver();
  p.agent.send(child_data{3, "up"});
  p.agent.send_relay(4, bytes{'u', 'p', '2'});
  const bytes up(p.agent.output().begin(), p.agent.output().end());
  p.launcher.received(p.now, up, p.at_launcher);
  const auto in = all<relay_in>(p.at_launcher);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].host, 3u);
  EXPECT_EQ(std::string(in[0].bytes.begin(), in[0].bytes.end()), "up");
  EXPECT_EQ(in[1].host, 4u);
  EXPECT_EQ(std::string(in[1].bytes.begin(), in[1].bytes.end()), "up2");
  p.launcher.send_relay(5, bytes{'d', 'n'});
  p.deliver();
  const auto msgs = all<message_in>(p.at_agent);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].msg, message(child_data{5, "dn"}));
  EXPECT_TRUE(down_reason(p.at_launcher).empty());

  endpoint early(opts(role::launcher));
  std::vector<link_event> ev;
  early.start(p.now, hello{});
  bytes noise(magic.begin(), magic.end());
  append_relay_frames(noise, 1, bytes{'x'});
  early.received(p.now, noise, ev);
  EXPECT_EQ(down_reason(ev), "data from the agent before its hello");
}

TEST(LinkEndpoint, AnAckForMoreThanWasSentIsRefused) {
  pair_of_ends p;
  p.start();
  p.deliver();
  p.launcher.send(ack{5});  // the agent sent the launcher no input
  p.deliver();
  EXPECT_EQ(down_reason(p.at_agent), "the launcher acknowledged more data than was sent");
}

TEST(LinkEndpoint, DataInTheWrongDirectionEndsTheLink) {
  pair_of_ends p;
  p.start();
  p.deliver();
  p.agent.send_input(0, bytes{'x'});  // stdin flows to agents, never from them
  p.deliver();
  EXPECT_EQ(down_reason(p.at_launcher), "stdin data from the agent");
}

TEST(LinkEndpoint, ACleanCloseAndABrokenOneAreToldApart) {
  {
    pair_of_ends p;
    p.start();
    p.deliver();
    p.launcher.closed(p.now, p.at_launcher);
    EXPECT_EQ(down_reason(p.at_launcher), "the agent closed the link");
  }
  {
    pair_of_ends p;
    p.start();
    p.deliver();
    p.agent.closed(p.now, p.at_agent, "Connection reset by peer");
    EXPECT_EQ(down_reason(p.at_agent), "the link to the launcher broke: Connection reset by peer");
  }
}

// shrink() frees idle buffers and keeps a partial frame: a link used after it works as before.
TEST(LinkEndpoint, ShrinkFreesIdleBuffersAndKeepsAPartialFrame) {
  pair_of_ends p;
  p.start();
  p.deliver();
  p.launcher.shrink();
  p.agent.shrink();
  p.agent.send(started{{{3, 1003}}});
  const bytes b(p.agent.output().begin(), p.agent.output().end());
  p.agent.consume_output(b.size());
  p.agent.shrink();
  EXPECT_TRUE(p.agent.output().empty());
  // Half a frame, shrink (nothing may be lost), then the rest.
  const auto half = static_cast<std::ptrdiff_t>(b.size() / 2);
  p.launcher.received(p.now, bytes(b.begin(), b.begin() + half), p.at_launcher);
  p.launcher.shrink();
  p.launcher.received(p.now, bytes(b.begin() + half, b.end()), p.at_launcher);
  const auto in = all<message_in>(p.at_launcher);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].msg, message(started{{{3, 1003}}}));
  p.agent.send(exited{{{3, exit_status::exited(0)}}});
  p.deliver();
  EXPECT_EQ(all<message_in>(p.at_launcher).size(), 2u);
}

}  // namespace
}  // namespace pm::link
