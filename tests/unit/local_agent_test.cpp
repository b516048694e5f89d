// A real pmd over the agent link (protocol 3), with real ranks (tests/payload/pm_payload).
//
// pmd is started by the local transport (a Unix socket pair: output pipes come back as
// descriptors) or by the test over two pipes, as ssh gives it (output comes as data frames). The
// launcher's end is the real one, driver::host_link; where a test must say what no launcher says
// (garbage, another job's nonce) it drives a bare link::endpoint over the stream itself.
//
// Every process a test starts is ended by pid and reaped, also when the test fails: pmd by the
// transport or through its pidfd, ranks and their descendants by the reaper.
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

#include "support/host_link.hpp"
#include "link/endpoint.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"
#include "support/processes.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "transport/local/local_transport.hpp"

extern char** environ;

namespace pm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using link::owned_fd;
using steady = std::chrono::steady_clock;

std::string pmd_path() {
  return std::string(PM_BINARY_DIR) + "/bin/pmd";
}
std::string payload_dir() {
  return std::string(PM_BINARY_DIR) + "/tests";
}
std::string payload() {
  return payload_dir() + "/pm_payload";
}

constexpr std::uint64_t job_nonce = 0x5eed1234abcd0042;

std::string hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

using pm::test::alive;
using pm::test::all_gone;

// Ends what a test recorded, whatever happened (the guarantee under test may have failed), and
// reaps those that became children of the test (see subreaper_scope).
struct reaper {
  std::set<pid_t> pids;
  ~reaper() {
    for (pid_t p : pids) {
      if (p > 0 && alive(p)) ::kill(p, SIGKILL);
      if (p > 0) ::waitpid(p, nullptr, WNOHANG);
    }
    for (pid_t p : pids) {
      if (p > 0) ::waitpid(p, nullptr, 0);  // ECHILD at once unless it is ours
    }
  }
};

// While it lives, orphans whose launcher or agent died reparent to the test process (not to an
// init that may not reap), so the test can reap them and leaves no zombie behind.
struct subreaper_scope {
  subreaper_scope() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~subreaper_scope() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  subreaper_scope(const subreaper_scope&) = delete;
  subreaper_scope& operator=(const subreaper_scope&) = delete;
};

// Reads a descriptor until `until` appears or end of file; bounded by a deadline.
std::string read_fd(int fd, const std::string& until = {}, std::chrono::milliseconds limit = 4s) {
  std::string text;
  const auto end = steady::now() + limit;
  while (steady::now() < end) {
    if (!until.empty() && text.find(until) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// Reads a descriptor until a whole line starting with `word ` arrived (bounded). A rank's
// descendants hold its output pipe too, so its end of file may be far off.
std::string read_line_of(int fd, const std::string& word) {
  std::string text;
  const auto end = steady::now() + 4s;
  while (steady::now() < end) {
    const auto at = text.find(word + " ");
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// The number after `word ` in text ("daemon 1234" -> 1234), or 0.
pid_t pid_after(const std::string& text, const std::string& word) {
  const auto at = text.find(word + " ");
  return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + word.size() + 1);
}

// The CPU time a live process has used itself (utime + stime), or nothing once it is gone.
std::optional<std::chrono::milliseconds> cpu_time(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  long long ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 3 && field == "Z") return std::nullopt;
    if (i >= 14) ticks += std::atoll(field.c_str());
  }
  return std::chrono::milliseconds(ticks * 1000 / ::sysconf(_SC_CLK_TCK));
}

// What pm_payload's "flood BYTES CHUNK" writes as rank `rank`.
std::string flood_text(std::uint32_t rank, std::size_t bytes) {
  std::string s;
  s.reserve(bytes + 100);
  char line[100];
  for (long long n = 0; s.size() < bytes; ++n) {
    std::memset(line, 'x', sizeof line);
    const int head = std::snprintf(line, sizeof line, "r%u l%lld ", rank, n);
    line[head] = 'x';  // over snprintf's NUL
    line[99] = '\n';
    s.append(line, sizeof line);
  }
  s.resize(bytes);
  return s;
}

// ---- the job's messages ----

link::app_spec payload_app(std::vector<std::string> steps, std::vector<std::string> env = {}) {
  link::app_spec a;
  a.argv = {payload()};
  a.argv.insert(a.argv.end(), steps.begin(), steps.end());
  a.env = std::move(env);
  return a;
}

link::job_setup job(std::vector<link::app_spec> apps, bool forward_output = false) {
  link::job_setup s;
  s.grace_ms = 300;  // short, so that a failing test's clean-up is quick too
  s.forward_output = forward_output;
  s.apps = std::move(apps);
  return s;
}

// Rank `rank` of app `app` (by default the app of the same index).
link::rank_spec rank_of(std::uint32_t rank, std::optional<std::uint32_t> app = {}) {
  link::rank_spec r;
  r.rank = rank;
  r.app = app.value_or(rank);
  r.env = {"OMPI_COMM_WORLD_RANK=" + std::to_string(rank)};
  return r;
}

link::spawn_request spawn_of(std::vector<link::rank_spec> ranks) {
  return link::spawn_request{std::move(ranks)};
}

template <class T>
std::vector<T> all_of(const std::vector<link::message>& messages) {
  std::vector<T> r;
  for (const auto& m : messages) {
    if (const T* x = std::get_if<T>(&m)) r.push_back(*x);
  }
  return r;
}

// ---- a pmd and the launcher's end of its link ----

struct session_options {
  /// pmd over two pipes (what ssh gives) instead of the local transport's socket pair.
  bool pipes = false;
  /// pmd's environment (empty: this process's).
  std::vector<std::string> environment;
  std::chrono::milliseconds heartbeat{0};  ///< the launcher's heartbeats
  std::chrono::milliseconds silence{0};    ///< the launcher's silence timeout
  std::string agent_path = pmd_path();
  /// Pipes: let the agent run to its end before the launcher's end writes its first byte.
  bool attach_after_agent_exit = false;
};

// What the launcher's end of a link saw, in order.
struct seen {
  std::optional<link::hello> agent;
  std::vector<link::message> messages;
  std::map<std::uint32_t, std::vector<owned_fd>> pipes;  // each started rank's output read ends
  std::map<std::pair<std::uint32_t, output_stream>, std::string> output;  // forwarded output
  // For each stream_closed: how much output of that stream had arrived by then.
  std::map<std::pair<std::uint32_t, output_stream>, std::size_t> output_at_close;
  std::size_t output_after_close = 0;  // output frames of a stream after its stream_closed
  std::optional<std::string> down;

  template <class T>
  std::vector<T> all() const {
    return all_of<T>(messages);
  }
  template <class T>
  std::size_t count() const {
    return all<T>().size();
  }
  int pipe(std::uint32_t rank, std::size_t i) const {
    const auto it = pipes.find(rank);
    return it == pipes.end() || it->second.size() <= i ? -1 : it->second[i].get();
  }
  std::uint64_t output_bytes() const {
    std::uint64_t n = 0;
    for (const auto& [key, text] : output) n += text.size();
    return n;
  }
};

// One host's pmd, started by the local transport or over pipes, and the launcher's end of its
// link: a host_link (connect) or the bare stream for the test to drive (connect_raw).
class agent_session {
 public:
  reaper cleanup;  // first member: runs last, after pmd is gone
  boost::asio::io_context io;
  session_options opts;
  std::unique_ptr<local::local_transport> transport;
  std::shared_ptr<driver::host_link> link;
  seen got;
  pid_t agent_pid = 0;
  owned_fd agent_pidfd;  // pipes: pmd is the test's child
  std::optional<agent_stream> stream;
  std::optional<std::string> open_failed;
  bool acknowledge_output = true;  // false: hold the credit back (flow control tests)
  std::uint64_t held = 0;          // output received and not acknowledged

  explicit agent_session(session_options o = {}) : opts(std::move(o)) {
    if (!opts.pipes) {
      local::local_transport_options to;
      to.kill_after = 3s;
      transport = std::make_unique<local::local_transport>(io, to);
    }
  }

  ~agent_session() {
    if (link) link->close();  // pmd sees end-of-file and clears its ranks
    if (stream) {
      ::close(stream->read_fd);
      if (stream->write_fd != stream->read_fd) ::close(stream->write_fd);
    }
    transport.reset();  // waits for pmd briefly, then kills and reaps it
    if (agent_pidfd) {
      sys::stop_and_reap(agent_pidfd.get(), {.first_signal = 0, .grace = 2s});
    }
    io.restart();
    io.poll();  // the cancelled waits of closed descriptors let go of their objects
    link.reset();
  }
  agent_session(const agent_session&) = delete;
  agent_session& operator=(const agent_session&) = delete;

  // Starts pmd and a host_link to it; `setup` is queued right behind the hello.
  void connect(const link::job_setup& setup) {
    link::endpoint_options eo;
    eo.self = link::role::launcher;
    eo.nonce = job_nonce;
    eo.heartbeat_interval = opts.heartbeat;
    eo.silence_timeout = opts.silence;
    driver::host_link_callbacks cb;
    cb.on_greeted = [this](const link::hello& h) { got.agent = h; };
    cb.on_message = [this](link::message& m, std::vector<owned_fd> fds) {
      if (const auto* s = std::get_if<link::started>(&m)) {
        cleanup.pids.insert(static_cast<pid_t>(s->pid));
        got.pipes[s->rank] = std::move(fds);
      }
      if (const auto* c = std::get_if<link::stream_closed>(&m)) {
        const auto key = std::make_pair(c->rank, c->stream);
        got.output_at_close[key] = got.output[key].size();
      }
      got.messages.push_back(std::move(m));
    };
    cb.on_output = [this](std::uint32_t rank, output_stream s,
                          std::span<const std::uint8_t> bytes) {
      const auto key = std::make_pair(rank, s);
      if (got.output_at_close.contains(key)) ++got.output_after_close;
      got.output[key].append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      if (acknowledge_output) {
        link->acknowledge(bytes.size());
      } else {
        held += bytes.size();
      }
    };
    cb.on_down = [this](std::string reason) { got.down = std::move(reason); };
    link = driver::host_link::create(io, eo, std::move(cb), steady::now());
    link->send(setup);
    start_agent([this](agent_stream s) { link->attach(s); });
  }

  // Starts pmd and hands the launcher's ends of the stream to the test (stream).
  bool connect_raw() {
    start_agent([this](agent_stream s) { stream = s; });
    return run_until([&] { return stream.has_value() || open_failed.has_value(); }) && stream;
  }

  void send(const link::message& m, std::vector<owned_fd> fds = {}) {
    link->send(m, std::move(fds));
  }

  // Gives back the credit held so far and acknowledges what comes from now on.
  void release_output() {
    acknowledge_output = true;
    link->acknowledge(held);
    held = 0;
  }

  // Runs the loop until `pred` holds (true) or `limit` passes (false).
  template <class P>
  bool run_until(P pred, std::chrono::milliseconds limit = 4s) {
    const auto end = steady::now() + limit;
    while (!pred()) {
      if (steady::now() > end) return false;
      io.run_for(5ms);
      io.restart();
    }
    return true;
  }
  // Runs the loop for `d`.
  void run_for(std::chrono::milliseconds d) {
    run_until([] { return false; }, d);
  }

  // How pmd ended, once it has (the link is not touched): "" for exit code 0, else e.g.
  // "the agent pmd (pid 12) exited with code 1"; "still running" if it did not within `limit`.
  std::string agent_end(std::chrono::milliseconds limit = 3s) {
    if (transport) {
      std::optional<std::string> how;
      transport->close(0, [&](pm::agent_end e) { how = e.how; });
      if (!run_until([&] { return how.has_value(); }, limit)) return "still running";
      return *how;
    }
    if (!sys::wait_ended(agent_pidfd.get(), limit)) return "still running";
    const auto end = sys::wait_exit(agent_pidfd.get());
    agent_pidfd.reset();
    if (end.status && end.status->success()) return {};
    return "the agent pmd (pid " + std::to_string(agent_pid) + ") " + sys::describe(end);
  }

  // The job is over: shutdown, then shutdown_done, the link's end and pmd's exit. Returns how
  // pmd ended ("" when it exited 0).
  std::string shutdown() {
    link->send(link::shutdown_request{});
    if (!run_until([&] { return got.count<link::shutdown_done>() == 1 && got.down; })) {
      return "after shutdown: " + std::to_string(got.count<link::shutdown_done>()) +
             " shutdown_done, link " + got.down.value_or("up") +
             ", pmd: " + (alive(agent_pid) ? std::string("running") : agent_end());
    }
    return agent_end();
  }

 private:
  void start_agent(std::function<void(agent_stream)> opened) {
    std::vector<std::string> argv = {opts.agent_path, "--stdio", "--nonce", hex(job_nonce)};
    if (transport) {
      agent_target t;
      t.host = 0;
      t.info.name = "localhost";
      t.info.local = true;
      t.agent_argv = argv;
      t.environment = opts.environment;
      transport->open(
          t,
          [this, opened](agent_stream s) {
            agent_pid = static_cast<pid_t>(s.pid);
            cleanup.pids.insert(agent_pid);
            opened(s);
          },
          [this](std::string reason) { open_failed = std::move(reason); });
      return;
    }
    // Over two pipes, as ssh's stdin and stdout: no descriptor can travel.
    int to_agent[2], from_agent[2];
    ASSERT_EQ(::pipe2(to_agent, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(from_agent, O_CLOEXEC), 0);
    sys::spawn_request req;
    req.path = opts.agent_path;
    req.argv = argv;
    req.env = opts.environment;
    if (req.env.empty()) {
      for (char** e = environ; *e != nullptr; ++e) req.env.emplace_back(*e);
    }
    req.stdin_fd = to_agent[0];
    req.stdout_fd = from_agent[1];
    req.stderr_fd = STDERR_FILENO;
    const auto res = sys::spawn(req);
    ::close(to_agent[0]);
    ::close(from_agent[1]);
    agent_pid = res.pid;
    agent_pidfd.reset(res.pidfd);
    if (opts.attach_after_agent_exit) {
      sys::wait_ended(agent_pidfd.get(), 2s);
    }
    opened(agent_stream{from_agent[0], to_agent[1], false, res.pid});
  }
};

// A bare launcher endpoint on a stream, driven with poll(): for what no launcher would send.
struct raw_link {
  link::endpoint ep;
  link::stream_fds fds;
  link::stream_reader reader;
  link::stream_writer writer;
  steady::time_point epoch = steady::now();
  std::vector<link::message> messages;
  std::map<std::uint32_t, std::vector<owned_fd>> pipes;
  std::optional<std::string> down;
  bool eof = false;  // the stream itself ended (read returned 0 or failed)

  raw_link(const agent_stream& s, std::uint64_t nonce) : ep(options(nonce)) {
    fds = link::stream_fds{s.read_fd, s.write_fd, s.socket};
    ep.start(now(), link::hello{});
  }
  static link::endpoint_options options(std::uint64_t nonce) {
    link::endpoint_options o;
    o.self = link::role::launcher;
    o.nonce = nonce;
    return o;
  }
  link::link_time now() const { return steady::now() - epoch; }

  // Writes everything queued (blocking, bounded).
  bool flush(std::chrono::milliseconds limit = 2s) {
    const auto end = steady::now() + limit;
    while (!ep.output().empty()) {
      std::string error;
      if (!writer.flush(fds, ep, error)) return false;
      if (ep.output().empty()) break;
      if (steady::now() > end) return false;
      pollfd p{fds.write_fd, POLLOUT, 0};
      ::poll(&p, 1, 20);
    }
    return true;
  }
  // Bytes that are not a link at all, straight onto the stream.
  bool write_raw(std::span<const std::uint8_t> bytes) {
    return ::write(fds.write_fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  }
  // Reads until `pred` holds or the stream ends (even after the endpoint went down, to see the
  // peer close the stream); bounded.
  template <class P>
  bool read_until(P pred, std::chrono::milliseconds limit = 4s) {
    const auto end = steady::now() + limit;
    while (!pred()) {
      if (eof || steady::now() > end) return false;
      pollfd p{fds.read_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      std::vector<link::link_event> events;
      const auto st = reader.read_once(fds, now(), ep, events);
      if (st == link::stream_reader::status::closed) eof = true;
      for (auto& e : events) {
        if (auto* m = std::get_if<link::message_in>(&e)) {
          auto taken = reader.take_fds(m->fds, link::type_name(m->msg));
          if (const auto* s = std::get_if<link::started>(&m->msg)) {
            pipes[s->rank] = std::move(taken);
          }
          messages.push_back(std::move(m->msg));
        } else if (auto* d = std::get_if<link::link_down>(&e)) {
          down = d->reason;
        }
      }
    }
    return true;
  }
  template <class T>
  std::size_t count() const {
    return all_of<T>(messages).size();
  }
};

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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::exited>() == 2; }));
  ASSERT_TRUE(s.got.agent);
  EXPECT_EQ(s.got.agent->pid, s.agent_pid);
  ASSERT_EQ(s.got.count<link::started>(), 2u);
  for (const auto& st : s.got.all<link::started>()) EXPECT_GT(st.pid, 0);
  for (const auto& x : s.got.all<link::exited>()) {
    EXPECT_EQ(x.status, x.rank == 0 ? exit_status::exited(3) : exit_status::signaled(9))
        << "rank " << x.rank;
  }
  // Output never crosses the local link: each rank's pipes came with its `started`.
  EXPECT_TRUE(s.got.output.empty());
  EXPECT_EQ(s.got.count<link::stream_closed>(), 0u);
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::exited>() == 1; }));
  ASSERT_EQ(s.got.pipes[0].size(), 1u);  // one pipe for both streams
  EXPECT_EQ(read_fd(s.got.pipe(0, 0)), "abc\ndone\n");
  EXPECT_EQ(s.got.all<link::exited>()[0].status, exit_status::exited(0));
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
  ASSERT_TRUE(s.run_until(
      [&] { return s.got.count<link::spawn_failed>() == 2 && s.got.count<link::exited>() == 1; }));
  fs::remove(plain);
  std::map<std::uint32_t, link::spawn_failed> failed;
  for (const auto& f : s.got.all<link::spawn_failed>()) failed[f.rank] = f;
  EXPECT_EQ(failed[0].code, 127);
  EXPECT_EQ(failed[0].reason, "'/nonexistent/app' does not exist");
  EXPECT_EQ(failed[1].code, 126);
  EXPECT_NE(failed[1].reason.find(plain.string()), std::string::npos) << failed[1].reason;
  EXPECT_NE(failed[1].reason.find("not executable"), std::string::npos) << failed[1].reason;
  // The others run.
  EXPECT_EQ(s.got.all<link::exited>()[0].rank, 2u);
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
  ASSERT_TRUE(s.run_until(
      [&] { return s.got.count<link::exited>() == 2 && s.got.count<link::spawn_failed>() == 2; }));
  for (const auto& x : s.got.all<link::exited>()) {
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::exited>() == 1; }));
  EXPECT_EQ(s.got.all<link::exited>()[0].status, exit_status::signaled(SIGTERM));
  EXPECT_TRUE(all_gone({grandchild}, 2s));  // same process group
  EXPECT_EQ(s.shutdown(), "");
}

TEST(LocalAgent, ShutdownClearsDescendantsThatEscapedWithSetsid) {
  agent_session s;
  // The rank leaves a setsid daemon and a plain grandchild behind and exits by itself.
  s.connect(job({payload_app({"daemon", "60", "grandchild", "60", "exit", "0"})}));
  s.send(spawn_of({rank_of(0)}));
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::exited>() == 1; }));
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
    s.run_until([&] { return s.got.count<link::started>() == 2 && s.got.pipes.size() == 2; });
    std::string pids = std::to_string(s.agent_pid);
    for (const auto& st : s.got.all<link::started>()) pids += " " + std::to_string(st.pid);
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started>() == 1; }));
  const pid_t rank = static_cast<pid_t>(s.got.all<link::started>()[0].pid);
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
  ASSERT_TRUE(r.read_until([&] { return r.count<link::started>() == 1; }));
  const pid_t rank = static_cast<pid_t>(all_of<link::started>(r.messages)[0].pid);
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started>() == 1; }));
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
  const pid_t rank = static_cast<pid_t>(s.got.all<link::started>()[0].pid);
  ::kill(s.agent_pid, SIGTERM);
  ASSERT_TRUE(s.run_until([&] { return s.got.down.has_value(); }));
  const auto errors = s.got.all<link::agent_error>();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].text, "the agent received SIGTERM");
  ASSERT_EQ(s.got.count<link::exited>(), 1u);  // it still reports what it did
  EXPECT_EQ(s.got.all<link::exited>()[0].status, exit_status::signaled(SIGTERM));
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
  EXPECT_EQ(r.count<link::started>(), 0u);
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
      return s.got.count<link::exited>() == 1 && s.got.count<link::stream_closed>() == 2;
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
    agent.send(link::exited{0, exit_status::signaled(SIGTERM)});
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
    ASSERT_EQ(s.got.count<link::exited>(), 1u);
    EXPECT_EQ(s.got.all<link::exited>()[0].status, exit_status::signaled(SIGTERM));
    ASSERT_EQ(s.got.count<link::agent_error>(), 1u);
    EXPECT_EQ(s.got.all<link::agent_error>()[0].text, "the agent received SIGTERM");
    EXPECT_EQ(*s.got.down, "the agent closed the link");
    EXPECT_EQ(s.agent_end(),
              "the agent pmd (pid " + std::to_string(s.agent_pid) + ") exited with code 1");
  }
  fs::remove_all(dir);
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
      [&] { return s.got.count<link::exited>() == 2 && s.got.count<link::stream_closed>() == 4; },
      4s))
      << s.got.output_bytes() << " bytes arrived; " << s.got.down.value_or("");
  EXPECT_TRUE(s.got.pipes[0].empty() && s.got.pipes[1].empty());  // nothing travels as an fd
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    const auto& out = s.got.output[{rank, output_stream::out}];
    EXPECT_EQ(out.size(), flood);
    EXPECT_TRUE(out == flood_text(rank, flood)) << "rank " << rank << ": bytes lost or reordered";
    EXPECT_EQ((s.got.output[{rank, output_stream::err}]), "start\nend\n");
  }
  for (const auto& c : s.got.all<link::stream_closed>()) {
    const std::uint64_t want = c.stream == output_stream::out ? flood : 10;
    EXPECT_EQ(c.bytes, want) << "rank " << c.rank;
    // Every output frame of the stream came before its stream_closed.
    EXPECT_EQ((s.got.output_at_close[{c.rank, c.stream}]), want) << "rank " << c.rank;
  }
  EXPECT_EQ(s.got.output_after_close, 0u);
  for (const auto& x : s.got.all<link::exited>()) EXPECT_EQ(x.status, exit_status::exited(0));
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
  EXPECT_EQ(s.got.count<link::exited>(), 0u);
  ASSERT_EQ(s.got.count<link::started>(), 1u);
  EXPECT_TRUE(alive(static_cast<pid_t>(s.got.all<link::started>()[0].pid)));
  EXPECT_FALSE(s.got.down);
  s.release_output();
  ASSERT_TRUE(s.run_until([&] {
    return s.got.count<link::exited>() == 1 && s.got.count<link::stream_closed>() == 2;
  })) << s.got.output_bytes();
  EXPECT_EQ(s.got.all<link::exited>()[0].status, exit_status::exited(0));
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
  const bool ended = s.run_until(
      [&] { return s.got.count<link::exited>() == 1 && s.got.count<link::stream_closed>() == 2; });
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started>() == 2; }));
  const auto last_word = steady::now();  // the launcher's bytes all went with the spawn
  std::vector<pid_t> ranks;
  for (const auto& st : s.got.all<link::started>()) ranks.push_back(static_cast<pid_t>(st.pid));
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
  EXPECT_EQ(s.got.count<link::exited>(), 0u);  // nothing is said to a launcher that is gone
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
  ASSERT_TRUE(s.run_until([&] { return s.got.count<link::started>() == 1; }));
  s.run_for(1200ms);  // three silence timeouts
  EXPECT_FALSE(s.got.down) << *s.got.down;
  EXPECT_EQ(s.got.count<link::exited>(), 0u);
  EXPECT_TRUE(alive(static_cast<pid_t>(s.got.all<link::started>()[0].pid)));
  EXPECT_EQ(s.shutdown(), "");
}

}  // namespace
}  // namespace pm
