// pmd runs ranks (tests/support/pmd_session.hpp): started by the local transport (output pipes
// handed over) or over pipes as ssh gives it (output as data frames, with flow control); spawn
// failures, the program's lookup, signals, shutdown, the ranks' environment. The link's failures
// and liveness are in local_agent_link_test.cpp.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "link/endpoint.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"
#include "support/host_link.hpp"
#include "support/pmd_session.hpp"
#include "support/processes.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "transport/local/local_transport.hpp"

extern char** environ;

namespace pm {
namespace {

using namespace local_agent_support;

// ---------------------------------------------------------------------------------------------
// The local transport

TEST(LocalAgent, FindsPmdNextToTheBuild) {
  ::unsetenv("PM_AGENT");
  EXPECT_EQ(fs::canonical(local::default_agent_path()), fs::canonical(pmd_path()));
  ::setenv("PM_AGENT", "/nonexistent/pmd", 1);
  try {
    local::default_agent_path();
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(e.what(), "PM_AGENT names '/nonexistent/pmd', which is not an executable file");
  }
  ::unsetenv("PM_AGENT");
}

TEST(LocalAgent, RunsRanksAndHandsOverTheirOutputPipes) {
  agent_session s;
  s.connect(job({payload_app({"echo", "hello", "echo-err", "oops", "exit", "3"}),
                 payload_app({"kill", "9"})}));
  s.send(spawn_of({rank_of(0), rank_of(1)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::ended_rank>() == 2; }));
  ASSERT_TRUE(s.got.agent);
  EXPECT_EQ(s.got.agent->pid, s.agent_pid);
  ASSERT_EQ(s.got.count<link::started_rank>(), 2u);
  for (const auto& st : s.got.all<link::started_rank>()) EXPECT_GT(st.pid, 0);
  for (const auto& x : s.got.all<link::ended_rank>()) {
    EXPECT_EQ(x.status, x.rank == 0 ? exit_status::exited(3) : exit_status::signaled(9))
        << "rank " << x.rank;
  }
  // Output never crosses the local link: each rank's pipes came with its `started`.
  EXPECT_TRUE(s.got.output.empty());
  EXPECT_EQ(s.got.count<link::closed_stream>(), 0u);
  ASSERT_EQ(s.got.pipes[0].size(), 2u);
  EXPECT_EQ(read_fd(s.got.pipe(0, 0)), "hello\n");
  EXPECT_EQ(read_fd(s.got.pipe(0, 1)), "oops\n");
  EXPECT_EQ(read_fd(s.got.pipe(1, 0)), "");
  const pid_t agent = s.agent_pid;
  EXPECT_EQ(s.shutdown(), "");
  EXPECT_EQ(*s.got.down, "the agent closed the link");
  // pmd was reaped by the transport (through its pidfd): not even a zombie is left.
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(agent)));
}

TEST(LocalAgent, MergedOutputAndStdinFromTheLauncher) {
  agent_session s;
  auto setup = job({payload_app({"cat", "echo-err", "done"})});
  setup.streams = 1;
  s.connect(setup);
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  owned_fd in_read(in[0]), in_write(in[1]);
  auto r = rank_of(0);
  r.stdin_from_launcher = true;
  std::vector<owned_fd> fds;
  fds.push_back(std::move(in_read));
  s.send(spawn_of({r}), std::move(fds));
  ASSERT_EQ(::write(in_write.get(), "abc\n", 4), 4);
  in_write.reset();
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::ended_rank>() == 1; }));
  ASSERT_EQ(s.got.pipes[0].size(), 1u);  // one pipe for both streams
  EXPECT_EQ(read_fd(s.got.pipe(0, 0)), "abc\ndone\n");
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::exited(0));
  EXPECT_EQ(s.shutdown(), "");
}

TEST(LocalAgent, SpawnFailuresAreMessagesWithACodeAndAReason) {
  const fs::path plain = fs::temp_directory_path() / ("pm-not-exec-" + std::to_string(::getpid()));
  { std::ofstream(plain) << "#!/bin/sh\n"; }
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write);
  agent_session s;
  auto missing = payload_app({});
  missing.argv = {"/nonexistent/app"};
  auto not_exec = payload_app({});
  not_exec.argv = {plain.string()};
  s.connect(job({missing, not_exec, payload_app({"exit", "0"})}));
  s.send(spawn_of({rank_of(0), rank_of(1), rank_of(2)}));
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::spawn_failed>() == 2 && s.got.count<link::ended_rank>() == 1;
  }));
  fs::remove(plain);
  std::map<std::uint32_t, link::spawn_failed> failed;
  for (const auto& f : s.got.all<link::spawn_failed>()) failed[f.rank] = f;
  EXPECT_EQ(failed[0].code, 127);
  EXPECT_EQ(failed[0].reason, "'/nonexistent/app' does not exist");
  EXPECT_EQ(failed[1].code, 126);
  EXPECT_NE(failed[1].reason.find(plain.string()), std::string::npos) << failed[1].reason;
  EXPECT_NE(failed[1].reason.find("not executable"), std::string::npos) << failed[1].reason;
  // The others run.
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].rank, 2u);
  EXPECT_EQ(s.shutdown(), "");
}

// pmd finds the program on its own host: in the rank's PATH (composed from pmd's environment and
// the job's variables, not from the launcher's), relative to the app's working directory.
TEST(LocalAgent, ResolvesTheProgramInTheRankPathAndWdir) {
  session_options o;
  o.environment = {"PATH=/usr/bin:/bin"};  // no pm_payload there
  agent_session s(o);
  auto in_path = payload_app({"echo", "in-path"}, {"PATH=/usr/bin:" + payload_dir()});
  in_path.argv.front() = "pm_payload";
  auto in_wdir = payload_app({"pid"});
  in_wdir.argv.front() = "./pm_payload";
  in_wdir.wdir = payload_dir();
  auto not_in_path = payload_app({});
  not_in_path.argv.front() = "pm_payload";
  auto wrong_wdir = payload_app({});
  wrong_wdir.argv.front() = "./pm_payload";
  wrong_wdir.wdir = "/";
  s.connect(job({in_path, in_wdir, not_in_path, wrong_wdir}));
  s.send(spawn_of({rank_of(0), rank_of(1), rank_of(2), rank_of(3)}));
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::ended_rank>() == 2 && s.got.count<link::spawn_failed>() == 2;
  }));
  for (const auto& x : s.got.all<link::ended_rank>()) {
    EXPECT_EQ(x.status, exit_status::exited(0)) << "rank " << x.rank;
  }
  EXPECT_EQ(read_fd(s.got.pipe(0, 0)), "in-path\n");
  EXPECT_EQ(read_fd(s.got.pipe(1, 0)).rfind("pid ", 0), 0u);
  std::map<std::uint32_t, link::spawn_failed> failed;
  for (const auto& f : s.got.all<link::spawn_failed>()) failed[f.rank] = f;
  EXPECT_EQ(failed[2].code, 127);
  EXPECT_EQ(failed[2].reason, "program 'pm_payload' not found in PATH");
  EXPECT_EQ(failed[3].code, 127);
  EXPECT_EQ(failed[3].reason, "'./pm_payload' does not exist (in '/')");
  EXPECT_EQ(s.shutdown(), "");
}

TEST(LocalAgent, SignalsReachTheRankProcessGroup) {
  agent_session s;
  s.connect(job({payload_app({"grandchild", "30", "sleep", "30"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.pipe(0, 0) >= 0; }));
  const std::string line = read_line_of(s.got.pipe(0, 0), "grandchild");
  const pid_t grandchild = pid_after(line, "grandchild");
  ASSERT_GT(grandchild, 0) << line;
  s.cleanup.pids.insert(grandchild);
  s.send(link::signal_request{{0}, SIGTERM});
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::ended_rank>() == 1; }));
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::signaled(SIGTERM));
  EXPECT_TRUE(all_gone({grandchild}, 2s));  // same process group
  EXPECT_EQ(s.shutdown(), "");
}

TEST(LocalAgent, ShutdownClearsDescendantsThatEscapedWithSetsid) {
  agent_session s;
  // The rank leaves a setsid daemon and a plain grandchild behind and exits by itself.
  s.connect(job({payload_app({"daemon", "60", "grandchild", "60", "exit", "0"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::ended_rank>() == 1; }));
  const std::string text = read_line_of(s.got.pipe(0, 0), "grandchild");
  const pid_t daemon = pid_after(text, "daemon");
  const pid_t grandchild = pid_after(text, "grandchild");
  ASSERT_GT(daemon, 0) << text;
  ASSERT_GT(grandchild, 0) << text;
  s.cleanup.pids.insert(daemon);
  s.cleanup.pids.insert(grandchild);
  EXPECT_TRUE(alive(daemon));
  EXPECT_TRUE(alive(grandchild));
  EXPECT_EQ(s.shutdown(), "");
  // pmd swept everything before it exited: no wait needed, not even zombies.
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(daemon)));
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(grandchild)));
}

// ---------------------------------------------------------------------------------------------
// pmd over pipes (what ssh gives): no descriptor travels, output comes as data frames.

TEST(LocalAgent, ForwardsEveryOutputByteOverPipesInOrder) {
  constexpr std::size_t flood = std::size_t{8} << 20;
  session_options o;
  o.pipes = true;
  agent_session s(o);
  const auto app = payload_app(
      {"echo-err", "start", "flood", std::to_string(flood), "65536", "echo-err", "end"});
  s.connect(job({app, app}, true));
  s.send(spawn_of({rank_of(0), rank_of(1)}));
  ASSERT_TRUE(s.run_until(
      [&] {
        return s.got.count<link::ended_rank>() == 2 && s.got.count<link::closed_stream>() == 4;
      },
      4s))
      << s.got.output_bytes() << " bytes arrived; " << s.got.down.value_or("");
  EXPECT_TRUE(s.got.pipes[0].empty() && s.got.pipes[1].empty());  // nothing travels as an fd
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    const auto& out = s.got.output[{rank, output_stream::out}];
    EXPECT_EQ(out.size(), flood);
    EXPECT_TRUE(out == flood_text(rank, flood)) << "rank " << rank << ": bytes lost or reordered";
    EXPECT_EQ((s.got.output[{rank, output_stream::err}]), "start\nend\n");
  }
  for (const auto& c : s.got.all<link::closed_stream>()) {
    const std::uint64_t want = c.stream == output_stream::out ? flood : 10;
    EXPECT_EQ(c.bytes, want) << "rank " << c.rank;
    // Every output frame of the stream came before its stream_closed.
    EXPECT_EQ((s.got.output_at_close[{c.rank, c.stream}]), want) << "rank " << c.rank;
  }
  EXPECT_EQ(s.got.output_after_close, 0u);
  for (const auto& x : s.got.all<link::ended_rank>()) EXPECT_EQ(x.status, exit_status::exited(0));
  EXPECT_EQ(s.shutdown(), "");
}

// Flow control: output the launcher has not acknowledged stops pmd at its window (4 MiB): it
// stops reading the rank's pipe, so the rank blocks in write() and does not exit, while
// heartbeats keep the link up. Credit given back, everything arrives.
TEST(LocalAgent, UnacknowledgedOutputBlocksTheRank) {
  constexpr std::size_t flood = std::size_t{6} << 20;
  constexpr std::uint64_t window = link::endpoint_options{}.send_window;
  session_options o;
  o.pipes = true;
  o.heartbeat = 100ms;  // heartbeats both ways: back-pressure must not hold them up
  o.silence = 400ms;
  agent_session s(o);
  s.acknowledge_output = false;
  auto setup = job({payload_app({"flood", std::to_string(flood), "65536"})}, true);
  setup.heartbeat_ms = 100;
  setup.silence_ms = 400;
  s.connect(setup);
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.output_bytes() >= window; }));
  s.run_for(600ms);  // time to overrun the window, if pmd did; longer than the silence timeout
  EXPECT_EQ(s.got.output_bytes(), window);
  EXPECT_EQ(s.got.count<link::ended_rank>(), 0u);
  ASSERT_EQ(s.got.count<link::started_rank>(), 1u);
  EXPECT_TRUE(alive(static_cast<pid_t>(s.got.all<link::started_rank>()[0].pid)));
  EXPECT_FALSE(s.got.down);
  s.release_output();
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::ended_rank>() == 1 && s.got.count<link::closed_stream>() == 2;
  })) << s.got.output_bytes();
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::exited(0));
  EXPECT_EQ(s.shutdown(), "");
  // Checked once the link is over: a launcher that stops running its loop for longer than the
  // silence timeout (building 6 MiB under ASan) is rightly taken for lost.
  EXPECT_TRUE((s.got.output[{0, output_stream::out}] == flood_text(0, flood)));
}

// The rank's environment is composed by pmd: its own environment (minus an outer job's identity),
// then the job's base, the rank's profile variables, the overrides, the app's variables; a later
// one wins. The launcher's environment does not cross the link.
TEST(LocalAgent, PmdComposesTheRankEnvironmentFromItsOwn) {
  ::setenv("PM_T_LAUNCHER_ONLY", "1", 1);
  session_options o;
  o.pipes = true;
  o.environment = {"PATH=/usr/bin:/bin", "PM_T_AGENT=agent",       "PM_T_BASE=agent",
                   "PM_T_PROFILE=agent", "PM_T_OVERRIDE=agent",    "PM_T_APP=agent",
                   "PMIX_RANK=7",        "OMPI_COMM_WORLD_SIZE=99"};
  agent_session s(o);
  auto setup = job({payload_app({"env-all"}, {"PM_T_APP=app"})}, true);
  setup.base = {"PM_T_BASE=base", "PM_T_PROFILE=base", "PM_T_OVERRIDE=base", "PM_T_APP=base"};
  setup.overrides = {"PM_T_OVERRIDE=override", "PM_T_APP=override"};
  auto r = rank_of(0);
  r.env = {"OMPI_COMM_WORLD_RANK=0", "PM_T_PROFILE=profile", "PM_T_OVERRIDE=profile",
           "PM_T_APP=profile"};
  s.connect(setup);
  s.send(spawn_of({r}));
  const bool ended = s.run_until([&] {
    return s.got.count<link::ended_rank>() == 1 && s.got.count<link::closed_stream>() == 2;
  });
  ::unsetenv("PM_T_LAUNCHER_ONLY");
  ASSERT_TRUE(ended);
  std::set<std::string> env;
  std::istringstream lines(s.got.output[{0, output_stream::out}]);
  for (std::string line; std::getline(lines, line);) env.insert(line);
  EXPECT_EQ(env, (std::set<std::string>{"PATH=/usr/bin:/bin", "PM_T_AGENT=agent", "PM_T_BASE=base",
                                        "PM_T_PROFILE=profile", "PM_T_OVERRIDE=override",
                                        "PM_T_APP=app", "OMPI_COMM_WORLD_RANK=0"}));
  EXPECT_EQ(s.shutdown(), "");
}

}  // namespace
}  // namespace pm
