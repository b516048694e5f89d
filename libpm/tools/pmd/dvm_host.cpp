#include "dvm_host.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "agent/children.hpp"
#include "dvm/json_lines.hpp"
#include "pm/error.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "sys/watched_process.hpp"
#include "transport/srun/connect_back.hpp"

extern char** environ;

namespace pmd {

namespace {

namespace asio = boost::asio;
using nlohmann::json;
using namespace pm::dvm_parts;

// The server pings every half second; this long without a line from it means it is gone (a host
// cut off, a server stopped) and the daemon ends its jobs.
constexpr std::chrono::seconds server_silence{10};
// A job agent given SIGTERM ends its ranks (SIGTERM, the job's kill grace, SIGKILL) and sweeps
// what they left before it exits: its own grace must be longer than the ranks' default 3 s, or
// the SIGKILL that ends it comes first and what the ranks started runs on, orphaned. (A job's
// larger --kill-grace travels in the agent link's setup; the daemon does not see it.)
constexpr pm::sys::stop_sequence job_agent_stop{
    .first_signal = SIGTERM, .grace = std::chrono::milliseconds(5000), .last_signal = SIGKILL};

// What a job agent's command line may hold: pmd's own flags for a dial-back agent, nothing that
// could make it something else.
bool allowed_arguments(const std::vector<std::string>& args) {
  bool connect = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--connect") {
      connect = true;
    } else if ((a == "--nonce" || a == "--grace-ms" || a == "--hello-ms") && i + 1 < args.size()) {
      const auto& v = args[++i];
      if (v.empty() || v.size() > 16 ||
          v.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        return false;
      }
    } else {
      return false;
    }
  }
  return connect;
}

std::string own_program() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw pm::error(pm::errc::system, "cannot find pmd's own path in /proc/self/exe");
  return {buf, static_cast<std::size_t>(n)};
}

class daemon {
 public:
  // `channel`: the server's socket (dialled back) or -1 for stdin and stdout (ssh, a pipe).
  explicit daemon(int channel)
      : in_(io_, channel >= 0 ? ::dup(channel) : ::dup(0)),
        out_(channel >= 0 ? channel : 1),
        silence_(io_),
        sweeps_(io_),
        signals_(io_, SIGTERM, SIGINT, SIGHUP) {}

  int run() {
    ::signal(SIGPIPE, SIG_IGN);
    // A job agent killed outright (SIGKILL, the OOM killer) takes its ranks with it (their
    // parent-death signal), but not what they started: reparented here, it is ended
    // (sweep_orphans). Without this it went to init and ran on.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    program_ = own_program();
    for (char** e = ::environ; *e != nullptr; ++e) {
      const std::string_view v(*e);
      if (!v.starts_with("PM_AGENT_")) base_env_.emplace_back(v);
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    send({{"ev", "ready"}, {"pid", static_cast<std::int64_t>(::getpid())}, {"hostname", host}});
    signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
      if (!ec) end("pmd --dvm-host: " + std::string(::strsignal(signo)));
    });
    arm_silence();
    read();
    io_.run();
    return code_;
  }

 private:
  void send(const json& doc) {
    const auto line = to_line(doc);
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(out_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the server is gone: stdin's end says so too
      done += static_cast<std::size_t>(n);
    }
  }

  void arm_silence() {
    silence_.expires_after(server_silence);
    silence_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec)
        end("the DVM's server was silent for " + std::to_string(server_silence.count()) + " s");
    });
  }

  void read() {
    in_.async_read_some(
        asio::buffer(buf_), [this](const boost::system::error_code& ec, std::size_t n) {
          if (ec) {
            end({});  // the server closed the channel: the DVM stops
            return;
          }
          std::vector<std::string> lines;
          if (!lines_.append(std::string_view(buf_.data(), n), lines)) {
            end("a line from the server longer than " + std::to_string(line_limit) + " bytes");
            return;
          }
          arm_silence();
          for (const auto& line : lines) {
            if (ending_) return;
            handle(line);
          }
          if (!ending_) read();
        });
  }

  void handle(const std::string& line) {
    std::string problem;
    const auto doc = parse_object(line, problem);
    const auto op = doc ? string_at(*doc, "op") : std::nullopt;
    if (!op) {
      end("the server sent " + (doc ? std::string("an object without \"op\"") : problem));
      return;
    }
    if (*op == "ping") {
      send({{"ev", "pong"}});
    } else if (*op == "start") {
      start(*doc);
    } else if (*op == "stop") {
      const auto tag = string_at(*doc, "tag");
      if (auto it = tag ? jobs_.find(*tag) : jobs_.end(); it != jobs_.end()) {
        it->second->stop(job_agent_stop);
      }
    } else {
      end("the server sent an unknown \"op\"");
    }
  }

  void start(const json& doc) {
    const auto tag = string_at(doc, "tag");
    const auto node = string_at(doc, "node");
    const auto addrs = string_at(doc, "addrs");
    const auto token = string_at(doc, "token");
    const auto port = number_at(doc, "port");
    const auto args = strings_at(doc, "args");
    if (!tag || tag->empty() || tag->size() > 64) {
      end("the server sent a start without a tag");
      return;
    }
    const auto fail = [&](const std::string& why) {
      send({{"ev", "failed"}, {"tag", *tag}, {"why", why}});
    };
    if (!node || !addrs || !token || !port || *port == 0 || *port > 65535 || !args ||
        !allowed_arguments(*args) || jobs_.contains(*tag)) {
      fail("a start request this daemon does not take");
      return;
    }
    pm::sys::spawn_request req;
    req.path = program_;
    req.argv = {program_};
    req.argv.insert(req.argv.end(), args->begin(), args->end());
    req.env = base_env_;
    req.env.push_back(std::string(pm::srun::env_addresses) + "=" + *addrs);
    req.env.push_back(std::string(pm::srun::env_port) + "=" + std::to_string(*port));
    req.env.push_back(std::string(pm::srun::env_token) + "=" + *token);
    req.env.push_back(std::string(pm::srun::env_node) + "=" + *node);
    req.stderr_fd = 2;  // "pmd: cannot reach the launcher ..." reaches the server's log
    // A daemon that dies unannounced (its host crashing, a SIGKILL) takes its job agents with it
    // at once, as a crash takes a cold launch's agent: they do not get to report their ranks'
    // ends as failures of their own, and each job sees its host lost. An orderly end is the
    // daemon's own SIGTERM (end()).
    req.parent_death_signal = SIGKILL;
    try {
      auto p = std::make_unique<pm::sys::watched_process>(io_, pm::sys::spawn(req));
      const auto pid = p->pid();
      p->on_exit([this, t = *tag](const pm::sys::exit_check& how) {
        const bool clean = how.status && how.status->success();
        send({{"ev", "ended"}, {"tag", t}, {"how", clean ? "" : "pmd " + pm::sys::describe(how)}});
        jobs_.erase(t);
        sweep_orphans();
        if (ending_ && jobs_.empty()) {
          last_sweeps();
          io_.stop();
          return;
        }
        // The ranks die by their parent-death signal a moment after the agent; what they
        // started comes here only then.
        sweeps_left_ = 5;
        arm_sweep();
      });
      jobs_.emplace(*tag, std::move(p));
      send({{"ev", "started"}, {"tag", *tag}, {"pid", static_cast<std::int64_t>(pid)}});
    } catch (const pm::error& e) {
      fail(e.what());
    }
  }

  // Every child that is not a running job agent: left by the ranks of one that was killed
  // (nothing else is a child of this daemon). SIGKILL, then reaped; what it started comes here in
  // turn and goes at the next sweep.
  void sweep_orphans() {
    std::set<pid_t> agents;
    for (const auto& [tag, p] : jobs_) agents.insert(p->pid());
    std::vector<pid_t> strays;
    for (const auto pid : pm::agent::list_children()) {
      if (!agents.contains(pid)) strays.push_back(pid);
    }
    for (const auto pid : strays) ::kill(pid, SIGKILL);
    pm::agent::reap_ended(strays);
  }

  // The daemon's end: the ranks of its last job agents die a moment after them, and what they
  // started comes here only then (half a second at most, on the way out).
  void last_sweeps() {
    for (int i = 0; i < 5; ++i) {
      sweep_orphans();
      if (pm::agent::list_children().empty()) return;
      ::usleep(100'000);
    }
  }

  void arm_sweep() {
    sweeps_.expires_after(std::chrono::milliseconds(200));
    sweeps_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      sweep_orphans();
      if (--sweeps_left_ > 0) arm_sweep();
    });
  }

  // Every job agent ends (SIGTERM, grace, SIGKILL), then the daemon.
  void end(const std::string& why) {
    if (ending_) return;
    ending_ = true;
    if (!why.empty()) {
      std::fprintf(stderr, "pmd: %s; ending %zu job agent(s)\n", why.c_str(), jobs_.size());
      code_ = 1;
    }
    silence_.cancel();
    signals_.cancel();
    boost::system::error_code ignored;
    in_.close(ignored);
    sweeps_.cancel();
    if (jobs_.empty()) {
      last_sweeps();
      io_.stop();
      return;
    }
    for (auto& [tag, p] : jobs_) p->stop(job_agent_stop);
  }

  asio::io_context io_{1};
  asio::posix::stream_descriptor in_;
  int out_;
  asio::steady_timer silence_;
  asio::steady_timer sweeps_;  // sweep_orphans again, a few times after a job agent ended
  int sweeps_left_ = 0;
  asio::signal_set signals_;
  std::array<char, 65536> buf_{};
  line_buffer lines_;
  std::string program_;
  std::vector<std::string> base_env_;
  std::map<std::string, std::unique_ptr<pm::sys::watched_process>> jobs_;
  bool ending_ = false;
  int code_ = 0;
};

}  // namespace

int run_dvm_host(bool connect) {
  try {
    // Started by srun: dial the server back (its addresses, port and token are in the
    // environment, taken out of it here), as a job's agent does (connect_back.hpp).
    const int channel = connect ? pm::srun::connect_from_environment() : -1;
    daemon d(channel);
    return d.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmd --dvm-host: %s\n", e.what());
    return 2;
  }
}

}  // namespace pmd
