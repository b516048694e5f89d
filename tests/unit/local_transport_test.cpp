// The local transport with a real pmd and real processes: output descriptors, exit statuses,
// signals, stdin, and the no-orphan guarantee (also for setsid grandchildren and when the
// launcher is SIGKILLed). Every process a test starts is ended by pid, also on failure.
#include "transport/local/local_transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "pm/error.hpp"
#include "transport/channel/messages.hpp"

extern char** environ;

namespace pm::local {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Tests land in build/tests/, pmd in build/bin/, the payload next to the tests.
fs::path exe_dir() {
  return fs::read_symlink("/proc/self/exe").parent_path();
}
std::string pmd_path() {
  return (exe_dir().parent_path() / "bin" / "pmd").string();
}
std::string payload() {
  return (exe_dir() / "pm_payload").string();
}

// Alive = exists and is not a zombie.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  return text[paren + 2] != 'Z';
}

bool gone_within(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any = any || alive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
}

// Ends what a test recorded, whatever happened (the guarantee under test may have failed), and
// reaps those that became children of the test (see subreaper_scope).
struct reaper {
  std::set<pid_t> pids;
  ~reaper() {
    for (pid_t p : pids) {
      if (p > 0 && alive(p)) ::kill(p, SIGKILL);
      if (p > 0) ::waitpid(p, nullptr, 0);  // ECHILD at once unless it is ours
    }
  }
};

// While it lives, orphans whose launcher or agent died reparent to the test process (not to an
// init that may not reap), so the test can reap them and leaves no zombie behind.
struct subreaper_scope {
  subreaper_scope() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~subreaper_scope() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
};

rank_launch launch(std::uint32_t rank, std::vector<std::string> args) {
  rank_launch r;
  r.rank = rank;
  r.path = payload();
  r.argv = {"pm_payload"};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  r.env = {"OMPI_COMM_WORLD_RANK=" + std::to_string(rank), "PATH=/usr/bin:/bin"};
  return r;
}

// Reads a descriptor until `until` appears or end of file; bounded by a deadline.
std::string read_fd(int fd, const std::string& until = {}, std::chrono::milliseconds limit = 10s) {
  std::string text;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (!until.empty() && text.find(until) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// A transport on its own io_context that records what it reports.
struct fixture {
  boost::asio::io_context io;
  std::vector<event> events;
  std::map<std::pair<std::uint32_t, stream_kind>, int> fds;
  reaper cleanup;
  std::unique_ptr<local_transport> t;

  explicit fixture(local_transport_options o = {}) {
    if (o.agent_path.empty()) o.agent_path = pmd_path();
    transport_callbacks cb;
    cb.on_event = [this](event e) {
      if (const auto* s = std::get_if<rank_started>(&e))
        cleanup.pids.insert(static_cast<pid_t>(s->pid));
      events.push_back(std::move(e));
    };
    cb.on_output_fd = [this](std::uint32_t rank, stream_kind k, int fd) { fds[{rank, k}] = fd; };
    t = std::make_unique<local_transport>(io, std::move(cb), o);
    cleanup.pids.insert(static_cast<pid_t>(t->agent_pid()));
  }
  ~fixture() {
    t.reset();
    for (auto& [k, fd] : fds) ::close(fd);
  }

  template <class T>
  std::vector<T> all() const {
    std::vector<T> r;
    for (const auto& e : events) {
      if (const T* x = std::get_if<T>(&e)) r.push_back(*x);
    }
    return r;
  }
  // Runs the loop until `pred` holds (true) or 10 s pass (false).
  template <class P>
  bool run_until(P pred, std::chrono::milliseconds limit = 10s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      io.run_for(10ms);
      io.restart();
    }
    return true;
  }
  bool shutdown() {
    bool done = false;
    t->shutdown([&] { done = true; });
    return run_until([&] { return done; });
  }
  int fd(std::uint32_t rank, stream_kind k) {
    const auto it = fds.find({rank, k});
    return it == fds.end() ? -1 : it->second;
  }
};

TEST(local_transport, finds_pmd_next_to_the_build) {
  ::unsetenv("PM_AGENT");
  EXPECT_EQ(fs::canonical(default_agent_path()), fs::canonical(pmd_path()));
  ::setenv("PM_AGENT", "/nonexistent/pmd", 1);
  try {
    default_agent_path();
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(e.what(), "PM_AGENT names '/nonexistent/pmd', which is not an executable file");
  }
  ::unsetenv("PM_AGENT");
}

TEST(local_transport, runs_ranks_and_hands_over_their_output) {
  fixture f;
  f.t->spawn(
      0, {launch(0, {"echo", "hello", "echo-err", "oops", "exit", "3"}), launch(1, {"kill", "9"})},
      -1);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_exited>().size() == 2; }));
  ASSERT_EQ(f.all<rank_started>().size(), 2u);
  EXPECT_GT(f.all<rank_started>()[0].pid, 0);
  for (const auto& x : f.all<rank_exited>()) {
    EXPECT_EQ(x.status, x.rank == 0 ? exit_status::exited(3) : exit_status::signaled(9));
  }
  EXPECT_EQ(read_fd(f.fd(0, stream_kind::out)), "hello\n");
  EXPECT_EQ(read_fd(f.fd(0, stream_kind::err)), "oops\n");
  EXPECT_EQ(read_fd(f.fd(1, stream_kind::out)), "");
  const pid_t agent = static_cast<pid_t>(f.t->agent_pid());
  ASSERT_TRUE(f.shutdown());
  EXPECT_FALSE(alive(agent));
  EXPECT_TRUE(f.all<host_lost>().empty());
  // pmd was reaped by the transport (through its pidfd): not even a zombie is left.
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(agent)));
}

TEST(local_transport, merged_output_and_stdin_from_the_launcher) {
  fixture f;
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  auto r = launch(0, {"cat", "echo-err", "done"});
  r.streams = 1;
  r.stdin_from_launcher = true;
  f.t->spawn(0, {r}, in[0]);
  ::close(in[0]);
  ASSERT_EQ(::write(in[1], "abc\n", 4), 4);
  ::close(in[1]);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_exited>().size() == 1; }));
  EXPECT_EQ(f.fd(0, stream_kind::err), -1);
  EXPECT_EQ(read_fd(f.fd(0, stream_kind::out)), "abc\ndone\n");
  EXPECT_EQ(f.all<rank_exited>()[0].status, exit_status::exited(0));
  ASSERT_TRUE(f.shutdown());
}

TEST(local_transport, spawn_failure_is_an_event) {
  fixture f;
  auto r = launch(0, {});
  r.path = "/nonexistent/app";
  f.t->spawn(0, {r}, -1);
  ASSERT_TRUE(f.run_until([&] { return !f.all<rank_spawn_failed>().empty(); }));
  EXPECT_EQ(f.all<rank_spawn_failed>()[0].code, 127);
  EXPECT_NE(f.all<rank_spawn_failed>()[0].reason.find("/nonexistent/app"), std::string::npos)
      << f.all<rank_spawn_failed>()[0].reason;
  ASSERT_TRUE(f.shutdown());
}

TEST(local_transport, signals_reach_the_rank_group) {
  fixture f;
  f.t->spawn(0, {launch(0, {"grandchild", "30", "sleep", "30"})}, -1);
  ASSERT_TRUE(f.run_until([&] { return f.fd(0, stream_kind::out) >= 0; }));
  const std::string line = read_fd(f.fd(0, stream_kind::out), "\n");
  const pid_t grandchild = std::atoi(line.c_str() + std::strlen("grandchild "));
  ASSERT_GT(grandchild, 0) << line;
  f.cleanup.pids.insert(grandchild);
  f.t->signal(0, {0}, SIGTERM);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_exited>().size() == 1; }));
  EXPECT_EQ(f.all<rank_exited>()[0].status, exit_status::signaled(SIGTERM));
  EXPECT_TRUE(gone_within({grandchild}, 2s));  // same process group
  ASSERT_TRUE(f.shutdown());
}

TEST(local_transport, shutdown_clears_descendants_that_escaped_with_setsid) {
  fixture f;
  // The rank leaves a setsid daemon and a plain grandchild behind and exits by itself.
  f.t->spawn(0, {launch(0, {"daemon", "60", "grandchild", "60", "exit", "0"})}, -1);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_exited>().size() == 1; }));
  const std::string out = read_fd(f.fd(0, stream_kind::out), "grandchild ");
  const std::string text = out + read_fd(f.fd(0, stream_kind::out), "\n", 1s);
  const pid_t daemon = std::atoi(text.c_str() + text.find("daemon ") + 7);
  const pid_t grandchild = std::atoi(text.c_str() + text.find("grandchild ") + 11);
  ASSERT_GT(daemon, 0) << text;
  ASSERT_GT(grandchild, 0) << text;
  f.cleanup.pids.insert(daemon);
  f.cleanup.pids.insert(grandchild);
  EXPECT_TRUE(alive(daemon));
  EXPECT_TRUE(alive(grandchild));
  ASSERT_TRUE(f.shutdown());
  // shutdown's done means pmd swept everything and exited: no wait needed, not even zombies.
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(daemon)));
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(grandchild)));
}

// The launcher (a forked child running a transport) is SIGKILLed: pmd notices the closed channel
// and kills every rank and descendant, the SIGTERM-ignoring ones after its grace, then exits.
TEST(local_transport, launcher_sigkill_leaves_nothing_behind) {
  subreaper_scope adopt;  // pmd, orphaned by the launcher's death, becomes our child
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(report[0]);
    fixture f(local_transport_options{pmd_path(), 300ms});
    f.t->spawn(0,
               {launch(0, {"daemon", "60", "grandchild", "60", "ignore-term", "sleep", "60"}),
                launch(1, {"sleep", "60"})},
               -1);
    f.run_until([&] { return f.all<rank_started>().size() == 2 && f.fds.size() == 4; });
    std::string pids = std::to_string(f.t->agent_pid());
    for (const auto& s : f.all<rank_started>()) pids += " " + std::to_string(s.pid);
    const std::string text = read_fd(f.fds[{0, stream_kind::out}], "grandchild ");
    pids += " " + std::to_string(std::atoi(text.c_str() + text.find("daemon ") + 7));
    pids += " " + std::to_string(std::atoi(text.c_str() + text.find("grandchild ") + 11));
    pids += "\n";
    if (::write(report[1], pids.data(), pids.size()) < 0) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(report[1]);
  reaper cleanup;
  const std::string text = read_fd(report[0], "\n", 15s);
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
  for (pid_t p : pids) EXPECT_GT(p, 0) << text;
  // pmd, both ranks (one ignores SIGTERM: killed after the 300 ms grace), the setsid daemon and
  // the grandchild.
  EXPECT_TRUE(gone_within(pids, 5s)) << text;
  // pmd exited by itself, with the code for "launcher lost".
  ::waitpid(pids[0], &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
}

// The agent side: pmd given garbage answers with a clear error frame and exits, clearing all.
TEST(local_transport, pmd_answers_garbage_with_a_clear_error) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  const std::string path = pmd_path();
  char* argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>("--local"),
                  const_cast<char*>("0"), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  reaper cleanup;
  cleanup.pids.insert(pid);
  ::close(sv[1]);
  const std::uint8_t garbage[] = {0xc0, 0, 0, 0, 1, 2, 3};
  ASSERT_EQ(::write(sv[0], garbage, sizeof garbage), static_cast<ssize_t>(sizeof garbage));
  const std::string reply = read_fd(sv[0], {}, 10s);  // until pmd closes the channel
  channel::message_decoder d;
  d.feed({reinterpret_cast<const std::uint8_t*>(reply.data()), reply.size()});
  const auto e = d.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->msg, channel::message(channel::agent_error{
                        "agent channel: frame of 3221225472 bytes exceeds the 64 MiB limit"}));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  ::close(sv[0]);
}

// The launcher side: an "agent" that writes garbage is a lost host with a clear reason.
TEST(local_transport, garbage_from_the_agent_is_a_lost_host) {
  const fs::path script = fs::temp_directory_path() / ("pm-fake-pmd-" + std::to_string(::getpid()));
  {
    std::ofstream s(script);
    s << "#!/bin/sh\nprintf '\\300\\000\\000\\000' >&0\nexec sleep 5\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  {
    fixture f(local_transport_options{script.string(), 1000ms});
    ASSERT_TRUE(f.run_until([&] { return !f.all<host_lost>().empty(); }));
    EXPECT_EQ(f.all<host_lost>()[0].host, 0u);
    EXPECT_EQ(f.all<host_lost>()[0].reason,
              "agent channel: frame of 3221225472 bytes exceeds the 64 MiB limit");
    ::kill(static_cast<pid_t>(f.t->agent_pid()), SIGKILL);  // the fake ignores the closed channel
  }
  fs::remove(script);
}

TEST(local_transport, an_agent_that_cannot_start_is_a_clear_error) {
  boost::asio::io_context io;
  try {
    local_transport t(io, {}, local_transport_options{"/nonexistent/pmd", 1000ms});
    ADD_FAILURE() << "no error";
  } catch (const pm::error& e) {
    EXPECT_STREQ(
        e.what(),
        "cannot start the agent: cannot execute '/nonexistent/pmd': No such file or directory")
        << e.what();
  }
}

TEST(local_transport, a_killed_agent_is_a_lost_host) {
  subreaper_scope adopt;  // the rank, orphaned with pmd gone, becomes ours to kill and reap
  fixture f;
  f.t->spawn(0, {launch(0, {"sleep", "30"})}, -1);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_started>().size() == 1; }));
  const pid_t agent = static_cast<pid_t>(f.t->agent_pid());
  ::kill(agent, SIGKILL);  // the one thing pmd cannot survive (docs/agent.md, limits)
  ASSERT_TRUE(f.run_until([&] { return !f.all<host_lost>().empty(); }));
  EXPECT_EQ(f.all<host_lost>()[0].reason, "agent channel closed: the agent pmd (pid " +
                                              std::to_string(agent) + ") was killed by SIGKILL");
  ASSERT_TRUE(f.shutdown());  // done at once: pmd is gone
}

TEST(local_transport, a_terminated_agent_clears_its_ranks_and_says_why) {
  fixture f;
  f.t->spawn(0, {launch(0, {"sleep", "30"})}, -1);
  ASSERT_TRUE(f.run_until([&] { return f.all<rank_started>().size() == 1; }));
  const pid_t rank = static_cast<pid_t>(f.all<rank_started>()[0].pid);
  ::kill(static_cast<pid_t>(f.t->agent_pid()), SIGTERM);
  ASSERT_TRUE(f.run_until([&] { return !f.all<host_lost>().empty(); }));
  EXPECT_EQ(f.all<host_lost>()[0].reason, "agent: the agent received SIGTERM");
  EXPECT_TRUE(gone_within({rank}, 3s));
  ASSERT_TRUE(f.shutdown());
}

}  // namespace
}  // namespace pm::local
