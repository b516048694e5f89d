// A real pmd over the agent link (protocol 3), with real ranks (tests/payload/pm_payload), for the
// tests that start one (tests/unit/local_agent_test.cpp, local_agent_link_test.cpp).
//
// pmd is started by the local transport (a Unix socket pair: output pipes come back as
// descriptors) or by the test over two pipes, as ssh gives it (output comes as data frames). The
// launcher's end is the real one, driver::host_link; where a test must say what no launcher says
// (garbage, another job's nonce) it drives a bare link::endpoint over the stream itself.
//
// Every process a test starts is ended by pid and reaped, also when the test fails: pmd by the
// transport or through its pidfd, ranks and their descendants by the reaper.
#pragma once

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
#include "support/processes.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "transport/local/local_transport.hpp"

extern char** environ;

namespace pm::local_agent_support {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using link::owned_fd;
using steady = std::chrono::steady_clock;

inline std::string pmd_path() {
  return std::string(PM_BINARY_DIR) + "/bin/pmd";
}
inline std::string payload_dir() {
  return std::string(PM_BINARY_DIR) + "/tests";
}
inline std::string payload() {
  return payload_dir() + "/pm_payload";
}

constexpr std::uint64_t job_nonce = 0x5eed1234abcd0042;

inline std::string hex(std::uint64_t v) {
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
inline std::string read_fd(int fd, const std::string& until = {},
                           std::chrono::milliseconds limit = 4s) {
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
inline std::string read_line_of(int fd, const std::string& word) {
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
inline pid_t pid_after(const std::string& text, const std::string& word) {
  const auto at = text.find(word + " ");
  return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + word.size() + 1);
}

// The CPU time a live process has used itself (utime + stime), or nothing once it is gone.
inline std::optional<std::chrono::milliseconds> cpu_time(pid_t pid) {
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
inline std::string flood_text(std::uint32_t rank, std::size_t bytes) {
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

inline link::app_spec payload_app(std::vector<std::string> steps,
                                  std::vector<std::string> env = {}) {
  link::app_spec a;
  a.argv = {payload()};
  a.argv.insert(a.argv.end(), steps.begin(), steps.end());
  a.env = std::move(env);
  return a;
}

inline link::job_setup job(std::vector<link::app_spec> apps, bool forward_output = false) {
  link::job_setup s;
  s.grace_ms = 300;  // short, so that a failing test's clean-up is quick too
  s.forward_output = forward_output;
  s.apps = std::move(apps);
  return s;
}

// Rank `rank` of app `app` (by default the app of the same index).
inline link::rank_spec rank_of(std::uint32_t rank, std::optional<std::uint32_t> app = {}) {
  link::rank_spec r;
  r.rank = rank;
  r.app = app.value_or(rank);
  r.env = {"OMPI_COMM_WORLD_RANK=" + std::to_string(rank)};
  return r;
}

inline link::spawn_request spawn_of(std::vector<link::rank_spec> ranks) {
  return link::spawn_request{std::move(ranks)};
}

// The messages of type T; for an entry of a list message (started_rank, ended_rank,
// closed_stream), every entry of every such message, in order: how many ranks an agent names in
// one message is its business (one turn of its loop), not the test's.
template <class T>
std::vector<T> all_of(const std::vector<link::message>& messages) {
  std::vector<T> r;
  for (const auto& m : messages) {
    if constexpr (std::is_same_v<T, link::started_rank>) {
      if (const auto* x = std::get_if<link::started>(&m)) {
        r.insert(r.end(), x->ranks.begin(), x->ranks.end());
      }
    } else if constexpr (std::is_same_v<T, link::ended_rank>) {
      if (const auto* x = std::get_if<link::exited>(&m)) {
        r.insert(r.end(), x->ranks.begin(), x->ranks.end());
      }
    } else if constexpr (std::is_same_v<T, link::closed_stream>) {
      if (const auto* x = std::get_if<link::stream_closed>(&m)) {
        r.insert(r.end(), x->streams.begin(), x->streams.end());
      }
    } else if (const T* x = std::get_if<T>(&m)) {
      r.push_back(*x);
    }
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
        for (const auto& r : s->ranks) cleanup.pids.insert(static_cast<pid_t>(r.pid));
        // Descriptors come with a `started` that names one rank.
        if (!fds.empty()) got.pipes[s->ranks.front().rank] = std::move(fds);
      }
      if (const auto* c = std::get_if<link::stream_closed>(&m)) {
        for (const auto& x : c->streams) {
          const auto key = std::make_pair(x.rank, x.stream);
          got.output_at_close[key] = got.output[key].size();
        }
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
          if (const auto* s = std::get_if<link::started>(&m->msg); s && !taken.empty()) {
            pipes[s->ranks.front().rank] = std::move(taken);
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

}  // namespace pm::local_agent_support
