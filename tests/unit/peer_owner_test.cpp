// agent/peer_owner.hpp: the owner of a loopback TCP connection's peer, as the kernel knows it
// (sock_diag): ours for our own socket, the second user's for one that user made, nothing for a
// peer that already closed (a time-wait socket says uid 0 and must never pass for root).
#include "agent/peer_owner.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "link/socket.hpp"
#include "support/other_user.hpp"

namespace {

using pm::link::owned_fd;

struct listener {
  owned_fd fd;
  sockaddr_in addr{};
  listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd.get(), 16), 0);
    EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  }
  owned_fd connect() const {
    owned_fd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    return c;
  }
  owned_fd accept() const { return owned_fd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC)); }
};

TEST(PeerOwner, OurOwnConnectionIsOurs) {
  listener l;
  const owned_fd client = l.connect();
  const owned_fd server = l.accept();
  ASSERT_TRUE(server);
  const auto who = pm::agent::tcp_peer_owner(server.get());
  ASSERT_TRUE(who.uid.has_value()) << who.why;
  EXPECT_EQ(*who.uid, ::geteuid());
  // A sock_diag socket kept for many lookups gives the same answer.
  const owned_fd diag(pm::agent::open_sock_diag());
  ASSERT_TRUE(diag);
  for (int i = 0; i < 3; ++i) {
    const auto again = pm::agent::tcp_peer_owner(server.get(), diag.get());
    ASSERT_TRUE(again.uid.has_value()) << again.why;
    EXPECT_EQ(*again.uid, ::geteuid());
  }
}

TEST(PeerOwner, AConnectionOfTheSecondUserIsTheirs) {
  std::string why;
  auto other = pm::test::other_user::create(why);
  if (!other) GTEST_SKIP() << why;
  listener l;
  int ready[2], done[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(done, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The second user makes the connection and keeps it open until told.
    ::close(ready[0]);
    ::close(done[1]);
    if (::setgroups(0, nullptr) != 0 ||
        ::setresgid(other->gid(), other->gid(), other->gid()) != 0 ||
        ::setresuid(other->uid(), other->uid(), other->uid()) != 0) {
      ::_exit(2);
    }
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<const sockaddr*>(&l.addr), sizeof l.addr) != 0) ::_exit(3);
    char b = 'r';
    [[maybe_unused]] auto n = ::write(ready[1], &b, 1);
    n = ::read(done[0], &b, 1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char b = 0;
  ASSERT_EQ(::read(ready[0], &b, 1), 1) << "the second user's connect failed";
  const owned_fd server = l.accept();
  ASSERT_TRUE(server);
  const auto who = pm::agent::tcp_peer_owner(server.get());
  ASSERT_TRUE(who.uid.has_value()) << who.why;
  EXPECT_EQ(*who.uid, other->uid());
  EXPECT_NE(*who.uid, ::geteuid());
  ::close(done[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(PeerOwner, APeerThatClosedHasNoOwner) {
  listener l;
  owned_fd client = l.connect();
  const owned_fd server = l.accept();
  ASSERT_TRUE(server);
  client.reset();  // the peer's socket goes (FIN_WAIT, then TIME_WAIT: uid 0, no inode)
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto who = pm::agent::tcp_peer_owner(server.get());
  EXPECT_FALSE(who.uid.has_value()) << "uid " << who.uid.value_or(12345);
  EXPECT_FALSE(who.why.empty());
  EXPECT_TRUE(who.closed);  // nobody there: pmd closes it without a word
}

TEST(PeerOwner, NotATcpConnectionHasNoOwner) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const owned_fd a(sv[0]), b(sv[1]);
  const auto who = pm::agent::tcp_peer_owner(a.get());
  EXPECT_FALSE(who.uid.has_value());
  EXPECT_FALSE(who.why.empty());
  EXPECT_FALSE(who.closed);  // not known to be gone: refused and said
}

}  // namespace
