// The agent link over a real socket or pipe: descriptors travel with their message, a cut stream
// and missing descriptors are errors, a closed peer is reported, not a signal.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "link/endpoint.hpp"
#include "link/frame.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"

namespace pm::link {
namespace {

using bytes = std::vector<std::uint8_t>;

struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fd), 0);
  }
  ~socket_pair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
};

endpoint_options opts(role r) {
  endpoint_options o;
  o.self = r;
  o.nonce = 7;
  return o;
}

TEST(LinkSocket, DescriptorsTravelWithTheirMessage) {
  socket_pair sp;
  int p1[2], p2[2];
  ASSERT_EQ(::pipe2(p1, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(p2, O_CLOEXEC), 0);
  endpoint agent(opts(role::agent)), launcher(opts(role::launcher));
  agent.start(link_time{0}, hello{});
  launcher.start(link_time{0}, hello{});
  stream_writer w;
  std::vector<owned_fd> fds;
  fds.emplace_back(p1[0]);
  fds.emplace_back(p2[0]);
  w.attach(agent.send(started{{{0, 1234}}}, 2), std::move(fds));
  agent.send(exited{{{0, exit_status::exited(3)}}});
  const stream_fds a{sp.fd[0], sp.fd[0], true}, l{sp.fd[1], sp.fd[1], true};
  std::string err;
  ASSERT_TRUE(w.flush(a, agent, err)) << err;
  EXPECT_TRUE(agent.output().empty());
  // The sender closed its copies of the read ends.
  EXPECT_EQ(::fcntl(p1[0], F_GETFD), -1);

  stream_reader r;
  std::vector<link_event> ev;
  EXPECT_EQ(r.read_once(l, link_time{1}, launcher, ev), stream_reader::status::data);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<peer_greeted>(ev[0]));
  const auto& m2 = std::get<message_in>(ev[1]);
  EXPECT_EQ(m2.msg, message(started{{{0, 1234}}}));
  auto got = r.take_fds(m2.fds, "started");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(::fcntl(got[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(::write(p1[1], "out", 3), 3);
  ASSERT_EQ(::write(p2[1], "err", 3), 3);
  char buf[4] = {};
  ASSERT_EQ(::read(got[0].get(), buf, 3), 3);
  EXPECT_STREQ(buf, "out");
  ASSERT_EQ(::read(got[1].get(), buf, 3), 3);
  EXPECT_STREQ(buf, "err");
  EXPECT_EQ(std::get<message_in>(ev[2]).msg, message(exited{{{0, exit_status::exited(3)}}}));
  ::close(p1[1]);
  ::close(p2[1]);
}

TEST(LinkSocket, TruncatedStreamAndMissingDescriptorsAreErrors) {
  {
    socket_pair sp;
    bytes b(magic.begin(), magic.end());
    append_message(b, hello{protocol_version, 7, 1, "h", {}, 0});
    b.insert(b.end(), {0, 0, 0, 9, 1, 0x81});
    ASSERT_EQ(::write(sp.fd[0], b.data(), b.size()), static_cast<ssize_t>(b.size()));
    ::close(sp.fd[0]);
    sp.fd[0] = -1;
    endpoint launcher(opts(role::launcher));
    launcher.start(link_time{0}, hello{});
    stream_reader r;
    std::vector<link_event> ev;
    const stream_fds l{sp.fd[1], sp.fd[1], true};
    while (r.read_once(l, link_time{1}, launcher, ev) == stream_reader::status::data) {
    }
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(std::get<link_down>(ev.back()).reason,
              "agent link: stream ended inside a frame (2 of 9 bytes)");
  }
  {
    stream_reader r;
    try {
      r.take_fds(2, "started");
      FAIL() << "no error";
    } catch (const pm::error& e) {
      EXPECT_STREQ(e.what(),
                   "agent link: a 'started' message announced 2 descriptors but 0 arrived");
    }
  }
}

TEST(LinkSocket, WritingToAClosedPeerIsReportedNotASignal) {
  socket_pair sp;
  ::close(sp.fd[1]);
  sp.fd[1] = -1;
  endpoint e(opts(role::launcher));
  e.start(link_time{0}, hello{});
  stream_writer w;
  std::string err;
  EXPECT_FALSE(w.flush(stream_fds{sp.fd[0], sp.fd[0], true}, e, err));
  EXPECT_EQ(err, "cannot write: Broken pipe");
}

TEST(LinkSocket, PipesCarryTheLinkToo) {
  int to_agent[2], to_launcher[2];
  ASSERT_EQ(::pipe2(to_agent, O_CLOEXEC | O_NONBLOCK), 0);
  ASSERT_EQ(::pipe2(to_launcher, O_CLOEXEC | O_NONBLOCK), 0);
  endpoint agent(opts(role::agent)), launcher(opts(role::launcher));
  agent.start(link_time{0}, hello{});
  launcher.start(link_time{0}, hello{});
  stream_writer wa, wl;
  std::string err;
  const stream_fds a{to_agent[0], to_launcher[1], false}, l{to_launcher[0], to_agent[1], false};
  const bytes payload(100000, 'x');
  agent.send_output(3, output_stream::out, payload);
  stream_reader r;
  std::size_t got = 0;
  bool greeted = false;
  // A pipe holds 64 KiB: write and read in turns, as the two processes would.
  for (int i = 0; i < 100 && got < payload.size(); ++i) {
    ASSERT_TRUE(wa.flush(a, agent, err)) << err;
    ASSERT_TRUE(wl.flush(l, launcher, err)) << err;
    std::vector<link_event> ev;
    r.read_once(l, link_time{1}, launcher, ev);
    for (auto& e : ev) {
      if (std::holds_alternative<peer_greeted>(e)) greeted = true;
      if (auto* o = std::get_if<output_in>(&e)) got += o->bytes.size();
    }
  }
  EXPECT_TRUE(greeted);
  EXPECT_EQ(got, payload.size());
  for (int fd : {to_agent[0], to_agent[1], to_launcher[0], to_launcher[1]}) ::close(fd);
}

}  // namespace
}  // namespace pm::link
