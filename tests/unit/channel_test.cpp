// The agent channel: frames, messages, strict validation, descriptor passing, random input.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "pm/error.hpp"
#include "transport/channel/frame.hpp"
#include "transport/channel/messages.hpp"
#include "transport/channel/socket.hpp"

namespace pm::channel {
namespace {

using bytes = std::vector<std::uint8_t>;

bytes frame_of(const bytes& body) {
  bytes out;
  append_frame(out, body);
  return out;
}

// The error a decoder throws for `stream` (fed in one piece), or "" if none.
std::string error_of(const bytes& stream, bool at_end = true) {
  message_decoder d;
  try {
    d.feed(stream);
    while (d.next()) {
    }
    if (at_end) d.finish();
  } catch (const pm::error& e) {
    return e.what();
  }
  return "";
}

// A msgpack body, written by hand, for field-level validation tests.
bytes body(std::initializer_list<std::uint8_t> b) {
  return bytes(b);
}

std::vector<message> samples() {
  rank_spec a{3, "/bin/echo", {"echo", "hi"}, {"A=1", "B="}, "/tmp", true, 1};
  rank_spec b{4, "/usr/bin/env", {"env"}, {}, "", false, 2};
  return {hello{1, 0},
          hello{1, 4242},
          spawn_request{{a, b}},
          signal_request{{0, 1, 7}, 15},
          shutdown_request{},
          started{3, 123456},
          spawn_failed{4, 126, "cannot execute '/x': Permission denied"},
          exited{5, exit_status::exited(7)},
          exited{6, exit_status::signaled(9)},
          shutdown_done{},
          agent_error{"bad message"},
          heartbeat{}};
}

TEST(channel_frame, round_trips_every_message_fed_byte_by_byte) {
  bytes stream;
  for (const auto& m : samples()) {
    const std::uint32_t fds = std::holds_alternative<spawn_request>(m) ? 1 : 0;
    append_message(stream, m, fds);
  }
  message_decoder d;
  std::vector<envelope> got;
  for (std::uint8_t b : stream) {
    d.feed({&b, 1});
    while (auto e = d.next()) got.push_back(std::move(*e));
  }
  d.finish();
  const auto want = samples();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].msg, want[i]) << type_name(want[i]);
    EXPECT_EQ(got[i].fds, std::holds_alternative<spawn_request>(want[i]) ? 1u : 0u);
  }
}

TEST(channel_frame, header_is_big_endian_length) {
  const bytes f = frame_of(bytes(300, 0x90));
  ASSERT_EQ(f.size(), 304u);
  EXPECT_EQ(f[0], 0);
  EXPECT_EQ(f[1], 0);
  EXPECT_EQ(f[2], 1);
  EXPECT_EQ(f[3], 44);
}

TEST(channel_frame, oversized_length_is_refused_before_the_body_arrives) {
  EXPECT_EQ(error_of({0xc0, 0, 0, 0}, false),
            "agent channel: frame of 3221225472 bytes exceeds the 64 MiB limit");
  EXPECT_EQ(error_of({0x04, 0, 0, 1}, false),
            "agent channel: frame of 67108865 bytes exceeds the 64 MiB limit");
}

TEST(channel_frame, empty_frame_is_an_error) {
  EXPECT_EQ(error_of({0, 0, 0, 0}), "agent channel: empty frame");
}

TEST(channel_frame, truncated_frames_are_errors_at_end_of_stream) {
  EXPECT_EQ(error_of({0, 0}), "agent channel: stream ended inside a frame header (2 of 4 bytes)");
  EXPECT_EQ(error_of({0, 0, 0, 10, 1, 2, 3}),
            "agent channel: stream ended inside a frame (3 of 10 bytes)");
  EXPECT_EQ(error_of({0, 0, 0, 10, 1, 2, 3}, false), "");  // more may come
}

TEST(channel_frame, refuses_to_send_an_oversized_body) {
  bytes out;
  const bytes big(max_frame_bytes + 1, 0);
  try {
    append_frame(out, big);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(e.what(), "agent channel: message of 67108865 bytes exceeds the 64 MiB limit");
  }
  EXPECT_TRUE(out.empty());
}

TEST(channel_messages, garbage_body_is_a_clear_error) {
  // 0xc1 is never used by MessagePack.
  EXPECT_EQ(error_of(frame_of({0xc1})),
            "agent channel: malformed message body (parse error at byte 1: syntax error while "
            "parsing MessagePack value: invalid byte: 0xC1)");
  // A map header announcing one pair, then nothing.
  EXPECT_EQ(error_of(frame_of({0x81})).rfind("agent channel: malformed message body (", 0), 0u);
  // Trailing bytes after a whole value.
  EXPECT_EQ(error_of(frame_of({0x80, 0x80})).rfind("agent channel: malformed message body (", 0),
            0u);
}

TEST(channel_messages, body_must_be_a_map_with_a_type) {
  EXPECT_EQ(error_of(frame_of({0x93, 1, 2, 3})), "agent channel: message body is not a map");
  EXPECT_EQ(error_of(frame_of({0x80})), "agent channel: message lacks field 'type'");
  // {"type": 5}
  EXPECT_EQ(error_of(frame_of({0x81, 0xa4, 't', 'y', 'p', 'e', 0x05})),
            "agent channel: field 'type' of a message must be a string");
  // {"type": "foo"}
  EXPECT_EQ(error_of(frame_of({0x81, 0xa4, 't', 'y', 'p', 'e', 0xa3, 'f', 'o', 'o'})),
            "agent channel: unknown message type 'foo'");
}

TEST(channel_messages, missing_and_mistyped_fields_are_named) {
  // {"type": "started", "rank": 1}
  const bytes no_pid = body({0x82, 0xa4, 't', 'y', 'p',  'e', 0xa7, 's', 't', 'a',
                             'r',  't',  'e', 'd', 0xa4, 'r', 'a',  'n', 'k', 0x01});
  EXPECT_EQ(error_of(frame_of(no_pid)), "agent channel: 'started' message lacks field 'pid'");
  // {"type": "started", "rank": -1, "pid": 1}
  const bytes negative = body({0x83, 0xa4, 't', 'y', 'p', 'e', 0xa7, 's',  't', 'a', 'r', 't', 'e',
                               'd',  0xa4, 'r', 'a', 'n', 'k', 0xff, 0xa3, 'p', 'i', 'd', 0x01});
  EXPECT_EQ(
      error_of(frame_of(negative)),
      "agent channel: field 'rank' of a 'started' message must be an unsigned 32-bit integer");
}

TEST(channel_messages, semantic_checks) {
  bytes s;
  rank_spec r{0, "/bin/cat", {"cat"}, {}, "", true, 2};
  append_message(s, spawn_request{{r}}, 0);
  EXPECT_EQ(error_of(s), "agent channel: 'spawn' message gives a rank stdin but no descriptor");

  bytes e;
  try {
    append_message(e, exited{1, exit_status::exited(0)}, 1);
    FAIL() << "no error";
  } catch (const pm::error& x) {
    EXPECT_STREQ(x.what(),
                 "agent channel: 'exited' message announces 1 descriptors, more than the 0 it may "
                 "carry");
  }
  bytes empty_argv;
  append_message(empty_argv, spawn_request{{rank_spec{2, "/bin/true", {}, {}, "", false, 2}}});
  EXPECT_EQ(error_of(empty_argv), "agent channel: rank 2 has an empty argv");
  bytes bad_signal;
  append_message(bad_signal, signal_request{{1}, 99});
  EXPECT_EQ(error_of(bad_signal),
            "agent channel: field 'signo' of a 'signal' message must be an integer from 0 to 64");
}

TEST(channel_messages, deep_nesting_is_refused_without_recursing) {
  // A million nested one-element arrays would overflow a recursive reader's stack.
  bytes deep(1'000'000, 0x91);
  deep.push_back(0x01);
  EXPECT_EQ(error_of(frame_of(deep)), "agent channel: message body nested deeper than 8 levels");
}

TEST(channel_messages, unknown_type_names_are_sanitized_and_cut) {
  bytes b = {0x81, 0xa4, 't', 'y', 'p', 'e', 0xd9, 60};
  for (int i = 0; i < 60; ++i) b.push_back(i == 0 ? '\n' : 'x');
  EXPECT_EQ(error_of(frame_of(b)),
            "agent channel: unknown message type '?" + std::string(39, 'x') + "'");
}

// Random bytes, and valid streams with random bytes flipped, cut or inserted: the decoder either
// decodes or throws pm::error; anything else (another exception, a crash) fails the test.
TEST(channel_fuzz, random_input_never_crashes) {
  std::mt19937_64 rng(20240601);  // pinned algorithm and seed: reproducible
  bytes valid;
  for (const auto& m : samples()) {
    append_message(valid, m, std::holds_alternative<spawn_request>(m) ? 1 : 0);
  }
  int errors = 0, decoded = 0;
  for (int round = 0; round < 20000; ++round) {
    bytes input;
    if (round % 4 == 0) {
      input.resize(rng() % 64);
      for (auto& b : input) b = static_cast<std::uint8_t>(rng());
      if (round % 8 == 0 && input.size() >= 4) {  // a plausible length in front of garbage
        const auto n = static_cast<std::uint32_t>(input.size() - 4);
        input[0] = 0, input[1] = 0, input[2] = static_cast<std::uint8_t>(n >> 8),
        input[3] = static_cast<std::uint8_t>(n);
      }
    } else {
      input = valid;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < edits; ++i) {
        const std::size_t at = rng() % input.size();
        switch (rng() % 3) {
          case 0:
            input[at] = static_cast<std::uint8_t>(rng());
            break;
          case 1:
            input.resize(at + 1);
            break;
          default:
            input.insert(input.begin() + static_cast<std::ptrdiff_t>(at),
                         static_cast<std::uint8_t>(rng()));
        }
      }
    }
    message_decoder d;
    try {
      std::size_t at = 0;
      while (at < input.size()) {  // random chunking
        const std::size_t n = std::min<std::size_t>(1 + rng() % 32, input.size() - at);
        d.feed({input.data() + at, n});
        at += n;
        while (d.next()) ++decoded;
      }
      d.finish();
    } catch (const pm::error& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).rfind("agent channel: ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 10000);   // the mutations really produced bad input
  EXPECT_GT(decoded, 10000);  // and valid prefixes were still decoded
}

// ---- over a real socket, with descriptors ----

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

TEST(channel_socket, descriptors_travel_with_their_message) {
  socket_pair sp;
  int p1[2], p2[2];
  ASSERT_EQ(::pipe2(p1, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(p2, O_CLOEXEC), 0);
  outbox out;
  out.push(hello{1, 99});
  std::vector<owned_fd> fds;
  fds.emplace_back(p1[0]);
  fds.emplace_back(p2[0]);
  out.push(started{0, 1234}, std::move(fds));
  out.push(exited{0, exit_status::exited(3)});
  std::string err;
  ASSERT_TRUE(out.flush(sp.fd[0], err)) << err;
  EXPECT_TRUE(out.empty());
  // The sender closed its copies of the read ends.
  EXPECT_EQ(::fcntl(p1[0], F_GETFD), -1);

  inbox in;
  EXPECT_EQ(in.receive(sp.fd[1]), inbox::status::open);
  auto m1 = in.next();
  ASSERT_TRUE(m1);
  EXPECT_EQ(m1->msg, message(hello{1, 99}));
  EXPECT_TRUE(m1->fds.empty());
  auto m2 = in.next();
  ASSERT_TRUE(m2);
  EXPECT_EQ(m2->msg, message(started{0, 1234}));
  ASSERT_EQ(m2->fds.size(), 2u);
  EXPECT_EQ(::fcntl(m2->fds[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(::write(p1[1], "out", 3), 3);
  ASSERT_EQ(::write(p2[1], "err", 3), 3);
  char buf[4] = {};
  ASSERT_EQ(::read(m2->fds[0].get(), buf, 3), 3);
  EXPECT_STREQ(buf, "out");
  ASSERT_EQ(::read(m2->fds[1].get(), buf, 3), 3);
  EXPECT_STREQ(buf, "err");
  auto m3 = in.next();
  ASSERT_TRUE(m3);
  EXPECT_EQ(m3->msg, message(exited{0, exit_status::exited(3)}));
  EXPECT_FALSE(in.next());
  ::close(p1[1]);
  ::close(p2[1]);
}

TEST(channel_socket, truncated_stream_and_missing_descriptors_are_errors) {
  {
    socket_pair sp;
    const std::uint8_t partial[] = {0, 0, 0, 9, 0x81};
    ASSERT_EQ(::write(sp.fd[0], partial, sizeof partial), 5);
    ::close(sp.fd[0]);
    sp.fd[0] = -1;
    inbox in;
    EXPECT_EQ(in.receive(sp.fd[1]), inbox::status::closed);
    try {
      in.next();
      FAIL() << "no error";
    } catch (const pm::error& e) {
      EXPECT_STREQ(e.what(), "agent channel: stream ended inside a frame (1 of 9 bytes)");
    }
  }
  {
    socket_pair sp;
    bytes b;
    append_message(b, started{1, 2}, 2);  // announces 2, sends none
    ASSERT_EQ(::write(sp.fd[0], b.data(), b.size()), static_cast<ssize_t>(b.size()));
    inbox in;
    in.receive(sp.fd[1]);
    try {
      in.next();
      FAIL() << "no error";
    } catch (const pm::error& e) {
      EXPECT_STREQ(e.what(),
                   "agent channel: a 'started' message announced 2 descriptors but 0 arrived");
    }
  }
}

TEST(channel_socket, writing_to_a_closed_peer_is_reported_not_a_signal) {
  socket_pair sp;
  ::close(sp.fd[1]);
  sp.fd[1] = -1;
  outbox out;
  out.push(shutdown_request{});
  std::string err;
  EXPECT_FALSE(out.flush(sp.fd[0], err));
  EXPECT_EQ(err, "agent channel: cannot write: Broken pipe");
}

}  // namespace
}  // namespace pm::channel
