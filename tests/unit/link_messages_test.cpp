// The agent link's wire: frames (control, output, input), messages and their strict validation,
// the preamble scanner, random input (descriptor passing over a socket: link_socket_test.cpp).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include <algorithm>

#include "fuzz/msgpack_oracle.hpp"
#include "link/codec/wire_vocabulary.hpp"
#include "link/endpoint.hpp"
#include "link/frame.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"

namespace pm::link {
namespace {

using bytes = std::vector<std::uint8_t>;

bytes frame_of(const bytes& body) {
  bytes out;
  append_control_frame(out, body);
  return out;
}

// Control frames decoded from a stream, as the endpoint does.
struct stream_decoder {
  frame_decoder frames;
  void feed(std::span<const std::uint8_t> b) { frames.feed(b); }
  std::optional<envelope> next() {
    for (;;) {
      auto f = frames.next();
      if (!f) return std::nullopt;
      if (f->kind == frame_kind::control) return decode(f->payload);
    }
  }
  void finish() const { frames.finish(); }
};

// The error a decoder throws for `stream` (fed in one piece), or "" if none.
std::string error_of(const bytes& stream, bool at_end = true) {
  stream_decoder d;
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

// A spawned job's facts on a host that runs none of its ranks.
job_add spawned_job_sample() {
  job_add a{2, 6, 3, {app_spec{{"env"}, "", {}}}, std::nullopt};
  a.pmix =
      pmix_job{"pmrun.42.ab.2", 8, no_node, {"node3"}, {0, 0}, {0, 0}, {0, 1}, "pmrun.42.ab", 5};
  return a;
}

std::vector<message> samples() {
  rank_spec a{3, 0, {"A=1", "B="}, true};
  rank_spec b{4, 1, {}, false};
  job_setup j;
  j.host = 2;
  j.grace_ms = 1500;
  j.heartbeat_ms = 500;
  j.silence_ms = 2000;
  j.forward_output = true;
  j.streams = 1;
  j.base = {"OMPI_MCA_btl=self"};
  j.overrides = {"X=1"};
  j.apps = {app_spec{{"echo", "hi there", "$(x)"}, "/tmp", {"APP=1"}}, app_spec{{"env"}, "", {}}};
  job_setup with_pmix = j;
  with_pmix.pmix =
      pmix_job{"pmrun.42.ab", 8, 1, {"node1", "node2"}, {0, 0, 1}, {0, 1, 1}, {0, 1, 0}, {}, 0};
  fence_members some{false, {1, 5, 9}};
  job_setup with_topology = j;
  with_topology.topology = topology_request{};
  job_setup with_stall = j;
  with_stall.stall = stall_watch{5000, 500};
  rank_spec bound{5,
                  0,
                  {"CUDA_VISIBLE_DEVICES=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
                  false,
                  rank_binding{"2-3,8"}};
  return {
      with_pmix, fence_contribution{fence_members{}, 0, true, std::string("a\0b\xff", 4)},
      fence_contribution{some, 7, false, ""}, fence_result{some, 7, true, std::string(300, '\x80')},
      fence_result{fence_members{}, 1, false, ""}, pmix_abort{3, 42, "N/A"}, pmix_abort{0, -1, ""},
      modex_request{1ull << 40, 5}, pmix_unfinalized{2, exit_status::exited(0)},
      pmix_unfinalized{4, exit_status::signaled(9)}, agent_notice{"PMIx server: cannot load x"},
      pmix_unfinalized{9, exit_status::exited(255)},
      modex_reply{1ull << 40, true, std::string("\0\1\2", 3)}, modex_reply{7, false, ""},
      child_open{4, {"ssh", "-F", "/a b/cfg", "node5", "/opt/pm/bin/pmd --stdio --nonce 1f"}},
      child_data{4, std::string("\0pmlink\0\xff", 9)}, child_data{1u << 31, ""}, child_close{4},
      child_closed{4, 255, 0, "ssh: connect to host node5 port 22: Connection refused"},
      child_closed{7, -1, 9, ""},
      // Version 12: a child its parent heard nothing from (heartbeats hop by hop).
      child_closed{8, -1, 0, "", 2000},
      pmix_server{"pmix-server.42;tcp4://127.0.0.1:40001", "/tmp/pm-pmix.42.ab/pmix"},
      proc_table_request{1ull << 40}, proc_table_reply{3, {}},
      proc_table_reply{
          4,
          {proc_table_entry{0, 4242, "running", -1, 0}, proc_table_entry{1, 0, "pending", -1, 0},
           proc_table_entry{2, 4243, "killed", -1, 15},
           proc_table_entry{1u << 31, -1, "", 255, 0}}},
      pmix_notify{pm::notice_kind::rank_exited, {1}, 7, "node2", "rank 1 on node2 exited"},
      pmix_notify{pm::notice_kind::host_lost, {4, 5, 1u << 31}, 0, "node3", ""},
      pmix_notify{pm::notice_kind::job_ending, {}, -2147483647, "", "job timed out after 2 s"},
      pmix_notify{pm::notice_kind::rank_signaled, {0}, 9, "", ""},
      job_add{
          1, 4, 2, {app_spec{{"./child", "a b"}, "/w", {"OMPI_PARENT_PORT=1:2"}}}, std::nullopt},
      spawned_job_sample(), pmix_spawn_reply{3, true, "pmrun.42.ab.1", ""},
      pmix_spawn_reply{4, false, "", "not enough slots: 3 ranks requested, 1 slot available"},
      pmix_data_reply{5, data_status::ok, {published_entry{"p:accept", 0, std::string("\0\1", 2)}}},
      pmix_data_reply{6, data_status::timeout, {}},
      pmix_spawn{7,
                 0,
                 {spawn_app_spec{{"./child"}, {"A=1"}, "/w", 2, {"node2"}},
                  spawn_app_spec{{"/bin/true", ""}, {}, "", 1, {}}},
                 ""},
      pmix_spawn{12, 0, {spawn_app_spec{{"/bin/echo", "hi"}, {}, "", 2, {}}}, "pm-tool.4242.0"},
      pmix_publish{8, 2, {published_entry{"k", 2, "v"}, published_entry{"", 0, ""}}},
      pmix_lookup{9, 1u << 31, {"a", "b"}, true, 600}, pmix_lookup{10, 0, {}, false, 0},
      pmix_unpublish{11, 3, {"k"}}, hello{protocol_version, 0x0123456789abcdefull, 0, "", {}, 0},
      hello{protocol_version, 1, 4242, "node1", {"10.0.0.2%eth0", "10.1.0.2%ib0"}, 40123},
      heartbeat{}, ack{1u << 20}, j, spawn_request{{a, b}}, signal_request{{0, 1, 7}, 15},
      input_closed{3}, suspend{}, resume{}, shutdown_request{}, started{{{3, 123456}}},
      spawn_failed{4, 126, "cannot execute '/x': Permission denied"},
      exited{{{5, exit_status::exited(7)}}}, exited{{{6, exit_status::signaled(9)}}},
      stream_closed{{{6, output_stream::err, 1ull << 40}}}, shutdown_done{},
      agent_error{"bad message"},
      // Version 9: topologies and bindings.
      with_topology, spawn_request{{bound, a}},
      host_shape{"pmtopo1;p=1;l3=1;numa=0;c=0,0,0,1x2;pu=0-1;g=;n=", ""},
      host_shape{"", "cannot load libpm-topology.so: not found"},
      // Version 11: restarts in place.
      restart_request{1, std::nullopt}, restart_request{3, with_pmix.pmix}, restarted{1, 40123},
      restarted{1u << 31, 0},
      // After version 10: --stall-timeout (docs/resilience.md, "Stalls").
      with_stall, stall_query{1ull << 40}, host_quiet{true, 8}, host_quiet{false, 0},
      stall_report{7,
                   {rank_activity{0, 4711, "S", "futex_wait_queue", 20, -1, 5300},
                    rank_activity{1u << 31, 1ll << 40, "D", "", 1ull << 40, 5300, 0}}},
      stall_report{8, {}},
      // Version 13: a rank whose output has nowhere to go (docs/output.md).
      output_unwanted{3, output_stream::err}, output_unwanted{1u << 31, output_stream::out}};
}

// The --stall-timeout messages and field (version 11 too, added beside restarts; not in the
// pinned bytes below, which were computed with the restart messages only).
bool after_version_10(const message& m) {
  if (const auto* j = std::get_if<job_setup>(&m)) return j->stall.has_value();
  return std::holds_alternative<stall_query>(m) || std::holds_alternative<host_quiet>(m) ||
         std::holds_alternative<stall_report>(m) || std::holds_alternative<output_unwanted>(m);
}

// FNV-1a over encoded bodies: pins the wire format to the bytes version 7's encoder wrote before
// the protocol was declared once (the values below were computed by that encoder).
std::uint64_t fnv1a(std::uint64_t h, const bytes& b) {
  for (const auto x : b) h = (h ^ x) * 0x100000001b3ull;
  return h;
}
constexpr std::uint64_t fnv_basis = 0xcbf29ce484222325ull;

// Version 8 changed no message body but the hello's version (child_data left MessagePack for a
// relay frame; its body form below is still read). Version 9 changed the hello's version and added
// optional fields (absent unless used: older samples' bodies are unchanged) and `topology`.
// Version 11 added `restart` and `restarted` (older samples' bodies unchanged but the hello's).
// Version 12 added child_closed's `silent_ms` (every child_closed carries it: 0 unless its parent
// timed it out) and changed the hello's version. Version 13 added `output_unwanted` (not in the
// pinned bytes) and changed the hello's version.
TEST(LinkMessages, WireBytesAreThoseOfVersion13) {
  std::uint64_t h = fnv_basis;
  for (const auto& m : samples()) {
    if (after_version_10(m)) continue;
    h = fnv1a(h, encode(m, std::holds_alternative<spawn_request>(m) ? 1 : 0));
  }
  EXPECT_EQ(h, 0xdaae35b46ee82fd8ull) << std::hex << h;
  // {"ranks": [{"pid": 123456, "rank": 3}], "type": "started"}: keys sorted (in each map), the
  // shortest integers.
  EXPECT_EQ(encode(started{{{3, 123456}}}),
            (bytes{0x82, 0xa5, 'r',  'a',  'n',  'k',  's', 0x91, 0x82, 0xa3, 'p',  'i',  'd',
                   0xce, 0x00, 0x01, 0xe2, 0x40, 0xa4, 'r', 'a',  'n',  'k',  0x03, 0xa4, 't',
                   'y',  'p',  'e',  0xa7, 's',  't',  'a', 'r',  't',  'e',  'd'}));
  // {"ranks": [{"rank": 5, "signal": 9}], "type": "exited"}; a code replaces the signal when the
  // rank exited.
  EXPECT_EQ(encode(exited{{{5, exit_status::signaled(9)}}}),
            (bytes{0x82, 0xa5, 'r',  'a',  'n',  'k', 's', 0x91, 0x82, 0xa4, 'r',  'a',
                   'n',  'k',  0x05, 0xa6, 's',  'i', 'g', 'n',  'a',  'l',  0x09, 0xa4,
                   't',  'y',  'p',  'e',  0xa6, 'e', 'x', 'i',  't',  'e',  'd'}));
}

// What a stream carries for `m`: nothing for a child_data without bytes (a relay frame is never
// empty), else one frame.
bool writes_a_frame(const message& m) {
  const auto* d = std::get_if<child_data>(&m);
  return d == nullptr || !d->bytes.empty();
}

TEST(LinkFrame, RoundTripsEveryMessageAndDataFedByteByByte) {
  bytes stream;
  for (const auto& m : samples()) {
    const std::uint32_t fds = std::holds_alternative<spawn_request>(m) ? 1 : 0;
    append_message(stream, m, fds);
  }
  const bytes out_bytes = {'l', 'i', 'n', 'e', '\n'};
  append_output_frame(stream, 7, output_stream::err, out_bytes);
  append_input_frame(stream, 0, out_bytes);
  frame_decoder d;
  std::vector<envelope> got;
  std::vector<std::pair<frame_kind, bytes>> data;
  for (std::uint8_t b : stream) {
    d.feed({&b, 1});
    while (auto f = d.next()) {
      if (f->kind == frame_kind::control) {
        got.push_back(decode(f->payload));
      } else if (f->kind == frame_kind::relay) {
        // child_data travels raw, as the agent's endpoint hands it back.
        got.push_back(
            envelope{child_data{f->rank, std::string(f->payload.begin(), f->payload.end())}, 0});
      } else {
        data.emplace_back(f->kind, bytes(f->payload.begin(), f->payload.end()));
        EXPECT_EQ(f->rank, f->kind == frame_kind::output ? 7u : 0u);
        if (f->kind == frame_kind::output) {
          EXPECT_EQ(f->stream, output_stream::err);
        }
      }
    }
  }
  d.finish();
  auto want = samples();
  std::erase_if(want, [](const message& m) { return !writes_a_frame(m); });
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].msg, want[i]) << type_name(want[i]);
    EXPECT_EQ(got[i].fds, std::holds_alternative<spawn_request>(want[i]) ? 1u : 0u);
  }
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[0], std::make_pair(frame_kind::output, out_bytes));
  EXPECT_EQ(data[1], std::make_pair(frame_kind::input, out_bytes));
}

// feed_view() reads whole frames where they are and keeps only a partial one: cut anywhere, with
// views and copies mixed, the same frames come out as from feed(), and a cut frame is finished.
TEST(LinkFrame, ViewsCutAnywhereGiveTheSameFramesAsCopies) {
  bytes stream;
  for (const auto& m : samples()) {
    append_message(stream, m, std::holds_alternative<spawn_request>(m) ? 1 : 0);
  }
  append_output_frame(stream, 7, output_stream::out, bytes{'o', 'k', '\n'});
  const auto frames_of = [](frame_decoder& d, std::vector<bytes>& got) {
    while (auto f = d.next()) {
      bytes b{static_cast<std::uint8_t>(f->kind)};
      b.insert(b.end(), f->payload.begin(), f->payload.end());
      got.push_back(std::move(b));
    }
  };
  std::vector<bytes> want;
  frame_decoder whole;
  whole.feed(stream);
  frames_of(whole, want);
  ASSERT_EQ(want.size(), std::ranges::count_if(samples(), writes_a_frame) + 1);
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    for (int copy_second = 0; copy_second < 2; ++copy_second) {
      frame_decoder d;
      std::vector<bytes> got;
      // Each view lives only while its frames are taken, as a driver's read buffer.
      bytes first(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(cut));
      d.feed_view(first);
      frames_of(d, got);
      std::fill(first.begin(), first.end(), 0xee);  // a partial frame must have been copied
      bytes second(stream.begin() + static_cast<std::ptrdiff_t>(cut), stream.end());
      if (copy_second != 0) {
        d.feed(second);
      } else {
        d.feed_view(second);
      }
      frames_of(d, got);
      EXPECT_EQ(d.buffered(), 0u);
      d.finish();
      ASSERT_EQ(got, want) << "cut at " << cut;
    }
  }
}

TEST(LinkFrame, HeaderIsBigEndianLengthThenTheKind) {
  const bytes f = frame_of(bytes(300, 0x90));
  ASSERT_EQ(f.size(), 305u);
  EXPECT_EQ(f[0], 0);
  EXPECT_EQ(f[1], 0);
  EXPECT_EQ(f[2], 1);
  EXPECT_EQ(f[3], 45);
  EXPECT_EQ(f[4], 1);  // control
  bytes o;
  append_output_frame(o, 0x01020304, output_stream::out, bytes{'x'});
  EXPECT_EQ(o, (bytes{0, 0, 0, 7, 2, 1, 2, 3, 4, 1, 'x'}));
  // child_data (version 8): a relay frame, the host and the raw bytes.
  bytes r;
  append_message(r, child_data{0x01020304, "ab"});
  EXPECT_EQ(r, (bytes{0, 0, 0, 7, 4, 1, 2, 3, 4, 'a', 'b'}));
}

TEST(LinkFrame, RelayedBytesAreSplitLikeOutputAndNeverEmpty) {
  bytes r;
  append_relay_frames(r, 9, bytes(max_data_bytes + 3, 'q'));
  append_relay_frames(r, 9, {});
  frame_decoder d;
  d.feed(r);
  const auto a = d.next(), b = d.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->kind, frame_kind::relay);
  EXPECT_EQ(a->rank, 9u);
  EXPECT_EQ(a->payload.size(), max_data_bytes);
  EXPECT_EQ(b->payload.size(), 3u);
  EXPECT_FALSE(d.next());
  EXPECT_EQ(error_of({0, 0, 0, 5, 4, 0, 0, 0, 1}),
            "agent link: relay frame of 5 bytes carries no bytes");
}

TEST(LinkFrame, OversizedLengthIsRefusedBeforeTheBodyArrives) {
  EXPECT_EQ(error_of({0xc0, 0, 0, 0}, false),
            "agent link: frame of 3221225472 bytes exceeds the 64 MiB limit");
  EXPECT_EQ(error_of({0x04, 0, 0, 1}, false),
            "agent link: frame of 67108865 bytes exceeds the 64 MiB limit");
}

TEST(LinkFrame, EmptyAndMalformedFramesAreErrors) {
  EXPECT_EQ(error_of({0, 0, 0, 0}), "agent link: empty frame");
  EXPECT_EQ(error_of({0, 0, 0, 1, 1}), "agent link: empty message");
  EXPECT_EQ(error_of({0, 0, 0, 1, 9}), "agent link: unknown frame kind 9");
  EXPECT_EQ(error_of({0, 0, 0, 6, 2, 0, 0, 0, 1, 1}),
            "agent link: output frame of 6 bytes carries no output");
  EXPECT_EQ(error_of({0, 0, 0, 7, 2, 0, 0, 0, 1, 3, 'x'}),
            "agent link: output frame names stream 3 (1 or 2 expected)");
  EXPECT_EQ(error_of({0, 0, 0, 5, 3, 0, 0, 0, 1}),
            "agent link: input frame of 5 bytes carries no input");
}

TEST(LinkFrame, TruncatedFramesAreErrorsAtEndOfStream) {
  EXPECT_EQ(error_of({0, 0}), "agent link: stream ended inside a frame header (2 of 4 bytes)");
  EXPECT_EQ(error_of({0, 0, 0, 10, 1, 2, 3}),
            "agent link: stream ended inside a frame (3 of 10 bytes)");
  EXPECT_EQ(error_of({0, 0, 0, 10, 1, 2, 3}, false), "");  // more may come
}

TEST(LinkFrame, RefusesToSendAnOversizedBodyOrEmptyData) {
  bytes out;
  const bytes big(max_frame_bytes, 0);
  try {
    append_control_frame(out, big);
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(e.what(), "agent link: message of 67108864 bytes exceeds the 64 MiB limit");
  }
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(append_output_frame(out, 0, output_stream::out, {}), pm::error);
  EXPECT_THROW(append_input_frame(out, 0, bytes(max_data_bytes + 1, 'x')), pm::error);
}

TEST(LinkPreamble, SkipsNoiseBeforeTheMagicAndKeepsItsStart) {
  preamble_scanner sc(1000);
  const std::string noise = std::string("Welcome to node1!\n") + '\0' + "pmlin" + '\0' + " more";
  bytes in(noise.begin(), noise.end());
  in.insert(in.end(), magic.begin(), magic.end());
  in.push_back(0x42);
  // Fed in pieces that cut the magic.
  std::optional<std::size_t> at;
  std::size_t pos = 0;
  for (std::size_t cut :
       {std::size_t{5}, std::size_t{12}, std::size_t{21}, std::size_t{27}, in.size()}) {
    at = sc.scan({in.data() + pos, cut - pos});
    if (at) {
      EXPECT_EQ(pos + *at, in.size() - 1);  // just past the magic
      break;
    }
    pos = cut;
  }
  ASSERT_TRUE(at);
  EXPECT_TRUE(sc.found());
  EXPECT_EQ(sc.noise_bytes(), noise.size());
  EXPECT_EQ(sc.noise_text(), "Welcome to node1!");
}

TEST(LinkPreamble, TooMuchNoiseIsAnErrorNamingWhatCame) {
  preamble_scanner sc(16);
  const std::string noise = "bash: line 1: pmd: command not found\n";
  try {
    sc.scan({reinterpret_cast<const std::uint8_t*>(noise.data()), noise.size()});
    FAIL() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(e.what(),
                 "agent link: the peer sent 17 bytes that are not the agent link (it began: "
                 "'bash: line 1: pmd')");
  }
}

TEST(LinkMessages, GarbageBodyIsAClearError) {
  // 0xc1 is never used by MessagePack.
  EXPECT_EQ(error_of(frame_of({0xc1})),
            "agent link: malformed message body (parse error at byte 1: syntax error while "
            "parsing MessagePack value: invalid byte: 0xC1)");
  // A map header announcing one pair, then nothing.
  EXPECT_EQ(error_of(frame_of({0x81})).rfind("agent link: malformed message body (", 0), 0u);
  // Trailing bytes after a whole value.
  EXPECT_EQ(error_of(frame_of({0x80, 0x80})).rfind("agent link: malformed message body (", 0), 0u);
}

TEST(LinkMessages, BodyMustBeAMapWithAType) {
  EXPECT_EQ(error_of(frame_of({0x93, 1, 2, 3})), "agent link: message body is not a map");
  EXPECT_EQ(error_of(frame_of({0x80})), "agent link: message lacks field 'type'");
  // {"type": 5}
  EXPECT_EQ(error_of(frame_of({0x81, 0xa4, 't', 'y', 'p', 'e', 0x05})),
            "agent link: field 'type' of a message must be a string");
  // {"type": "foo"}
  EXPECT_EQ(error_of(frame_of({0x81, 0xa4, 't', 'y', 'p', 'e', 0xa3, 'f', 'o', 'o'})),
            "agent link: unknown message type 'foo'");
}

TEST(LinkMessages, MissingAndMistypedFieldsAreNamed) {
  // {"type": "modex", "id": 1}
  const bytes no_rank =
      body({0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'm', 'o', 'd', 'e', 'x', 0xa2, 'i', 'd', 0x01});
  EXPECT_EQ(error_of(frame_of(no_rank)), "agent link: 'modex' message lacks field 'rank'");
  // {"type": "modex", "rank": -1, "id": 1}
  const bytes negative = body({0x83, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'm',  'o', 'd', 'e',
                               'x',  0xa4, 'r', 'a', 'n', 'k', 0xff, 0xa2, 'i', 'd', 0x01});
  EXPECT_EQ(error_of(frame_of(negative)),
            "agent link: field 'rank' of a 'modex' message must be an unsigned 32-bit integer");
  // In a list: {"type": "started", "ranks": [{"rank": 1}]}, and a list with nothing in it.
  const bytes no_pid =
      body({0x82, 0xa4, 't', 'y', 'p', 'e', 0xa7, 's',  't',  'a', 'r', 't', 'e', 'd',
            0xa5, 'r',  'a', 'n', 'k', 's', 0x91, 0x81, 0xa4, 'r', 'a', 'n', 'k', 0x01});
  EXPECT_EQ(error_of(frame_of(no_pid)), "agent link: 'started' message lacks field 'pid'");
  const bytes none = body({0x82, 0xa4, 't', 'y',  'p', 'e', 0xa6, 'e', 'x', 'i',
                           't',  'e',  'd', 0xa5, 'r', 'a', 'n',  'k', 's', 0x90});
  EXPECT_EQ(error_of(frame_of(none)), "agent link: 'exited' message names no rank");
}

TEST(LinkMessages, SemanticChecks) {
  bytes e;
  try {
    append_message(e, exited{{{1, exit_status::exited(0)}}}, 1);
    FAIL() << "no error";
  } catch (const pm::error& x) {
    EXPECT_STREQ(x.what(),
                 "agent link: 'exited' message announces 1 descriptors, more than the 0 it may "
                 "carry");
  }
  job_setup j;
  j.apps.push_back(app_spec{{}, "", {}});
  bytes empty_argv;
  append_message(empty_argv, j);
  EXPECT_EQ(error_of(empty_argv), "agent link: an app of a 'job' message has an empty argv");
  bytes no_app;
  append_message(no_app, job_setup{});
  EXPECT_EQ(error_of(no_app), "agent link: 'job' message has no app");
  bytes bad_signal;
  append_message(bad_signal, signal_request{{1}, 99});
  EXPECT_EQ(error_of(bad_signal),
            "agent link: field 'signo' of a 'signal' message must be an integer from 0 to 64");
  // The PMIx facts must index consistently (the agent indexes with them).
  job_setup pj;
  pj.apps.push_back(app_spec{{"a"}, "", {}});
  pj.pmix = pmix_job{"ns", 2, 0, {"n1"}, {0, 1}, {0, 0}, {0, 0}, {}, 0};
  bytes bad_node;
  append_message(bad_node, pj);
  EXPECT_EQ(error_of(bad_node), "agent link: 'job' message: PMIx facts of rank 1 out of range");
  pj.pmix = pmix_job{"ns", 2, 0, {"n1"}, {0, 0}, {0}, {0, 1}, {}, 0};
  bytes short_array;
  append_message(short_array, pj);
  EXPECT_EQ(error_of(short_array), "agent link: 'job' message: PMIx rank arrays differ in length");
  // A process table's entries: a signal and an exit code in their ranges.
  bytes bad_table_signal;
  append_message(bad_table_signal, proc_table_reply{1, {proc_table_entry{0, 7, "killed", -1, 65}}});
  EXPECT_EQ(error_of(bad_table_signal),
            "agent link: field 'signal' of a 'proc_table_reply' message must be an integer from 0 "
            "to 64");
  bytes bad_table_code;
  append_message(bad_table_code, proc_table_reply{1, {proc_table_entry{0, 7, "exited", -2, 0}}});
  EXPECT_EQ(error_of(bad_table_code),
            "agent link: field 'code' of a 'proc_table_reply' message must be an integer from -1 "
            "to 255");
  bytes unsorted;
  append_message(unsorted, fence_contribution{fence_members{false, {3, 1}}, 0, false, ""});
  EXPECT_EQ(error_of(unsorted), "agent link: fence members are not sorted");
  // A notice of a kind this side does not know is refused, naming neither garbage nor the kind.
  bytes unknown_kind = encode(pmix_notify{pm::notice_kind::host_lost, {1}, 0, "n", "t"});
  const std::string known = "host_lost";
  auto at = std::search(unknown_kind.begin(), unknown_kind.end(), known.begin(), known.end());
  ASSERT_NE(at, unknown_kind.end());
  *at = 'H';
  EXPECT_THROW(
      {
        try {
          decode(unknown_kind);
        } catch (const pm::error& x) {
          EXPECT_STREQ(x.what(), "agent link: 'notify' message has an unknown kind");
          throw;
        }
      },
      pm::error);
  // A hello of another version is decoded only as far as its version.
  bytes old;
  append_message(old, hello{2, 0, 0, "", {}, 0});
  stream_decoder d;
  d.feed(old);
  const auto h = d.next();
  ASSERT_TRUE(h);
  EXPECT_EQ(std::get<hello>(h->msg).version, 2u);
}

// Fields a newer peer may add are skipped, however many and however nested; a known field that
// comes twice counts as its last value (as a std::map reader would keep it).
TEST(LinkMessages, UnknownFieldsAreSkippedAndARepeatedFieldKeepsItsLast) {
  for (const int extra : {1, 14, 40}) {
    bytes b = {0xde, 0, static_cast<std::uint8_t>(3 + extra)};
    for (int i = 0; i < extra; ++i) {
      const std::string key = "x" + std::to_string(i);
      b.push_back(static_cast<std::uint8_t>(0xa0 | key.size()));
      b.insert(b.end(), key.begin(), key.end());
      // {"a": [1.5, nil, {"b": true}]}: kinds no message uses
      b.insert(b.end(), {0x81, 0xa1, 'a', 0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xc0, 0x81,
                         0xa1, 'b', 0xc3});
    }
    b.insert(b.end(), {0xa2, 'i', 'd', 0x07, 0xa4, 'r', 'a', 'n', 'k', 0x02, 0xa4,
                       't',  'y', 'p', 'e',  0xa5, 'm', 'o', 'd', 'e', 'x'});
    EXPECT_EQ(decode(b).msg, message(modex_request{7, 2})) << extra << " extra fields";
  }
  // {"rank": 1, "id": 5, "rank": 3, "type": "modex"}
  const bytes twice = {0x84, 0xa4, 'r',  'a', 'n', 'k', 0x01, 0xa2, 'i', 'd',
                       0x05, 0xa4, 'r',  'a', 'n', 'k', 0x03, 0xa4, 't', 'y',
                       'p',  'e',  0xa5, 'm', 'o', 'd', 'e',  'x'};
  EXPECT_EQ(decode(twice).msg, message(modex_request{5, 3}));
  // A bad `fds` of an unknown type names the type problem, in one clean line.
  const bytes odd = {0x82, 0xa3, 'f', 'd', 's', 0xff, 0xa4, 't', 'y', 'p', 'e', 0xa2, '\n', 'x'};
  EXPECT_EQ(error_of(frame_of(odd)), "agent link: unknown message type '?x'");
}

TEST(LinkMessages, DeepNestingIsRefusedWithoutRecursing) {
  // A million nested one-element arrays would overflow a recursive reader's stack.
  bytes deep(1'000'000, 0x91);
  deep.push_back(0x01);
  EXPECT_EQ(error_of(frame_of(deep)), "agent link: message body nested deeper than 8 levels");
}

TEST(LinkMessages, UnknownTypeNamesAreSanitizedAndCut) {
  bytes b = {0x81, 0xa4, 't', 'y', 'p', 'e', 0xd9, 60};
  for (int i = 0; i < 60; ++i) b.push_back(i == 0 ? '\n' : 'x');
  EXPECT_EQ(error_of(frame_of(b)),
            "agent link: unknown message type '?" + std::string(39, 'x') + "'");
}

// Random bytes, and valid streams with random bytes flipped, cut or inserted: the decoder either
// decodes or throws pm::error; anything else (another exception, a crash) fails the test.
TEST(LinkFuzz, RandomInputNeverCrashes) {
  std::mt19937_64 rng(20240601);  // pinned algorithm and seed: reproducible
  bytes valid;
  for (const auto& m : samples()) {
    append_message(valid, m, std::holds_alternative<spawn_request>(m) ? 1 : 0);
    append_output_frame(valid, 1, output_stream::out, bytes{'o', 'k'});
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
    stream_decoder d;
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
      EXPECT_EQ(std::string(e.what()).rfind("agent link: ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 10000);   // the mutations really produced bad input
  EXPECT_GT(decoded, 10000);  // and valid prefixes were still decoded
}

// The codec's MessagePack reader against an independent one (nlohmann's): on every input they
// agree on whether the body is well-formed MessagePack of at most 8 levels; a well-formed body
// then decodes or names a problem of its fields, and whatever decodes encodes back to the
// same message. (Before the protocol was declared once, a second, nlohmann-based decoder
// cross-checked a hand-written fast one; with one decoder generated from the wire forms what is
// left to cross-check is the reader.)
std::string outcome_of(const std::function<envelope()>& f, envelope& out) {
  try {
    out = f();
    return "ok";
  } catch (const pm::error& e) {
    return e.what();
  }
}

TEST(LinkMessages, TheReaderAgreesWithNlohmannOnWhatIsWellFormed) {
  std::mt19937_64 rng(20261125);  // pinned: reproducible
  std::vector<bytes> bodies;
  for (const auto& m : samples()) {
    for (std::uint32_t fds : {0u, 1u, 2u}) {
      try {
        bodies.push_back(encode(m, fds));
      } catch (const pm::error&) {
      }
    }
  }
  int mutated_ok = 0, malformed = 0;
  for (int round = 0; round < 40000; ++round) {
    bytes b = bodies[rng() % bodies.size()];
    if (round >= static_cast<int>(bodies.size())) {
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < edits && !b.empty(); ++i) {
        const std::size_t at = rng() % b.size();
        switch (rng() % 4) {
          case 0:
            b[at] = static_cast<std::uint8_t>(rng());
            break;
          case 1:
            b[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
            break;
          case 2:
            b.resize(at);
            break;
          default:
            b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng()));
        }
      }
    }
    envelope got;
    const auto outcome = outcome_of([&] { return decode(b); }, got);
    const bool refused_shape = outcome.rfind("agent link: malformed message body (", 0) == 0 ||
                               outcome == "agent link: message body nested deeper than 8 levels";
    ASSERT_EQ(refused_shape, !pm::fuzz::well_formed_msgpack(b, 8))
        << "round " << round << ": " << outcome;
    if (refused_shape) ++malformed;
    if (outcome == "ok") {
      ASSERT_EQ(decode(encode(got.msg, got.fds)), got) << "round " << round;
      if (round >= static_cast<int>(bodies.size())) ++mutated_ok;
    }
  }
  EXPECT_GT(mutated_ok, 1000);  // mutations that still decode were compared too
  EXPECT_GT(malformed, 1000);   // and so were bodies that are not MessagePack
}

// Each alternative of `message` takes its name, its sender and its descriptors from its wire
// form, and every one round-trips. The names and senders are the protocol's (version 7's): a
// message renamed, or given to the other side, is an incompatible change.
TEST(LinkMessages, EveryMessageTakesItsNameAndSenderFromItsWireForm) {
  using enum sender;
  const std::vector<std::pair<std::string_view, sender>> version_7 = {
      {"hello", either},
      {"heartbeat", either},
      {"ack", either},
      {"job", launcher},
      {"spawn", launcher},
      {"signal", launcher},
      {"input_closed", launcher},
      {"suspend", launcher},
      {"resume", launcher},
      {"shutdown", launcher},
      {"started", agent},
      {"spawn_failed", agent},
      {"exited", agent},
      {"stream_closed", agent},
      {"shutdown_done", agent},
      {"error", agent},
      {"fence_result", launcher},
      {"pmix_abort", agent},
      {"fence", agent},
      {"modex", either},
      {"modex_reply", either},
      {"unfinalized", agent},
      {"notice", agent},
      {"child_open", launcher},
      {"child_data", either},
      {"child_close", launcher},
      {"child_closed", agent},
      {"pmix_server", agent},
      {"proc_table_request", agent},
      {"proc_table_reply", launcher},
      {"notify", launcher},
      {"job_add", launcher},
      {"pmix_spawn_reply", launcher},
      {"pmix_data_reply", launcher},
      {"pmix_spawn", agent},
      {"pmix_publish", agent},
      {"pmix_lookup", agent},
      {"pmix_unpublish", agent},
      {"topology", agent},
      {"restart", launcher},
      {"restarted", agent},
      {"stall_query", launcher},
      {"quiet", agent},
      {"stall_report", agent},
      {"output_unwanted", launcher}};
  ASSERT_EQ(std::variant_size_v<message>, version_7.size());
  std::vector<bool> sampled(std::variant_size_v<message>, false);
  for (const auto& m : samples()) {
    sampled[m.index()] = true;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          EXPECT_EQ(type_name(m), T::wire().name);
          EXPECT_EQ(sent_by(m), T::wire().from);
          EXPECT_EQ(type_name(m), version_7[m.index()].first);
          EXPECT_EQ(sent_by(m), version_7[m.index()].second) << type_name(m);
          const std::uint32_t most = T::wire().max_fds;
          EXPECT_EQ(decode(encode(m, most)), (envelope{m, most})) << type_name(m);
          EXPECT_THROW(encode(m, most + 1), pm::error) << type_name(m);
        },
        m);
  }
  // A message added to `message` needs a sample here: it is then checked like the others.
  for (std::size_t i = 0; i < sampled.size(); ++i) {
    EXPECT_TRUE(sampled[i]) << "no sample of message " << version_7[i].first;
  }
}

// The fuzz targets' dictionary holds every word of the wire forms (make_link_seeds writes them).
TEST(LinkMessages, TheFuzzDictionaryHoldsEveryWireWord) {
  std::ifstream in(std::string(PM_SOURCE_DIR) + "/tests/fuzz/dict/link.dict");
  ASSERT_TRUE(in) << "tests/fuzz/dict/link.dict";
  std::set<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.insert(line);
  const auto words = pm::link::codec::wire_vocabulary();
  EXPECT_GT(words.size(), 100u);
  for (const auto& w : words) {
    char len[16];
    std::snprintf(len, sizeof len, "\\x%02x", 0xa0u | static_cast<unsigned>(w.size()));
    EXPECT_TRUE(lines.contains("\"" + std::string(len) + w + "\""))
        << w << ": run make_link_seeds (docs/fuzzing.md)";
  }
  // Some of what it must contain, whatever the wire forms say.
  for (const char* w : {"type", "started", "rank", "stdin", "rank_exited", "not_found"}) {
    EXPECT_NE(std::find(words.begin(), words.end(), w), words.end()) << w;
  }
}

// What the writer produces reads back as the same message, for random messages.
TEST(LinkMessages, RandomMessagesRoundTrip) {
  std::mt19937_64 rng(7);
  const auto text = [&] {
    std::string s(rng() % 300, ' ');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  const auto texts = [&] {
    std::vector<std::string> v(rng() % 20);
    for (auto& s : v) s = text();
    return v;
  };
  const auto big = [&] { return rng() >> (rng() % 64); };
  std::uint64_t wire = fnv_basis;
  for (int i = 0; i < 2000; ++i) {
    std::vector<message> ms;
    ms.push_back(hello{protocol_version, big(), static_cast<std::int64_t>(big() >> 1) - (1ll << 62),
                       text(), texts(), static_cast<std::uint16_t>(rng())});
    ms.push_back(ack{big()});
    job_setup j;
    j.host = static_cast<std::uint32_t>(big());
    j.grace_ms = static_cast<std::uint32_t>(big());
    j.streams = static_cast<std::uint8_t>(rng() % 3);
    j.forward_output = rng() % 2 == 0;
    j.base = texts();
    j.overrides = texts();
    for (std::size_t a = 0; a < 1 + rng() % 20; ++a)
      j.apps.push_back(app_spec{{"x" + text()}, text(), texts()});
    ms.push_back(j);
    spawn_request sp;
    for (std::size_t r = 0; r < rng() % 70; ++r)
      sp.ranks.push_back(rank_spec{static_cast<std::uint32_t>(big()),
                                   static_cast<std::uint32_t>(big()), texts(), rng() % 2 == 0});
    ms.push_back(sp);
    signal_request sg;
    for (std::size_t r = 0; r < rng() % 70000; r += 1 + rng() % 1000)
      sg.ranks.push_back(static_cast<std::uint32_t>(big()));
    sg.signo = static_cast<int>(rng() % 65);
    ms.push_back(sg);
    ms.push_back(
        started{{{static_cast<std::uint32_t>(big()), static_cast<std::int64_t>(big() >> 1)}}});
    ms.push_back(
        spawn_failed{static_cast<std::uint32_t>(big()), static_cast<int>(rng() % 256), text()});
    ms.push_back(exited{{{static_cast<std::uint32_t>(big()),
                          rng() % 2 == 0 ? exit_status::exited(static_cast<int>(rng() % 256))
                                         : exit_status::signaled(1 + static_cast<int>(rng() % 64))},
                         {static_cast<std::uint32_t>(big()), exit_status::exited(0)}}});
    ms.push_back(
        stream_closed{{{static_cast<std::uint32_t>(big()),
                        rng() % 2 == 0 ? output_stream::out : output_stream::err, big()}}});
    ms.push_back(agent_error{text()});
    fence_members members;
    members.all = rng() % 2 == 0;
    if (!members.all) {
      for (std::size_t r = 0; r < rng() % 50; ++r)
        members.ranks.push_back(static_cast<std::uint32_t>(big()));
      std::sort(members.ranks.begin(), members.ranks.end());
    }
    ms.push_back(fence_contribution{members, big(), rng() % 2 == 0, text()});
    ms.push_back(fence_result{members, big(), rng() % 2 == 0, text()});
    ms.push_back(pmix_abort{static_cast<std::uint32_t>(big()),
                            static_cast<int>(static_cast<std::int32_t>(rng() % 2000000) - 1000000),
                            text()});
    ms.push_back(modex_request{big(), static_cast<std::uint32_t>(big())});
    ms.push_back(modex_reply{big(), rng() % 2 == 0, text()});
    ms.push_back(pmix_server{text(), text()});
    ms.push_back(proc_table_request{big()});
    proc_table_reply table{big(), {}};
    for (std::size_t r = 0; r < rng() % 40; ++r)
      table.ranks.push_back(proc_table_entry{
          static_cast<std::uint32_t>(big()), static_cast<std::int64_t>(big() >> 1), text(),
          static_cast<int>(rng() % 257) - 1, static_cast<int>(rng() % 65)});
    ms.push_back(table);
    pmix_notify nt;
    nt.kind = static_cast<pm::notice_kind>(rng() % 7);
    for (std::size_t r = 0; r < rng() % 40; ++r)
      nt.ranks.push_back(static_cast<std::uint32_t>(big()));
    nt.code = static_cast<int>(static_cast<std::int32_t>(rng() % 2000000) - 1000000);
    nt.host = text();
    nt.text = text();
    ms.push_back(nt);
    pmix_spawn ps{big(), static_cast<std::uint32_t>(big()), {}, rng() % 2 == 0 ? "" : text()};
    for (std::size_t a = 0; a < 1 + rng() % 3; ++a)
      ps.apps.push_back(spawn_app_spec{
          {text() + "x", text()}, {text()}, text(), static_cast<std::uint32_t>(big()), {text()}});
    ms.push_back(ps);
    pmix_data_reply dr{big(), static_cast<data_status>(rng() % 4), {}};
    for (std::size_t r = 0; r < rng() % 5; ++r)
      dr.values.push_back(published_entry{text(), static_cast<std::uint32_t>(big()), text()});
    ms.push_back(dr);
    ms.push_back(pmix_lookup{big(),
                             static_cast<std::uint32_t>(big()),
                             {text(), text()},
                             rng() % 2 == 0,
                             static_cast<std::uint32_t>(big())});
    ms.push_back(pmix_spawn_reply{big(), rng() % 2 == 0, text(), text()});
    for (const auto& m : ms) {
      const auto b = encode(m);
      wire = fnv1a(wire, b);
      ASSERT_EQ(decode(b).msg, m) << type_name(m);
    }
  }
  EXPECT_EQ(wire, 0xfcdc8172188c46dcull) << std::hex << wire;  // version 13: the hello
}

}  // namespace
}  // namespace pm::link
