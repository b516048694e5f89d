// pmd restarts a job in place (link::restart_request; docs/agent.md, "Restarts"): every process of
// the ranks goes, leftovers and a descendant that escaped its group with setsid included, every
// byte and every end of the ranks before reaches the launcher before `restarted`, and the same
// rank numbers run again under the same agent.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "link/endpoint.hpp"
#include "support/host_link.hpp"
#include "support/pmd_session.hpp"
#include "support/processes.hpp"

namespace pm {
namespace {

using namespace local_agent_support;
using namespace std::chrono_literals;

// Gone for good: not even a zombie (the agent reaped it, or its reaper did).
bool reaped(pid_t pid) {
  return !std::filesystem::exists("/proc/" + std::to_string(pid));
}

// The index in `messages` of the first message that satisfies `pred` (messages.size(): none).
template <class P>
std::size_t index_of(const std::vector<link::message>& messages, P pred) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (pred(messages[i])) return i;
  }
  return messages.size();
}

// Over pipes, as ssh carries it: output travels as frames, so `restarted` must wait for every
// stream's end.
TEST(LocalAgent, ARestartEndsEveryProcessOfTheRanksThenRunsThemAgain) {
  session_options o;
  o.pipes = true;
  agent_session s(o);
  // Rank 0 exits 3 and leaves a child that holds its output; rank 1 leaves a child that called
  // setsid (out of its group: pmd, a subreaper, gets it back); rank 2 just runs. App 3 is what
  // the next incarnation runs.
  s.connect(job({payload_app({"grandchild", "100", "exit", "3"}),
                 payload_app({"daemon", "100", "sleep", "100"}), payload_app({"sleep", "100"}),
                 payload_app({"echo", "again", "exit", "0"})},
                true));
  s.send(spawn_of({rank_of(0), rank_of(1), rank_of(2)}));
  const auto printed = [&](std::uint32_t rank, const char* word) {
    const auto it = s.got.output.find({rank, output_stream::out});
    return it == s.got.output.end() ? pid_t{0} : pid_after(it->second, word);
  };
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::started_rank>() == 3 && s.got.count<link::ended_rank>() == 1 &&
           printed(0, "grandchild") > 0 && printed(1, "daemon") > 0;
  })) << s.got.count<link::started_rank>()
      << " started";
  std::vector<pid_t> old;
  for (const auto& r : s.got.all<link::started_rank>()) old.push_back(static_cast<pid_t>(r.pid));
  old.push_back(printed(0, "grandchild"));
  old.push_back(printed(1, "daemon"));
  for (const pid_t p : old) s.cleanup.pids.insert(p);
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::exited(3));
  for (const pid_t p : old) ASSERT_FALSE(reaped(p)) << p;  // the leftovers run

  s.send(link::restart_request{1, std::nullopt});
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::restarted>() == 1; }))
      << s.got.count<link::ended_rank>() << " ended, " << s.got.count<link::closed_stream>()
      << " streams closed";
  const auto answer = s.got.all<link::restarted>()[0];
  EXPECT_EQ(answer.incarnation, 1u);
  EXPECT_NE(answer.port, 0);
  // By then every process of the ranks is gone, reaped, not a zombie.
  for (const pid_t p : old) EXPECT_TRUE(reaped(p)) << "pid " << p << " is still there";
  // Before it: every rank's end (1 and 2 killed) and the end of each of their 6 streams.
  const auto at = index_of(s.got.messages, [](const link::message& m) {
    return std::holds_alternative<link::restarted>(m);
  });
  const std::vector<link::message> before(s.got.messages.begin(),
                                          s.got.messages.begin() + static_cast<std::ptrdiff_t>(at));
  const auto ended = all_of<link::ended_rank>(before);
  ASSERT_EQ(ended.size(), 3u);
  EXPECT_EQ(ended[1].status, exit_status::signaled(SIGKILL));
  EXPECT_EQ(ended[2].status, exit_status::signaled(SIGKILL));
  EXPECT_EQ(all_of<link::closed_stream>(before).size(), 6u);
  EXPECT_EQ(s.got.output_after_close, 0u);

  // The same rank numbers again, under the same agent, with new processes.
  s.send(spawn_of({rank_of(0, 3), rank_of(1, 3), rank_of(2, 3)}));
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::started_rank>() == 6 && s.got.count<link::ended_rank>() == 6 &&
           s.got.count<link::closed_stream>() == 12;
  })) << s.got.count<link::started_rank>()
      << " started, " << s.got.count<link::ended_rank>() << " ended";
  const auto started = s.got.all<link::started_rank>();
  const auto ends = s.got.all<link::ended_rank>();
  for (std::size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(ends[i].status, exit_status::exited(0)) << "rank " << ends[i].rank;
    EXPECT_EQ(std::count(old.begin(), old.end(), static_cast<pid_t>(started[i].pid)), 0);
  }
  for (std::uint32_t r = 0; r < 3; ++r) {
    EXPECT_NE(s.got.output[std::make_pair(r, output_stream::out)].find("again\n"),
              std::string::npos)
        << r;
  }
  EXPECT_EQ(s.shutdown(), "");
}

// Over the local socket (output pipes handed to the launcher): nothing to wait for but the
// processes; a stale incarnation after it is the launcher's mistake.
TEST(LocalAgent, ARestartOverTheLocalSocketAndAStaleOneAfterIt) {
  agent_session s;
  s.connect(job({payload_app({"grandchild", "100", "sleep", "100"}),
                 payload_app({"echo", "again", "exit", "0"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started_rank>() == 1; }));
  const std::string line = read_line_of(s.got.pipe(0, 0), "grandchild");
  const pid_t grandchild = pid_after(line, "grandchild");
  ASSERT_GT(grandchild, 0) << line;
  s.cleanup.pids.insert(grandchild);
  const auto leader = static_cast<pid_t>(s.got.all<link::started_rank>()[0].pid);

  s.send(link::restart_request{2, std::nullopt});
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::restarted>() == 1; }));
  EXPECT_EQ(s.got.all<link::restarted>()[0].incarnation, 2u);
  EXPECT_TRUE(reaped(leader));
  EXPECT_TRUE(reaped(grandchild));
  s.send(spawn_of({rank_of(0, 1)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::ended_rank>() == 2; }));
  EXPECT_EQ(s.got.all<link::ended_rank>()[1].status, exit_status::exited(0));

  s.send(link::restart_request{2, std::nullopt});
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::agent_error>() == 1; }));
  EXPECT_EQ(s.got.all<link::agent_error>()[0].text,
            "'restart' to incarnation 2, which is not after incarnation 2");
}

// With PMIx: the ranks of the next incarnation are told its namespace (the server, never
// started here since no rank called PMIx, starts with that one when one does).
TEST(LocalAgent, ARestartGivesTheRanksTheNewPmixNamespace) {
  session_options o;
  o.pipes = true;
  agent_session s(o);
  auto setup = job({payload_app({"env", "PMIX_NAMESPACE", "exit", "0"})}, true);
  setup.pmix = link::pmix_job{"pmrun.9.a", 1, 0, {"localhost"}, {0}, {0}, {0}, "", 0};
  s.connect(setup);
  s.send(spawn_of({rank_of(0)}));
  const auto done = [&](std::size_t n) {
    return s.got.count<link::ended_rank>() == n && s.got.count<link::closed_stream>() == 2 * n;
  };
  ASSERT_TRUE(s.run_until([&] { return done(1); }));
  auto next = *setup.pmix;
  next.nspace = "pmrun.9.b";
  s.send(link::restart_request{1, next});
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::restarted>() == 1; }));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return done(2); }));
  EXPECT_EQ(s.got.output[std::make_pair(0u, output_stream::out)],
            "PMIX_NAMESPACE=pmrun.9.a\nPMIX_NAMESPACE=pmrun.9.b\n");
  EXPECT_EQ(s.shutdown(), "");
}

// With a running PMIx server: the rank of each incarnation connects (PMIx_Init) under its own
// namespace, so the server dropped the one before and registered the next (pmix_touch, built
// with the MPI tests, is a bare PMIx client).
TEST(LocalAgent, EachIncarnationsRankReachesThePmixServerUnderItsNamespace) {
  const std::string touch = std::string(PM_BINARY_DIR) + "/tests/mpi/pmix_touch";
  if (!std::filesystem::exists(touch)) GTEST_SKIP() << "no " << touch << " (no PMIx)";
  session_options o;
  o.pipes = true;
  agent_session s(o);
  link::app_spec app;
  // Under the ASan build pmix_touch is instrumented too, and LeakSanitizer finds libpmix's own
  // leaks at its exit (not ours): it would exit 1.
  app.argv = {"/bin/sh", "-c",
              "echo ns $PMIX_NAMESPACE; ASAN_OPTIONS=detect_leaks=0 exec " + touch};
  auto setup = job({app}, true);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  setup.pmix = link::pmix_job{"pmrun.9.a", 1, 0, {host}, {0}, {0}, {0}, "", 0};
  s.connect(setup);
  const auto done = [&](std::size_t n) {
    return s.got.count<link::ended_rank>() == n && s.got.count<link::closed_stream>() == 2 * n;
  };
  std::string expected;
  for (std::uint32_t incarnation = 0; incarnation < 3; ++incarnation) {
    const std::string nspace = std::string("pmrun.9.") + static_cast<char>('a' + incarnation);
    if (incarnation > 0) {
      auto next = *setup.pmix;
      next.nspace = nspace;
      s.send(link::restart_request{incarnation, next});
      ASSERT_TRUE(s.run_until([&] { return s.got.count<link::restarted>() == incarnation; }));
    }
    s.send(spawn_of({rank_of(0)}));
    ASSERT_TRUE(s.run_until([&] { return done(incarnation + 1); }, 10s))
        << s.got.output[std::make_pair(0u, output_stream::err)];
    EXPECT_EQ(s.got.all<link::ended_rank>().back().status, exit_status::exited(0))
        << s.got.output[std::make_pair(0u, output_stream::err)];
    expected += "ns " + nspace + "\ntouch rank 0 size 1\n";
    EXPECT_EQ(s.got.output[std::make_pair(0u, output_stream::out)], expected);
  }
  EXPECT_EQ(s.shutdown(), "");
}

}  // namespace
}  // namespace pm
