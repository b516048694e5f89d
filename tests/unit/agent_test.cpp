// The node agent's state machine (what pmd decides), without processes.
#include "agent/agent.hpp"

#include <csignal>

#include <gtest/gtest.h>

namespace pm::agent {
namespace {

using namespace std::chrono_literals;
namespace ch = pm::channel;

struct harness {
  agent a{options{4242, 1000ms, 20ms}};
  std::vector<action> out;
  agent_time now{0};

  std::vector<action> feed(const event& e) {
    out.clear();
    now += 1ms;
    a.handle(now, e, out);
    return out;
  }
  std::vector<action> msg(ch::message m) { return feed(received{std::move(m)}); }

  // hello + spawn of `n` ranks with pids 100+rank; returns nothing.
  void start(std::uint32_t n) {
    msg(ch::hello{});
    ch::spawn_request s;
    for (std::uint32_t r = 0; r < n; ++r) s.ranks.push_back(spec(r));
    msg(s);
    for (std::uint32_t r = 0; r < n; ++r) feed(rank_spawned{r, 100 + r});
  }
  static ch::rank_spec spec(std::uint32_t r) {
    return ch::rank_spec{r, "/bin/true", {"true"}, {}, "", false, 2};
  }
};

template <class T>
std::vector<T> all(const std::vector<action>& v) {
  std::vector<T> r;
  for (const auto& a : v) {
    if (const T* t = std::get_if<T>(&a)) r.push_back(*t);
  }
  return r;
}
std::vector<ch::message> sent(const std::vector<action>& v) {
  std::vector<ch::message> r;
  for (const auto& s : all<send>(v)) r.push_back(s.msg);
  return r;
}
std::vector<std::pair<std::int64_t, int>> signals(const std::vector<action>& v) {
  std::vector<std::pair<std::int64_t, int>> r;
  for (const auto& s : all<signal_group>(v)) r.emplace_back(s.pgid, s.signo);
  std::sort(r.begin(), r.end());
  return r;
}

TEST(agent, answers_hello_with_its_pid_and_version) {
  harness h;
  const auto a = h.msg(ch::hello{ch::protocol_version, 0});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::hello{ch::protocol_version, 4242}}));
}

TEST(agent, refuses_another_protocol_version_and_clears) {
  harness h;
  const auto a = h.msg(ch::hello{7, 0});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{
                         "launcher speaks protocol version 7, this agent speaks 2"}}));
  // Nothing runs, so it goes straight to the sweep, and exits once nothing is left.
  EXPECT_EQ(all<sweep>(a).size(), 1u);
  const auto b = h.feed(swept{0});
  ASSERT_EQ(all<exit_agent>(b).size(), 1u);
  EXPECT_EQ(all<exit_agent>(b)[0].code, exit_after_launcher_lost);
  EXPECT_TRUE(h.a.done());
}

TEST(agent, requires_hello_first) {
  harness h;
  const auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{"'spawn' message before 'hello'"}}));
  EXPECT_TRUE(all<spawn_rank>(a).empty());
}

TEST(agent, refuses_messages_meant_for_the_launcher) {
  harness h;
  h.msg(ch::hello{});
  const auto a = h.msg(ch::exited{0, exit_status::exited(0)});
  EXPECT_EQ(
      sent(a),
      (std::vector<ch::message>{ch::agent_error{"unexpected 'exited' message from the launcher"}}));
}

TEST(agent, spawns_reports_started_and_exits_without_reaping) {
  harness h;
  h.msg(ch::hello{});
  const auto a = h.msg(ch::spawn_request{{harness::spec(0), harness::spec(1)}});
  ASSERT_EQ(all<spawn_rank>(a).size(), 2u);
  EXPECT_EQ(all<spawn_rank>(a)[1].spec, harness::spec(1));
  EXPECT_EQ(sent(h.feed(rank_spawned{0, 100})), (std::vector<ch::message>{ch::started{0, 100}}));
  EXPECT_EQ(sent(h.feed(rank_spawn_failed{1, 126, "cannot execute"})),
            (std::vector<ch::message>{ch::spawn_failed{1, 126, "cannot execute"}}));
  const auto x = h.feed(rank_exited{0, exit_status::signaled(9)});
  EXPECT_EQ(sent(x), (std::vector<ch::message>{ch::exited{0, exit_status::signaled(9)}}));
  // The leader stays a zombie: no sweep, no reap of it while the job runs.
  EXPECT_TRUE(all<sweep>(x).empty());
  EXPECT_TRUE(all<reap_orphans>(x).empty());
  // A duplicate exit report changes nothing.
  EXPECT_TRUE(h.feed(rank_exited{0, exit_status::exited(0)}).empty());
}

TEST(agent, refuses_a_rank_twice) {
  harness h;
  h.start(1);
  const auto a = h.msg(ch::spawn_request{{harness::spec(0)}});
  EXPECT_TRUE(all<spawn_rank>(a).empty());
  EXPECT_EQ(sent(a), (std::vector<ch::message>{
                         ch::spawn_failed{0, 127, "rank 0 was already started by this agent"}}));
}

TEST(agent, signals_groups_also_of_ranks_that_ended) {
  harness h;
  h.start(3);
  h.feed(rank_exited{1, exit_status::exited(0)});
  // Rank 1's leader is an unreaped zombie, so its group id is still safe to signal.
  const auto a = h.msg(ch::signal_request{{0, 1, 9}, SIGUSR1});
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGUSR1}, {101, SIGUSR1}}));
}

TEST(agent, orphans_are_reaped_while_the_job_runs) {
  harness h;
  h.start(1);
  EXPECT_EQ(all<reap_orphans>(h.feed(child_changed{})).size(), 1u);
}

TEST(agent, shutdown_kills_every_group_then_sweeps_until_no_child_is_left) {
  harness h;
  h.start(2);
  h.feed(rank_exited{0, exit_status::exited(0)});
  const auto a = h.msg(ch::shutdown_request{});
  // SIGKILL to every group (the ended rank's too: its children may live on), then the sweep.
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  ASSERT_EQ(all<sweep>(a).size(), 1u);
  EXPECT_TRUE(std::holds_alternative<sweep>(a.back()));  // after the kills
  // Children remain (reparented orphans): sweep again on the next SIGCHLD or timer.
  const auto b = h.feed(swept{3});
  ASSERT_EQ(all<start_timer>(b).size(), 1u);
  EXPECT_EQ(all<start_timer>(b)[0].after, 20ms);
  EXPECT_EQ(all<sweep>(h.feed(child_changed{})).size(), 1u);
  EXPECT_EQ(all<sweep>(h.feed(timer_fired{all<start_timer>(b)[0].timer})).size(), 1u);
  const auto c = h.feed(swept{0});
  EXPECT_EQ(sent(c), (std::vector<ch::message>{ch::shutdown_done{}}));
  ASSERT_EQ(all<exit_agent>(c).size(), 1u);
  EXPECT_EQ(all<exit_agent>(c)[0].code, exit_after_shutdown);
  EXPECT_TRUE(h.a.done());
  EXPECT_TRUE(h.feed(child_changed{}).empty());  // nothing after the exit
}

TEST(agent, launcher_loss_terms_then_kills_after_the_grace) {
  harness h;
  h.start(2);
  const auto a = h.feed(channel_lost{"agent channel closed"});
  EXPECT_EQ(signals(a),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}, {101, SIGTERM}}));
  ASSERT_EQ(all<start_timer>(a).size(), 1u);
  EXPECT_EQ(all<start_timer>(a)[0].after, 1000ms);
  // Nothing is sent any more, and launcher-side requests are gone with the channel.
  EXPECT_TRUE(sent(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})).empty());
  const auto b = h.feed(timer_fired{all<start_timer>(a)[0].timer});
  EXPECT_EQ(signals(b),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  EXPECT_EQ(all<sweep>(b).size(), 1u);
  const auto c = h.feed(swept{0});
  EXPECT_TRUE(sent(c).empty());
  EXPECT_EQ(all<exit_agent>(c).at(0).code, exit_after_launcher_lost);
}

TEST(agent, launcher_loss_does_not_wait_the_grace_once_every_rank_ended) {
  harness h;
  h.start(2);
  const auto a = h.feed(channel_lost{"closed"});
  const auto timer = all<start_timer>(a).at(0).timer;
  EXPECT_TRUE(all<sweep>(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})).empty());
  const auto b = h.feed(rank_exited{1, exit_status::exited(0)});
  EXPECT_EQ(signals(b),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}, {101, SIGKILL}}));
  EXPECT_EQ(all<sweep>(b).size(), 1u);
  // The grace timer, now stale, does nothing.
  EXPECT_TRUE(h.feed(timer_fired{timer}).empty());
}

TEST(agent, a_rank_spawned_after_the_end_began_is_killed_too) {
  harness h;
  h.msg(ch::hello{});
  h.msg(ch::spawn_request{{harness::spec(0)}});
  h.msg(ch::shutdown_request{});
  const auto a = h.feed(rank_spawned{0, 100});
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGKILL}}));
  EXPECT_EQ(sent(h.msg(ch::spawn_request{{harness::spec(1)}})),
            (std::vector<ch::message>{ch::spawn_failed{1, 127, "the agent is shutting down"}}));
}

TEST(agent, its_own_sigterm_is_reported_and_treated_as_launcher_loss) {
  harness h;
  h.start(1);
  const auto a = h.feed(terminate_requested{SIGTERM});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{"the agent received SIGTERM"}}));
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}}));
  // Exits are still reported while the channel is open.
  EXPECT_EQ(sent(h.feed(rank_exited{0, exit_status::signaled(SIGTERM)})),
            (std::vector<ch::message>{ch::exited{0, exit_status::signaled(SIGTERM)}}));
}

TEST(agent, garbage_from_the_launcher_is_answered_and_ends_the_job) {
  harness h;
  h.start(1);
  const auto a = h.feed(bad_message{"agent channel: empty frame"});
  EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::agent_error{"agent channel: empty frame"}}));
  EXPECT_EQ(signals(a), (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}}));
}

TEST(agent, launcher_signals_are_ignored_once_the_agent_kills_on_its_own) {
  harness h;
  h.start(1);
  h.feed(terminate_requested{SIGTERM});
  EXPECT_TRUE(signals(h.msg(ch::signal_request{{0}, SIGCONT})).empty());
}

// ---- heartbeats (remote transports) ----

struct heartbeat_harness {
  agent a{options{4242, 1000ms, 20ms, 1000ms, 3000ms}};
  std::vector<action> out;
  std::vector<action> at(agent_time t, const event& e) {
    out.clear();
    a.handle(t, e, out);
    return out;
  }
  // The heartbeat timer the last actions started (0 if none).
  static std::uint64_t heartbeat_timer(const std::vector<action>& v) {
    std::uint64_t id = 0;
    for (const auto& t : all<start_timer>(v)) {
      if ((t.timer >> 63) != 0) id = t.timer;  // heartbeat timers carry the top bit
    }
    return id;
  }
};

TEST(agent, sends_a_heartbeat_each_interval_once_greeted) {
  heartbeat_harness h;
  const auto hello = h.at(0ms, received{ch::hello{}});
  auto timer = heartbeat_harness::heartbeat_timer(hello);
  ASSERT_NE(timer, 0u);
  for (int beat = 1; beat <= 5; ++beat) {
    // The launcher talks now and then (its own heartbeats), so the agent never gives up.
    h.at(std::chrono::milliseconds(beat * 1000 - 500), received{ch::heartbeat{}});
    const auto a = h.at(std::chrono::milliseconds(beat * 1000), timer_fired{timer});
    EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::heartbeat{}})) << beat;
    EXPECT_TRUE(signals(a).empty());
    timer = heartbeat_harness::heartbeat_timer(a);
    ASSERT_NE(timer, 0u);
  }
}

TEST(agent, a_silent_launcher_is_lost_after_the_heartbeat_timeout) {
  heartbeat_harness h;
  auto timer = heartbeat_harness::heartbeat_timer(h.at(0ms, received{ch::hello{}}));
  ch::spawn_request s;
  s.ranks.push_back(harness::spec(0));
  s.ranks.push_back(harness::spec(1));
  h.at(10ms, received{s});
  h.at(20ms, rank_spawned{0, 100});
  h.at(21ms, rank_spawned{1, 101});
  // Nothing more from the launcher: beats at 1 s and 2 s still go out...
  for (int beat = 1; beat <= 2; ++beat) {
    const auto a = h.at(std::chrono::milliseconds(beat * 1000), timer_fired{timer});
    EXPECT_EQ(sent(a), (std::vector<ch::message>{ch::heartbeat{}}));
    timer = heartbeat_harness::heartbeat_timer(a);
  }
  // ...at 3.01 s (3 s after the last message, at 10 ms) the launcher counts as lost: SIGTERM to
  // every rank group and the grace timer, as when the channel closes; nothing is sent.
  const auto lost = h.at(3010ms, timer_fired{timer});
  EXPECT_TRUE(sent(lost).empty());
  EXPECT_EQ(signals(lost),
            (std::vector<std::pair<std::int64_t, int>>{{100, SIGTERM}, {101, SIGTERM}}));
  EXPECT_EQ(heartbeat_harness::heartbeat_timer(lost), 0u);  // no more beats
  EXPECT_EQ(all<start_timer>(lost).size(), 1u);             // the grace
}

TEST(agent, heartbeats_are_off_by_default_and_a_heartbeat_from_the_launcher_is_accepted) {
  harness h;
  const auto hello = h.msg(ch::hello{});
  EXPECT_TRUE(all<start_timer>(hello).empty());
  const auto beat = h.msg(ch::heartbeat{});
  EXPECT_TRUE(beat.empty());
  // A stale heartbeat timer id (not the latest) does nothing.
  EXPECT_TRUE(h.feed(timer_fired{(std::uint64_t{1} << 63) | 5}).empty());
}

}  // namespace
}  // namespace pm::agent
