// pmd's link to its launcher when something goes wrong (tests/support/pmd_session.hpp): a
// launcher killed or torn down, garbage either way, an agent that cannot start, is killed or
// dies before its hello, a wrong nonce, a protocol's order broken, noise before the agent, last
// words; and the link's liveness: a silent launcher is lost, heartbeats keep a quiet link up.
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

// The launcher (a forked child driving a host_link) is SIGKILLed: pmd sees its socket close and
// kills every rank and descendant, the SIGTERM-ignoring one after the job's grace, then exits 1.
TEST(LocalAgent, LauncherSigkillLeavesNothingBehind) {
  subreaper_scope adopt;  // pmd, orphaned by the launcher's death, becomes our child
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(report[0]);
    agent_session s;
    s.connect(job({payload_app({"daemon", "60", "grandchild", "60", "ignore-term", "sleep", "60"}),
                   payload_app({"sleep", "60"})}));
    s.send(spawn_of({rank_of(0), rank_of(1)}));
    s.run_until([&] { return s.got.count<link::started_rank>() == 2 && s.got.pipes.size() == 2; });
    std::string pids = std::to_string(s.agent_pid);
    for (const auto& st : s.got.all<link::started_rank>()) pids += " " + std::to_string(st.pid);
    const std::string text = read_line_of(s.got.pipe(0, 0), "grandchild");
    pids += " " + std::to_string(pid_after(text, "daemon"));
    pids += " " + std::to_string(pid_after(text, "grandchild"));
    pids += "\n";
    if (::write(report[1], pids.data(), pids.size()) < 0) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(report[1]);
  reaper cleanup;
  cleanup.pids.insert(launcher);
  const std::string text = read_fd(report[0], "\n", 4s);
  ::close(report[0]);
  std::vector<pid_t> pids;
  for (const char* p = text.c_str(); *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    pids.push_back(static_cast<pid_t>(v));
    p = end;
  }
  for (pid_t p : pids) cleanup.pids.insert(p);
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  ASSERT_EQ(pids.size(), 5u) << text;
  for (pid_t p : pids) ASSERT_GT(p, 0) << text;
  // pmd, both ranks (one ignores SIGTERM: killed after the 300 ms grace), the setsid daemon and
  // the grandchild.
  EXPECT_TRUE(all_gone(pids, 3s)) << text;
  // pmd exited by itself, with the code for "launcher lost".
  ASSERT_EQ(::waitpid(pids[0], &status, 0), pids[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
}

// Destroying the transport (an embedder tearing a job down) leaves nothing behind, and nothing
// keeps running in the io_context afterwards.
TEST(LocalAgent, DestroyingTheTransportLeavesNothingBehind) {
  agent_session s;
  s.connect(job({payload_app({"sleep", "30"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started_rank>() == 1; }));
  const pid_t rank = static_cast<pid_t>(s.got.all<link::started_rank>()[0].pid);
  const pid_t agent = s.agent_pid;
  s.link->close();
  s.transport.reset();  // blocks until pmd is gone
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(agent)));
  EXPECT_TRUE(all_gone({rank}, 1s));
  s.io.restart();
  const auto handlers = s.io.run_for(100ms);
  EXPECT_LT(handlers, 10u) << "the io_context keeps running handlers for a transport that is gone";
}

// The agent side: a launcher that sends garbage loses its agent: pmd closes the link and clears
// its ranks (SIGTERM to their groups), then exits 1.
TEST(LocalAgent, PmdAnswersGarbageByClosingTheLinkAndClearingItsRanks) {
  agent_session s;
  ASSERT_TRUE(s.connect_raw()) << s.open_failed.value_or("");
  raw_link r(*s.stream, job_nonce);
  r.ep.send(job({payload_app({"grandchild", "30", "sleep", "30"})}));
  r.ep.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(r.flush());
  ASSERT_TRUE(r.read_until([&] { return r.count<link::started_rank>() == 1; }));
  const pid_t rank = static_cast<pid_t>(all_of<link::started_rank>(r.messages)[0].pid);
  s.cleanup.pids.insert(rank);
  const std::string line = read_line_of(r.pipes[0][0].get(), "grandchild");
  const pid_t grandchild = pid_after(line, "grandchild");
  ASSERT_GT(grandchild, 0) << line;
  s.cleanup.pids.insert(grandchild);
  // A frame header announcing 3 GiB.
  const std::uint8_t garbage[] = {0xc0, 0, 0, 0, 1, 2, 3};
  ASSERT_TRUE(r.write_raw(garbage));
  r.read_until([] { return false; });  // until pmd closes the stream
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(r.down.value_or(""), "the agent closed the link");
  EXPECT_TRUE(all_gone({rank, grandchild}, 1s));
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
}

// The launcher side: an "agent" that writes garbage after the magic is a lost host, with a reason
// that names the problem.
TEST(LocalAgent, GarbageFromTheAgentEndsTheLinkWithAClearReason) {
  const auto dir = fs::temp_directory_path() / ("pm-fake-pmd-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream bytes(dir / "reply", std::ios::binary);
    bytes.write("\0pmlink\0\xc0\0\0\0", 12);
    std::ofstream script(dir / "pmd");
    script << "#!/bin/sh\ncat '" << (dir / "reply").string() << "'\nexec cat >/dev/null\n";
  }
  fs::permissions(dir / "pmd", fs::perms::owner_all);
  {
    session_options o;
    o.agent_path = (dir / "pmd").string();
    agent_session s(o);
    s.connect(job({payload_app({"exit", "0"})}));
    const bool down = s.run_until([&] { return s.got.down.has_value(); });
    EXPECT_TRUE(down);
    EXPECT_EQ(s.got.down.value_or(""),
              "agent link: frame of 3221225472 bytes exceeds the 64 MiB limit");
    s.link->close();  // the fake's `cat` sees end-of-file and exits 0
    EXPECT_EQ(s.agent_end(), "");
  }
  fs::remove_all(dir);
}

TEST(LocalAgent, AnAgentThatCannotStartIsAClearError) {
  session_options o;
  o.agent_path = "/nonexistent/pmd";
  agent_session s(o);
  s.connect(job({payload_app({"exit", "0"})}));
  ASSERT_TRUE(s.run_until([&] { return s.open_failed.has_value(); }));
  EXPECT_EQ(*s.open_failed,
            "cannot start the agent: cannot execute '/nonexistent/pmd': No such file or directory");
}

TEST(LocalAgent, AKilledAgentIsALostHostKilledBySigkill) {
  subreaper_scope adopt;  // the rank, orphaned with pmd gone, becomes ours to kill and reap
  agent_session s;
  s.connect(job({payload_app({"sleep", "30"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started_rank>() == 1; }));
  ::kill(s.agent_pid, SIGKILL);  // the one thing pmd cannot survive (docs/agent.md, limits)
  ASSERT_TRUE(s.run_until([&] { return s.got.down.has_value(); }));
  EXPECT_EQ(*s.got.down, "the agent closed the link");
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") was killed by SIGKILL");
}

TEST(LocalAgent, ATerminatedAgentClearsItsRanksAndSaysWhy) {
  agent_session s;
  s.connect(job({payload_app({"grandchild", "30", "sleep", "30"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.pipe(0, 0) >= 0; }));
  const pid_t grandchild = pid_after(read_line_of(s.got.pipe(0, 0), "grandchild"), "grandchild");
  ASSERT_GT(grandchild, 0);
  s.cleanup.pids.insert(grandchild);
  const pid_t rank = static_cast<pid_t>(s.got.all<link::started_rank>()[0].pid);
  ::kill(s.agent_pid, SIGTERM);
  ASSERT_TRUE(s.run_until([&] { return s.got.down.has_value(); }));
  EXPECT_EQ(s.got.count<link::agent_error>(), 0u);  // told to end: not its failure
  const auto notices = s.got.all<link::agent_notice>();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].text, "the agent received SIGTERM; it ends its ranks");
  ASSERT_EQ(s.got.count<link::ended_rank>(), 1u);  // it still reports what it did
  EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::signaled(SIGTERM));
  EXPECT_TRUE(all_gone({rank, grandchild}, 1s));
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
}

// A hello with another job's nonce (a stale or foreign launcher): pmd closes the link and exits
// without running anything.
TEST(LocalAgent, AWrongNonceRunsNothing) {
  const fs::path stamp = fs::temp_directory_path() / ("pm-nonce-" + std::to_string(::getpid()));
  fs::remove(stamp);
  agent_session s;
  ASSERT_TRUE(s.connect_raw()) << s.open_failed.value_or("");
  raw_link r(*s.stream, job_nonce ^ 1);
  r.ep.send(job({payload_app({"stamp", stamp.string()})}));
  r.ep.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(r.flush());
  r.read_until([] { return false; });  // until pmd closes the stream
  EXPECT_TRUE(r.eof);
  // Our side refuses pmd's hello for the same reason.
  EXPECT_EQ(r.down.value_or(""),
            "the agent answered with another job's nonce (a stale or foreign "
            "peer)");
  EXPECT_TRUE(r.messages.empty());
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
  EXPECT_FALSE(fs::exists(stamp));
  fs::remove(stamp);
}

// A launcher that breaks the protocol's order (a spawn before the job's setup) is told why; pmd
// then ends like a pmd that lost its launcher.
TEST(LocalAgent, ASpawnBeforeTheJobIsRefusedWithAnError) {
  agent_session s;
  ASSERT_TRUE(s.connect_raw()) << s.open_failed.value_or("");
  raw_link r(*s.stream, job_nonce);
  r.ep.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(r.flush());
  r.read_until([] { return false; });  // until pmd closes the stream
  EXPECT_TRUE(r.eof);
  ASSERT_EQ(r.count<link::agent_error>(), 1u);
  EXPECT_EQ(all_of<link::agent_error>(r.messages)[0].text, "'spawn' message before 'job'");
  EXPECT_EQ(r.count<link::started_rank>(), 0u);
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
}

// What a login shell prints before the agent starts (over ssh, rc files) is skipped.
TEST(LocalAgent, NoiseBeforeTheAgentIsSkipped) {
  const auto dir = fs::temp_directory_path() / ("pm-noisy-pmd-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream script(dir / "pmd");
    script << "#!/bin/sh\necho 'Welcome to node1'\nprintf 'You have mail.'\nexec '" << pmd_path()
           << "' \"$@\"\n";
  }
  fs::permissions(dir / "pmd", fs::perms::owner_all);
  {
    session_options o;
    o.pipes = true;
    o.agent_path = (dir / "pmd").string();
    agent_session s(o);
    s.connect(job({payload_app({"echo", "hi"})}, true));
    s.send(spawn_of({rank_of(0)}));
    ASSERT_TRUE(s.run_until([&] {
      return s.got.count<link::ended_rank>() == 1 && s.got.count<link::closed_stream>() == 2;
    })) << s.got.down.value_or("");
    EXPECT_EQ((s.got.output[{0, output_stream::out}]), "hi\n");
    EXPECT_EQ(s.shutdown(), "");
  }
  fs::remove_all(dir);
}

// An agent command that dies before its hello (a wrong path on the far side): its last words are
// quoted, and how it ended is known.
TEST(LocalAgent, AnAgentThatDiesBeforeItsHelloIsQuoted) {
  const auto dir = fs::temp_directory_path() / ("pm-dead-pmd-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream script(dir / "pmd");
    script << "#!/bin/sh\necho 'sh: 1: /opt/pm/bin/pmd: not found'\nexit 127\n";
  }
  fs::permissions(dir / "pmd", fs::perms::owner_all);
  {
    session_options o;
    o.pipes = true;
    o.agent_path = (dir / "pmd").string();
    agent_session s(o);
    s.connect(job({payload_app({"exit", "0"})}, true));
    ASSERT_TRUE(s.run_until([&] { return s.got.down.has_value(); }));
    EXPECT_EQ(*s.got.down,
              "the agent closed the link before its hello (it printed: 'sh: 1: /opt/pm/bin/pmd: "
              "not found')");
    EXPECT_EQ(s.agent_end(),
              "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 127");
  }
  fs::remove_all(dir);
}

// An agent that said its last words and exited before the launcher wrote anything: the launcher's
// first write fails (EPIPE), and what the agent wrote is still read before the link is called
// down, so the launcher learns why.
TEST(LocalAgent, LastWordsOfAnAgentThatExitedAreRead) {
  const auto dir = fs::temp_directory_path() / ("pm-last-words-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    link::endpoint_options eo;
    eo.self = link::role::agent;
    eo.nonce = job_nonce;
    link::endpoint agent(eo);
    link::hello h;
    h.pid = 4242;
    agent.start(link::link_time{0}, h);
    agent.send(link::exited{{{0, exit_status::signaled(SIGTERM)}}});
    agent.send(link::agent_error{"the agent received SIGTERM"});
    std::ofstream bytes(dir / "said", std::ios::binary);
    bytes.write(reinterpret_cast<const char*>(agent.output().data()),
                static_cast<std::streamsize>(agent.output().size()));
    std::ofstream script(dir / "pmd");
    script << "#!/bin/sh\ncat '" << (dir / "said").string() << "'\nexit 1\n";
  }
  fs::permissions(dir / "pmd", fs::perms::owner_all);
  {
    session_options o;
    o.pipes = true;
    o.agent_path = (dir / "pmd").string();
    o.attach_after_agent_exit = true;
    agent_session s(o);
    s.connect(job({payload_app({"exit", "0"})}, true));
    ASSERT_TRUE(s.run_until([&] { return s.got.down.has_value(); }));
    ASSERT_TRUE(s.got.agent);
    EXPECT_EQ(s.got.agent->pid, 4242);
    ASSERT_EQ(s.got.count<link::ended_rank>(), 1u);
    EXPECT_EQ(s.got.all<link::ended_rank>()[0].status, exit_status::signaled(SIGTERM));
    ASSERT_EQ(s.got.count<link::agent_error>(), 1u);
    EXPECT_EQ(s.got.all<link::agent_error>()[0].text, "the agent received SIGTERM");
    EXPECT_EQ(*s.got.down, "the agent closed the link");
    EXPECT_EQ(s.agent_end(),
              "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Heartbeats and silence (remote hosts)

// A launcher that falls silent (no heartbeat, no byte) is lost: pmd sends SIGTERM to its ranks,
// SIGKILL after the grace to the one that ignores it, and exits, within silence + grace + margin.
// While it waits it does not spin, also when a rank writes output that nobody will read.
TEST(LocalAgent, ASilentLauncherIsLost) {
  session_options o;
  o.pipes = true;
  agent_session s(o);
  // Rank 1 ignores SIGTERM and writes a line during the grace, when nobody reads it any more.
  auto setup = job({payload_app({"sleep", "30"}),
                    payload_app({"ignore-term", "sleep", "0.5", "echo", "late", "sleep", "30"})},
                   true);
  setup.heartbeat_ms = 100;
  setup.silence_ms = 400;
  setup.grace_ms = 500;
  s.acknowledge_output = false;  // no ack either: the launcher says nothing at all
  s.connect(setup);
  s.send(spawn_of({rank_of(0), rank_of(1)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started_rank>() == 2; }));
  const auto last_word = steady::now();  // the launcher's bytes all went with the spawn
  std::vector<pid_t> ranks;
  for (const auto& st : s.got.all<link::started_rank>())
    ranks.push_back(static_cast<pid_t>(st.pid));
  // pmd's own CPU time when the grace begins, and the last seen before it exits.
  std::optional<std::chrono::milliseconds> cpu_at_silence;
  std::chrono::milliseconds cpu_last{0};
  ASSERT_TRUE(s.run_until(
      [&] {
        if (const auto cpu = cpu_time(s.agent_pid)) {
          cpu_last = *cpu;
          if (!cpu_at_silence && steady::now() - last_word >= 450ms) cpu_at_silence = *cpu;
        }
        return s.got.down.has_value();
      },
      3s));
  const auto took = steady::now() - last_word;
  EXPECT_EQ(*s.got.down, "the agent closed the link");
  EXPECT_EQ(s.agent_end(),
            "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
  EXPECT_TRUE(all_gone(ranks, 100ms));
  // Silence (400 ms), then the grace (500 ms) for the rank that ignores SIGTERM.
  EXPECT_GE(took, 850ms);
  EXPECT_LE(took, 400ms + 500ms + 1000ms);
  EXPECT_EQ(s.got.count<link::ended_rank>(), 0u);  // nothing is said to a launcher that is gone
  ASSERT_TRUE(cpu_at_silence);
  EXPECT_LT((cpu_last - *cpu_at_silence).count(), 100)
      << "pmd spent the grace spinning on the late line";
}

// Heartbeats both ways keep a quiet link up well past the silence timeout.
TEST(LocalAgent, HeartbeatsKeepAQuietLinkUp) {
  session_options o;
  o.heartbeat = 100ms;
  o.silence = 400ms;
  agent_session s(o);
  auto setup = job({payload_app({"sleep", "30"})});
  setup.heartbeat_ms = 100;
  setup.silence_ms = 400;
  s.connect(setup);
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started_rank>() == 1; }));
  s.run_for(1200ms);  // three silence timeouts
  EXPECT_FALSE(s.got.down) << *s.got.down;
  EXPECT_EQ(s.got.count<link::ended_rank>(), 0u);
  EXPECT_TRUE(alive(static_cast<pid_t>(s.got.all<link::started_rank>()[0].pid)));
  EXPECT_EQ(s.shutdown(), "");
}

}  // namespace
}  // namespace pm
