// The bodies between pmd and its PMIx helper (agent/pmix_channel): every message round-trips with
// every field, and a body that is not exactly one message is refused with pm::error.
#include "agent/pmix_channel.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "pm/error.hpp"

// Field-by-field equality for the test only (the production types have none): a structured
// binding names every field, so a field added later stops this file from building until it is
// compared too.
#define PM_TEST_EQ(T, ...)                                          \
  [[maybe_unused]] static bool operator==(const T& x, const T& y) { \
    const auto tie = [](const T& v) {                               \
      const auto& [__VA_ARGS__] = v;                                \
      return std::tie(__VA_ARGS__);                                 \
    };                                                              \
    return tie(x) == tie(y);                                        \
  }

namespace pm::agent::pmix {
PM_TEST_EQ(server_place, dir, shm_dir, hostname, port, server_pid)
PM_TEST_EQ(spawn_app, argv, env, wdir, max_procs, hosts)
PM_TEST_EQ(published_value, key, value)
PM_TEST_EQ(found_value, key, publisher, value)
PM_TEST_EQ(query_value, key, value)
PM_TEST_EQ(query, keys, nspace, rank, hostname)
PM_TEST_EQ(job_info, nspace, universe_size, node_index, node_names, ranks, spawned, parent)
PM_TEST_EQ(event_notice, nspace, kind, ranks, code, host, text)
}  // namespace pm::agent::pmix

namespace pm::agent {
PM_TEST_EQ(pmix_complete, id, status, payload)
PM_TEST_EQ(pmix_serve_modex, link_id, target)
PM_TEST_EQ(pmix_register_job, job, local_ranks)
PM_TEST_EQ(pmix_host_named, hostname)
PM_TEST_EQ(pmix_notify_ranks, notice)
PM_TEST_EQ(pmix_restart, dropped, job)
PM_TEST_EQ(pmix_reregister, nspace, rank)
PM_TEST_EQ(pmix_abort_called, id, caller, status, message)
PM_TEST_EQ(pmix_fence_called, id, participants, collect, data)
PM_TEST_EQ(pmix_connect_called, id, participants)
PM_TEST_EQ(pmix_spawn_called, id, requester, apps)
PM_TEST_EQ(pmix_publish_called, id, publisher, values)
PM_TEST_EQ(pmix_lookup_called, id, requester, keys, wait, timeout_s)
PM_TEST_EQ(pmix_unpublish_called, id, requester, keys)
PM_TEST_EQ(pmix_query_called, id, requester, queries)
PM_TEST_EQ(pmix_modex_called, id, target)
PM_TEST_EQ(pmix_client_connected, who)
PM_TEST_EQ(pmix_client_finalized, who)
PM_TEST_EQ(pmix_local_modex_answered, link_id, found, data)
PM_TEST_EQ(pmix_server_said, line)
[[maybe_unused]] static bool operator==(const pmix_server_up&, const pmix_server_up&) {
  return true;
}
[[maybe_unused]] static bool operator==(const pmix_server_failed&, const pmix_server_failed&) {
  return true;
}
}  // namespace pm::agent

namespace pm::agent::pmix_channel {
PM_TEST_EQ(setup, job, place)
PM_TEST_EQ(rank_bound, rank, cpus)
}  // namespace pm::agent::pmix_channel

#undef PM_TEST_EQ

namespace pm::agent::pmix_channel {
namespace {

using pmix::proc;

constexpr std::uint64_t big_id = 0xfedcba9876543210ull;

// Bytes 0x00 and 0xff inside, where a C string or a sign would go wrong.
std::vector<char> binary() {
  return {'\0', '\xff', 'a', '\0', '\x7f', '\x80', '\xff'};
}
std::string nul_string() {
  return std::string("a\0b\xff", 4);
}

link::pmix_job first_job(std::string nspace) {
  link::pmix_job j;
  j.nspace = std::move(nspace);
  j.universe = 9;
  j.node = 1;
  j.nodes = {"n0", "n1"};
  j.rank_node = {0, 1, 1};
  j.rank_app = {0, 0, 1};
  j.rank_local = {0, 0, 1};
  j.parent_nspace = "pmrun.1.parent";
  j.parent_rank = 3;
  return j;
}

pmix::job_info spawned_info() {
  pmix::job_info j;
  j.nspace = "pmrun.1.child";
  j.universe_size = 12;
  j.node_index = pmix::no_node;
  j.node_names = {"a", "b"};
  j.ranks = {pmix::rank_info{1, 1, 2, 3, "0-1,4"}, pmix::rank_info{2, 0, 4, 5, ""}};
  j.spawned = true;
  j.parent = proc{"pmrun.1.parent", 7};
  return j;
}

std::vector<pmix::proc_entry> table() {
  return {pmix::proc_entry{proc{"ns", 0}, "h0", "./a", 4242, 0, pmix::proc_state::running},
          pmix::proc_entry{proc{"ns", 1}, "h1", "./b", -1, -9, pmix::proc_state::comm_lost}};
}

std::vector<to_helper> to_helper_samples() {
  using pmix::status;
  std::vector<to_helper> v;
  v.push_back(setup{first_job("pmrun.1.ab"),
                    pmix::server_place{"/tmp/pm-pmix.7.x", "/dev/shm/pm.7", "host-1", 65535,
                                       std::numeric_limits<std::int64_t>::max()}});
  v.push_back(rank_bound{0xfffffffe, "0-3,8"});
  v.push_back(pmix_complete{1, status::error, std::monostate{}});
  v.push_back(pmix_complete{2, status::success, binary()});
  v.push_back(pmix_complete{3, status::not_supported, nul_string()});
  v.push_back(pmix_complete{
      4, status::not_found,
      std::vector<pmix::found_value>{{"k1", proc{"ns", 2}, binary()}, {"k2", proc{"m", 0}, {}}}});
  v.push_back(pmix_complete{big_id, status::partial_success,
                            std::vector<pmix::query_value>{
                                {"s", std::string("text")},
                                {"u32", std::uint32_t{0xfffffff0}},
                                {"size", std::size_t{1} << 40},
                                {"bool", true},
                                {"table", table()},
                            }});
  v.push_back(pmix_serve_modex{big_id, proc{"pmrun.1.ab", pmix::wildcard_rank}});
  v.push_back(pmix_register_job{spawned_info(), {1, 5, 0xffffffff}});
  v.push_back(pmix_host_named{"node-7"});
  v.push_back(pmix_notify_ranks{pmix::event_notice{
      "ns", pm::notice_kind::rank_unfinalized, {1, 2}, -9, "hostB", "rank 1 ended"}});
  v.push_back(pmix_restart{{"pmrun.1.ab", "pmrun.1.child"}, first_job("pmrun.1.ab2")});
  v.push_back(pmix_reregister{"pmrun.1.ab", 42});
  return v;
}

std::vector<pmix_event> event_samples() {
  const proc a{"pmrun.1.ab", 3};
  const proc all{"pmrun.1.cd", pmix::wildcard_rank};
  std::vector<pmix_event> v;
  v.push_back(pmix_abort_called{big_id, a, -3, nul_string()});
  v.push_back(pmix_fence_called{2, {a, all}, true, binary()});
  v.push_back(pmix_connect_called{3, {all, a}});
  v.push_back(pmix_spawn_called{
      4,
      a,
      {pmix::spawn_app{{"./child", "-x", ""}, {"A=1", "B="}, "/work", 4, {"h1", "h2"}},
       pmix::spawn_app{}}});
  v.push_back(pmix_publish_called{5, a, {{"port", binary()}, {"empty", {}}}});
  v.push_back(pmix_lookup_called{6, a, {"k1", "k2"}, true, 30});
  v.push_back(pmix_unpublish_called{7, a, {"k1"}});
  v.push_back(pmix_query_called{
      8,
      a,
      {pmix::query{{"pmix.qry.ptable", "pmix.job.size"}, "pmrun.1.ab", pmix::wildcard_rank, "h"},
       pmix::query{{"pmix.qry.ns"}, std::nullopt, 0, std::nullopt}}});
  v.push_back(pmix_modex_called{9, all});
  v.push_back(pmix_client_connected{a});
  v.push_back(pmix_client_finalized{all});
  v.push_back(pmix_local_modex_answered{big_id, true, nul_string()});
  v.push_back(pmix_server_up{});
  v.push_back(pmix_server_failed{});
  v.push_back(pmix_server_said{"pmd: a PMIx connection refused"});
  return v;
}

void expect_refused(const std::function<void()>& decode, const std::string& why) {
  try {
    decode();
    ADD_FAILURE() << "decoded: " << why;
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::launch) << why;
    EXPECT_EQ(std::string(e.what()).rfind("PMIx helper channel: ", 0), 0u) << e.what();
  }
}

template <class V>
std::set<std::size_t> indexes(const std::vector<V>& v) {
  std::set<std::size_t> s;
  for (const auto& x : v) s.insert(x.index());
  return s;
}

TEST(PmixChannel, EveryMessageToTheHelperRoundTrips) {
  const auto samples = to_helper_samples();
  EXPECT_EQ(indexes(samples).size(), std::variant_size_v<to_helper>);
  std::set<std::size_t> payloads;
  for (const auto& m : samples) {
    EXPECT_EQ(decode_to_helper(encode(m)), m) << "alternative " << m.index();
    if (auto* c = std::get_if<pmix_complete>(&m)) {
      payloads.insert(c->payload.index());
      if (auto* q = std::get_if<std::vector<pmix::query_value>>(&c->payload)) {
        std::set<std::size_t> values;
        for (const auto& x : *q) values.insert(x.value.index());
        EXPECT_EQ(values.size(), std::variant_size_v<decltype(pmix::query_value::value)>);
      }
    }
  }
  EXPECT_EQ(payloads.size(), std::variant_size_v<pmix_payload>);
}

TEST(PmixChannel, EveryEventRoundTrips) {
  const auto samples = event_samples();
  EXPECT_EQ(indexes(samples).size(), std::variant_size_v<pmix_event>);
  for (const auto& e : samples) {
    EXPECT_EQ(decode_event(encode(e)), e) << "alternative " << e.index();
  }
}

TEST(PmixChannel, EveryEnumValueRoundTrips) {
  for (int s = 0; s <= static_cast<int>(pmix::status::partial_success); ++s) {
    const to_helper m = pmix_complete{1, static_cast<pmix::status>(s), {}};
    EXPECT_EQ(decode_to_helper(encode(m)), m);
  }
  for (int k = 0; k <= static_cast<int>(pm::notice_kind::rank_unfinalized); ++k) {
    const to_helper m =
        pmix_notify_ranks{pmix::event_notice{"ns", static_cast<pm::notice_kind>(k), {}, 0, "", ""}};
    EXPECT_EQ(decode_to_helper(encode(m)), m);
  }
  std::vector<pmix::query_value> states;
  for (int st = 0; st <= static_cast<int>(pmix::proc_state::comm_lost); ++st) {
    states.push_back({"t", std::vector<pmix::proc_entry>{{proc{"ns", 0}, "h", "x", 1, 2,
                                                          static_cast<pmix::proc_state>(st)}}});
  }
  const to_helper m = pmix_complete{1, pmix::status::success, states};
  EXPECT_EQ(decode_to_helper(encode(m)), m);
}

TEST(PmixChannel, LittleEndianFixedWidthLayout) {
  EXPECT_EQ(encode(to_helper{rank_bound{0x01020304, "ab"}}),
            std::string("\x01\x04\x03\x02\x01\x02\x00\x00\x00"
                        "ab",
                        11));
}

TEST(PmixChannel, EmptyBodyIsRefused) {
  expect_refused([] { decode_to_helper(""); }, "empty to_helper");
  expect_refused([] { decode_event(""); }, "empty event");
}

TEST(PmixChannel, EveryTruncationIsRefused) {
  for (const auto& m : to_helper_samples()) {
    const std::string body = encode(m);
    for (std::size_t n = 0; n < body.size(); ++n) {
      expect_refused([&] { decode_to_helper(std::string_view(body).substr(0, n)); },
                     "alternative " + std::to_string(m.index()) + " cut at " + std::to_string(n));
    }
  }
  for (const auto& e : event_samples()) {
    const std::string body = encode(e);
    for (std::size_t n = 0; n < body.size(); ++n) {
      expect_refused([&] { decode_event(std::string_view(body).substr(0, n)); },
                     "event " + std::to_string(e.index()) + " cut at " + std::to_string(n));
    }
  }
}

TEST(PmixChannel, TrailingBytesAreRefused) {
  for (const auto& m : to_helper_samples()) {
    expect_refused([&] { decode_to_helper(encode(m) + '\0'); }, "to_helper + 1 byte");
  }
  for (const auto& e : event_samples()) {
    expect_refused([&] { decode_event(encode(e) + "xyz"); }, "event + 3 bytes");
  }
}

TEST(PmixChannel, UnknownVariantIndexIsRefused) {
  std::string body = encode(to_helper{pmix_host_named{"h"}});
  body[0] = static_cast<char>(std::variant_size_v<to_helper>);
  expect_refused([&] { decode_to_helper(body); }, "to_helper index past the end");
  body[0] = '\xff';
  expect_refused([&] { decode_to_helper(body); }, "to_helper index 255");

  std::string event = encode(pmix_event{pmix_server_up{}});
  event[0] = static_cast<char>(std::variant_size_v<pmix_event>);
  expect_refused([&] { decode_event(event); }, "event index past the end");

  // A nested variant: pmix_complete's payload index (after index 1, id 8, status 4).
  std::string complete = encode(to_helper{pmix_complete{1, pmix::status::success, {}}});
  ASSERT_EQ(complete.size(), 14u);
  complete[13] = static_cast<char>(std::variant_size_v<pmix_payload>);
  expect_refused([&] { decode_to_helper(complete); }, "payload index past the end");
}

TEST(PmixChannel, HugeCountsAreRefusedBeforeAllocating) {
  // rank_bound: index 1, rank 4, the string's length at 5..8.
  std::string body = encode(to_helper{rank_bound{1, "ab"}});
  for (int i = 5; i < 9; ++i) body[static_cast<std::size_t>(i)] = '\xff';
  expect_refused([&] { decode_to_helper(body); }, "a 4 GiB string");
  // One more than the bytes left (2).
  body[5] = '\3';
  body[6] = body[7] = body[8] = '\0';
  expect_refused([&] { decode_to_helper(body); }, "a string one byte too long");

  // A fence's participants (a vector of structs): index 1, id 8, the count at 9..12.
  std::string fence = encode(pmix_event{pmix_fence_called{1, {}, false, {}}});
  for (int i = 9; i < 13; ++i) fence[static_cast<std::size_t>(i)] = '\xff';
  expect_refused([&] { decode_event(fence); }, "4G participants");
}

TEST(PmixChannel, OutOfRangeEnumsAndFlagsAreRefused) {
  // pmix_complete: index 1, id 8, status (an int) at 9..12.
  std::string body = encode(to_helper{pmix_complete{1, pmix::status::success, {}}});
  body[9] = static_cast<char>(static_cast<int>(pmix::status::partial_success) + 1);
  expect_refused([&] { decode_to_helper(body); }, "status past the last");
  for (int i = 9; i < 13; ++i) body[static_cast<std::size_t>(i)] = '\xff';
  expect_refused([&] { decode_to_helper(body); }, "status -1");

  // pmix_local_modex_answered: index 1, link_id 8, `found` at 9.
  std::string answered = encode(pmix_event{pmix_local_modex_answered{1, true, ""}});
  answered[9] = '\2';
  expect_refused([&] { decode_event(answered); }, "a bool of 2");

  // pmix_register_job ends with job_info's parent flag, then local_ranks' count (4 bytes).
  pmix::job_info info;
  info.nspace = "n";
  std::string job = encode(to_helper{pmix_register_job{info, {}}});
  job[job.size() - 5] = '\2';
  expect_refused([&] { decode_to_helper(job); }, "an optional's flag of 2");
}

}  // namespace
}  // namespace pm::agent::pmix_channel
