// The tree launch's child agents as the agent decides them (agent/child_relay), without ssh.
#include "agent/child_relay.hpp"

#include <gtest/gtest.h>

#include "link/frame.hpp"
#include "link/relay_tap.hpp"

namespace pm::agent {
namespace {

namespace ln = pm::link;
using namespace std::chrono_literals;

struct harness {
  child_relay relay;
  std::vector<child_action> out;

  std::vector<child_action> msg(const ln::message& m) {
    out.clear();
    EXPECT_TRUE(relay.on_message(m, out));
    return out;
  }
  std::vector<child_action> feed(child_event e) {
    out.clear();
    relay.handle(std::move(e), out);
    return out;
  }
  std::vector<child_action> end_all(std::chrono::nanoseconds now) {
    out.clear();
    relay.end_all(now, out);
    return out;
  }
};

template <class T>
std::vector<T> all(const std::vector<child_action>& v) {
  std::vector<T> r;
  for (const auto& a : v) {
    if (const T* t = std::get_if<T>(&a)) r.push_back(*t);
  }
  return r;
}
std::vector<ln::message> sent(const std::vector<child_action>& v) {
  std::vector<ln::message> r;
  for (const auto& s : all<send>(v)) r.push_back(s.msg);
  return r;
}

TEST(ChildRelay, AChildsStreamEndingBeforeItsHelloReportsTheChildLost) {
  harness h;
  const auto a = h.msg(ln::child_open{3, {"ssh", "node3", "pmd", "--stdio"}});
  ASSERT_EQ(all<start_child>(a).size(), 1u);
  EXPECT_EQ(all<start_child>(a)[0].host, 3u);
  EXPECT_EQ(all<start_child>(a)[0].argv[1], "node3");
  EXPECT_FALSE(all<start_child>(a)[0].input_closed);
  // ssh printed its complaint in two pieces and ended before any byte of the link came back.
  EXPECT_TRUE(h.feed(child_said{3, "Warning: something\nssh: connect to host node3 "}).empty());
  EXPECT_TRUE(h.feed(child_said{3, "port 22: Connection refused\r\n"}).empty());
  EXPECT_EQ(sent(h.feed(child_ended{3, 255, 0})),
            (std::vector<ln::message>{ln::child_closed{
                3, 255, 0, "ssh: connect to host node3 port 22: Connection refused"}}));
  EXPECT_TRUE(h.relay.empty());
  // Ended: nothing more is said of it.
  EXPECT_TRUE(h.feed(child_output{3, "late"}).empty());
}

TEST(ChildRelay, AKilledCarrierIsReportedWithItsSignal) {
  harness h;
  h.msg(ln::child_open{1, {"ssh", "n1"}});
  EXPECT_EQ(sent(h.feed(child_ended{1, -1, 9})),
            (std::vector<ln::message>{ln::child_closed{1, -1, 9, ""}}));
}

TEST(ChildRelay, BytesGoToTheRightChildAndBack) {
  harness h;
  h.msg(ln::child_open{1, {"ssh", "n1"}});
  h.msg(ln::child_open{2, {"ssh", "n2"}});
  const auto a = h.msg(ln::child_data{2, "hello"});
  ASSERT_EQ(all<write_child>(a).size(), 1u);
  EXPECT_EQ(all<write_child>(a)[0].host, 2u);
  EXPECT_EQ(all<write_child>(a)[0].bytes, "hello");
  EXPECT_TRUE(h.msg(ln::child_data{7, "nobody"}).empty());
  EXPECT_EQ(sent(h.feed(child_output{1, "frames"})),
            (std::vector<ln::message>{ln::child_data{1, "frames"}}));
}

TEST(ChildRelay, ASecondStartOrAFailedOneIsReported) {
  harness h;
  h.msg(ln::child_open{1, {"ssh", "n1"}});
  EXPECT_EQ(
      sent(h.msg(ln::child_open{1, {"ssh", "n1"}})),
      (std::vector<ln::message>{ln::child_closed{1, -1, 0, "a second start of the same host"}}));
  EXPECT_EQ(
      sent(h.msg(ln::child_open{2, {}})),
      (std::vector<ln::message>{ln::child_closed{2, -1, 0, "a second start of the same host"}}));
  EXPECT_EQ(
      sent(h.feed(child_start_failed{1, "program 'ssh' not found in PATH"})),
      (std::vector<ln::message>{ln::child_closed{1, -1, 0, "program 'ssh' not found in PATH"}}));
  EXPECT_TRUE(h.relay.empty());
}

TEST(ChildRelay, TheLaunchersCloseStopsTheChildAndItsInput) {
  harness h;
  h.msg(ln::child_open{4, {"ssh", "n4"}});
  const auto a = h.msg(ln::child_close{4});
  ASSERT_EQ(all<stop_child>(a).size(), 1u);
  EXPECT_EQ(all<stop_child>(a)[0].host, 4u);
  EXPECT_TRUE(h.msg(ln::child_data{4, "too late"}).empty());
  EXPECT_TRUE(h.msg(ln::child_close{9}).empty());
}

TEST(ChildRelay, EndingClosesEveryInputThenKillsWhatIsLeftAfterTheGrace) {
  harness h;
  h.msg(ln::child_open{1, {"ssh", "n1"}});
  h.msg(ln::child_open{2, {"ssh", "n2"}});
  const auto a = h.end_all(10s);
  EXPECT_EQ(all<close_child_input>(a).size(), 2u);
  EXPECT_TRUE(all<kill_child>(a).empty());
  h.feed(child_ended{1, 0, 0});
  // The sweep asks again: nothing before the grace, then the one left is killed.
  EXPECT_TRUE(h.end_all(12s).empty());
  const auto b = h.end_all(10s + child_relay::end_sequence.grace);
  ASSERT_EQ(all<kill_child>(b).size(), 1u);
  EXPECT_EQ(all<kill_child>(b)[0].host, 2u);
  EXPECT_EQ(all<kill_child>(b)[0].signo, SIGKILL);
  // Opened while ending: it only gets end-of-file, and nothing is written to it.
  const auto c = h.msg(ln::child_open{5, {"ssh", "n5"}});
  ASSERT_EQ(all<start_child>(c).size(), 1u);
  EXPECT_TRUE(all<start_child>(c)[0].input_closed);
  EXPECT_TRUE(h.msg(ln::child_data{5, "x"}).empty());
}

// ---- heartbeats hop by hop (link version 12) ----

std::string framed(const ln::message& m) {
  std::vector<std::uint8_t> v;
  ln::append_message(v, m, 0);
  return {v.begin(), v.end()};
}
std::string magic_text() {
  return {ln::magic.begin(), ln::magic.end()};
}
std::string beat() {
  return framed(ln::heartbeat{});
}

TEST(RelayTap, TakesHeartbeatsOutWhereverTheyAreCutAndPassesTheRestUnchanged) {
  const std::string hello = framed(ln::hello{});
  const std::string report = framed(ln::exited{});
  const std::string noise = "Welcome to node3\n";
  const std::string stream =
      noise + magic_text() + hello + beat() + report + beat() + beat() + report + beat();
  const std::string expected = noise + magic_text() + hello + report + report;
  // Every way of cutting the stream in two, and byte by byte.
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    ln::relay_tap tap;
    ln::relay_tap::held_frame held;
    std::string a = stream.substr(0, cut), b = stream.substr(cut);
    tap.pass(a, &held);
    tap.pass(b, &held);
    EXPECT_EQ(a + b, expected) << "cut at " << cut;
    EXPECT_TRUE(tap.framed());
  }
  ln::relay_tap tap;
  ln::relay_tap::held_frame held;
  std::string got;
  for (const char c : stream) {
    std::string one(1, c);
    tap.pass(one, &held);
    got += one;
  }
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(tap.between_frames());
  // Following only: nothing changes.
  ln::relay_tap follow;
  std::string all = stream;
  follow.pass(all, nullptr);
  EXPECT_EQ(all, stream);
  EXPECT_TRUE(follow.between_frames());
  std::string half = report.substr(0, 7);
  follow.pass(half, nullptr);
  EXPECT_FALSE(follow.between_frames());
}

TEST(RelayTap, ABrokenStreamPassesAsItIs) {
  ln::relay_tap tap;
  std::string bytes = magic_text() + std::string("\0\0\0\0garbage", 11) + beat();
  const std::string copy = bytes;
  ln::relay_tap::held_frame held;
  tap.pass(bytes, &held);
  EXPECT_EQ(bytes, copy);
  EXPECT_TRUE(tap.lost_track());
}

TEST(ChildRelay, HeartbeatsGoHopByHopAndASilentChildIsEndedAndReported) {
  harness h;
  h.msg(ln::child_open{3, {"ssh", "n3"}});
  const auto every = 500ms, silence = 2000ms;
  std::vector<child_action> out;
  // Before the launcher's hello has passed, no heartbeat goes to the child.
  h.relay.tick(1s, every, silence, out);
  EXPECT_TRUE(out.empty());
  h.msg(ln::child_data{3, magic_text() + framed(ln::hello{})});
  h.relay.tick(2s, every, silence, out);
  ASSERT_EQ(all<write_child>(out).size(), 1u);
  EXPECT_EQ(all<write_child>(out)[0].bytes, beat());
  // Not again before its time.
  out.clear();
  h.relay.tick(2100ms, every, silence, out);
  EXPECT_TRUE(out.empty());
  // Half a frame of the launcher's is on its way: the heartbeat waits for its end.
  const std::string job = framed(ln::job_setup{});
  h.msg(ln::child_data{3, job.substr(0, 5)});
  h.relay.tick(2500ms, every, silence, out);
  EXPECT_TRUE(out.empty());
  const auto rest = h.msg(ln::child_data{3, job.substr(5)});
  ASSERT_EQ(all<write_child>(rest).size(), 1u);
  EXPECT_EQ(all<write_child>(rest)[0].bytes, job.substr(5) + beat());
  // The child's heartbeats end here; the rest goes on.
  out.clear();
  h.relay.handle(3s, child_output{3, magic_text() + framed(ln::hello{}) + beat()}, out);
  EXPECT_EQ(sent(out),
            (std::vector<ln::message>{ln::child_data{3, magic_text() + framed(ln::hello{})}}));
  out.clear();
  h.relay.handle(3500ms, child_output{3, beat()}, out);
  EXPECT_TRUE(out.empty());
  // Silent from 3.5 s: at 5.5 s it is ended and reported, once.
  h.relay.tick(5400ms, every, silence, out);
  EXPECT_TRUE(all<stop_child>(out).empty());
  out.clear();
  h.relay.tick(5600ms, every, silence, out);
  ASSERT_EQ(all<stop_child>(out).size(), 1u);
  ln::child_closed closed{3, -1, 0, ""};
  closed.silent_ms = 2100;
  EXPECT_EQ(sent(out), (std::vector<ln::message>{closed}));
  EXPECT_TRUE(h.relay.empty());
  out.clear();
  h.relay.handle(5700ms, child_ended{3, -1, SIGTERM}, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace pm::agent
