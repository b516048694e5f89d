// The DVM's server (pm/dvm.hpp, docs/dvm.md): one daemon per host, kept; submitters on a Unix
// socket; the slots they share.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "dvm/line_channel.hpp"
#include "dvm/slot_ledger.hpp"
#include "link/socket.hpp"
#include "pm/dvm.hpp"
#include "pm/error.hpp"
#include "sys/executable.hpp"
#include "sys/spawner.hpp"
#include "sys/watched_process.hpp"
#include "text/printable.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/srun/callback_listener.hpp"
#include "transport/srun/refusal_log.hpp"
#include "transport/srun/srun_command.hpp"
#include "transport/ssh/ssh_command.hpp"

extern char** environ;

namespace pm {

namespace {

namespace asio = boost::asio;
using nlohmann::json;
using namespace pm::dvm_parts;
using clock_type = std::chrono::steady_clock;

constexpr sys::stop_sequence carrier_stop{
    .first_signal = SIGTERM, .grace = std::chrono::milliseconds(3000), .last_signal = SIGKILL};

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Only a directory of this user that nobody else may enter holds the socket: nobody else can
// replace it, and the peer check below is a second wall, not the only one.
std::string unsafe_socket_directory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return "'" + dir + "' does not exist";
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  if (st.st_uid != ::geteuid()) return "'" + dir + "' belongs to another user";
  if ((st.st_mode & 077) != 0) return "'" + dir + "' is open to other users (it must be 0700)";
  return {};
}

}  // namespace

struct dvm_server::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, dvm_options o)
      : io(context),
        opts(std::move(o)),
        ledger(opts.hosts),
        beat(context),
        start_timer(context),
        idle(context) {}

  enum class host_state { starting, up, lost };
  struct daemon_host {
    std::string name;
    host_state state = host_state::starting;
    std::string lost;
    std::int64_t pid = 0;
    std::unique_ptr<sys::watched_process> carrier;
    std::shared_ptr<line_channel> channel;
    std::unique_ptr<asio::posix::stream_descriptor> err;  // the carrier's stderr (ssh's lines)
    std::array<char, 4096> err_buf{};
    std::string err_partial, last_said;
    clock_type::time_point heard{};
  };
  struct job_agent {
    bool running = false;  // started and not ended
  };
  struct session {
    std::uint64_t id = 0;
    std::int64_t pid = 0;
    std::shared_ptr<line_channel> channel;
    std::vector<std::string> command;
    clock_type::time_point since = clock_type::now();
    bool claimed = false, waiting = false, gone = false;
    // What its last "hosts" answer showed: the ledger's free count (`freed_count` then), and
    // whether it saw what is free or nothing (it was behind others).
    std::uint64_t seen = 0;
    bool saw_free = false;
    std::map<std::uint32_t, job_agent> agents;  // host index -> its agent for this job
  };

  asio::io_context& io;
  dvm_options opts;
  slot_ledger ledger;
  std::vector<daemon_host> hosts;
  std::map<std::uint64_t, std::shared_ptr<session>> sessions;
  // The jobs that wait for slots, first come first: only the first may claim, and only it is
  // told when slots come back. All waiters raced at each "freed", and the one-slot jobs always
  // won: a wider job waited for ever. A job that would fit now still waits behind an earlier one
  // (no backfill, as Slurm's plain FIFO).
  std::deque<std::uint64_t> queue;
  std::uint64_t freed_count = 0;  // slots came back (or hosts were lost) this many times
  std::uint64_t next_id = 1;
  std::optional<asio::local::stream_protocol::acceptor> acceptor;
  // Inside Slurm: the listener the daemons dial, and the one srun step that runs them.
  std::unique_ptr<srun::callback_listener> listener;
  std::unique_ptr<sys::watched_process> step;
  std::vector<std::uint32_t> step_hosts;
  asio::steady_timer beat, start_timer, idle;
  // What the log says about connections refused (another uid) or closed (garbage, a line too
  // long, a request of the wrong shape): bounded as the connect-back listener's
  // (transport/srun/refusal_log.hpp): the first of each kind from each uid or pid in full, the
  // rest counted in one line at most every 10 s. Each connection made its own line: 3,000 of
  // another uid, 3,000 lines.
  struct bounded_log {
    srun::refusal_log log;
    std::optional<asio::steady_timer> timer;
    bool armed = false;
  };
  bounded_log strangers, broken{srun::refusal_log({.verb = "closed"}), {}, false};
  std::function<void(std::string)> ready, stopped;
  bool stopping = false, finished = false, idle_armed = false;
  std::string stop_why;

  void say(const std::string& line) const {
    if (opts.on_message) opts.on_message(line);
  }

  // ---- the daemons ----

  // pmd on the other hosts: --launch-agent / --prefix's, else the same path as this machine's.
  std::string remote_pmd() const {
    if (!opts.remote.agent_path.empty()) return opts.remote.agent_path;
    return opts.agent_path.empty() ? local::default_agent_path() : opts.agent_path;
  }

  void start_all() {
    hosts.resize(opts.hosts.hosts.size());
    std::vector<std::uint32_t> by_srun;
    for (std::uint32_t h = 0; h < hosts.size(); ++h) {
      hosts[h].name = opts.hosts.hosts[h].name;
      if (!opts.hosts.hosts[h].local && opts.remote.launcher == agent_launcher::srun) {
        by_srun.push_back(h);
        continue;
      }
      try {
        start_daemon(h);
      } catch (const pm::error& e) {
        lose(h, e.what());
      }
    }
    if (!by_srun.empty()) {
      try {
        start_step(by_srun);
      } catch (const pm::error& e) {
        for (const auto h : by_srun) lose(h, e.what());
      }
    }
    start_timer.expires_after(opts.start_timeout);
    start_timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      for (std::uint32_t h = 0; h < self->hosts.size(); ++h) {
        if (self->hosts[h].state == host_state::starting) {
          self->lose(h, "its daemon did not answer within " +
                            std::to_string(self->opts.start_timeout.count()) + " ms");
        }
      }
    });
    arm_beat();
    maybe_ready();
  }

  void start_daemon(std::uint32_t h) {
    const auto& info = opts.hosts.hosts[h];
    std::vector<std::string> argv;
    std::string path;
    if (info.local) {
      path = opts.agent_path.empty() ? local::default_agent_path() : opts.agent_path;
      argv = {path, "--dvm-host"};
    } else {
      ssh::ssh_settings settings;
      if (!opts.remote.rsh_agent.empty()) settings.agent = opts.remote.rsh_agent;
      settings.extra_args = opts.remote.rsh_args;
      argv = ssh::ssh_argv(settings, info, {remote_pmd(), "--dvm-host"});
      const char* path_env = std::getenv("PATH");
      path = sys::resolve_executable(argv.front(), path_env != nullptr ? path_env : "/usr/bin:/bin",
                                     "");
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      throw error(errc::system, std::string("socketpair: ") + std::strerror(errno));
    }
    link::owned_fd mine(pair[0]), theirs(pair[1]);
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) {
      throw error(errc::system, std::string("pipe: ") + std::strerror(errno));
    }
    link::owned_fd err_r(err[0]), err_w(err[1]);
    sys::spawn_request req;
    req.path = path;
    req.argv = argv;
    for (char** e = environ; *e != nullptr; ++e) req.env.emplace_back(*e);
    req.stdin_fd = theirs.get();
    req.stdout_fd = theirs.get();
    req.stderr_fd = err_w.get();
    // The server's end ends the carrier even when the server is SIGKILLed.
    req.parent_death_signal = SIGTERM;
    auto& d = hosts[h];
    d.carrier = std::make_unique<sys::watched_process>(io, sys::spawn(req));
    d.err = std::make_unique<asio::posix::stream_descriptor>(io, err_r.release());
    open_channel(h, mine.release());
    d.carrier->on_exit([weak = weak_from_this(), h](const sys::exit_check&) {
      if (auto self = weak.lock()) self->carrier_gone(h);
    });
    read_err(h);
  }

  // Inside Slurm: one srun step runs every daemon not on this machine; each dials back with the
  // DVM's token (the connect-back of docs/slurm.md) and its socket becomes its channel.
  void start_step(const std::vector<std::uint32_t>& list) {
    listener = std::make_unique<srun::callback_listener>(
        io, srun::listener_options{
                opts.remote.iface, [this](const std::string& line) { say("srun: " + line); },
                [this](std::uint32_t host, int fd) {
                  if (hosts[host].state == host_state::starting && !hosts[host].channel) {
                    open_channel(host, fd);
                  } else {
                    ::close(fd);
                  }
                }});
    listener->listen(hosts[list.front()].name);
    srun::srun_settings settings;
    if (!opts.remote.srun_command.empty()) settings.command = opts.remote.srun_command;
    settings.extra_args = opts.remote.srun_args;
    const char* path_env = std::getenv("PATH");
    const auto path = sys::resolve_executable(settings.command.front(),
                                              path_env != nullptr ? path_env : "/usr/bin:/bin", "");
    std::vector<std::string> nodes;
    for (const auto h : list) {
      nodes.push_back(hosts[h].name);
      listener->expect(h, hosts[h].name);
    }
    sys::spawn_request req;
    req.path = path;
    req.argv = srun::srun_argv(settings, nodes, {remote_pmd(), "--dvm-host", "--connect"});
    req.argv.front() = settings.command.front();
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    req.env =
        srun::srun_environment(env, listener->addresses(), listener->port(), listener->token());
    req.stderr_fd = 2;  // srun's and slurmstepd's lines go to the DVM's log
    req.parent_death_signal = SIGTERM;
    step = std::make_unique<sys::watched_process>(io, sys::spawn(req));
    step_hosts = list;
    step->on_exit([weak = weak_from_this()](const sys::exit_check& how) {
      auto self = weak.lock();
      if (!self) return;
      if (self->stopping) {
        self->maybe_stopped();
        return;
      }
      for (const auto h : self->step_hosts) self->lose(h, "srun " + sys::describe(how));
    });
  }

  void open_channel(std::uint32_t h, int fd) {
    auto& d = hosts[h];
    d.heard = clock_type::now();
    d.channel = std::make_shared<line_channel>(io, fd);
    d.channel->start(
        [weak = weak_from_this(), h](const json& doc) {
          if (auto self = weak.lock()) self->from_daemon(h, doc);
        },
        [weak = weak_from_this(), h](const std::string& problem) {
          auto self = weak.lock();
          if (!self) return;
          if (!problem.empty()) {
            self->lose(h, "its daemon sent " + problem);
          } else {
            self->carrier_gone(h);
          }
        });
  }

  void read_err(std::uint32_t h) {
    auto& d = hosts[h];
    if (!d.err) return;
    d.err->async_read_some(
        asio::buffer(d.err_buf),
        [weak = weak_from_this(), h](const boost::system::error_code& ec, std::size_t n) {
          auto self = weak.lock();
          if (!self || ec) return;
          auto& host = self->hosts[h];
          host.err_partial.append(host.err_buf.data(), n);
          for (auto nl = host.err_partial.find('\n'); nl != std::string::npos;
               nl = host.err_partial.find('\n')) {
            auto line = text::last_line(host.err_partial.substr(0, nl));
            host.err_partial.erase(0, nl + 1);
            if (line.empty()) continue;
            host.last_said = line;
            self->say(host.name + ": " + line);
          }
          if (host.err_partial.size() > 4096) host.err_partial.clear();
          self->read_err(h);
        });
  }

  // The carrier ended or its channel did: the host is lost, with ssh's (or pmd's) last word.
  void carrier_gone(std::uint32_t h) {
    auto& d = hosts[h];
    if (stopping) {
      maybe_stopped();
      return;
    }
    if (d.state == host_state::lost) return;
    std::string why = "its daemon's channel ended";
    if (d.carrier && d.carrier->ended()) why = "its carrier " + sys::describe(d.carrier->end());
    if (!d.last_said.empty()) why += ": " + d.last_said;
    lose(h, why);
  }

  void lose(std::uint32_t h, const std::string& why) {
    auto& d = hosts[h];
    if (d.state == host_state::lost) return;
    const bool was_up = d.state == host_state::up;
    d.state = host_state::lost;
    d.lost = why;
    ledger.lose(d.name);
    if (d.channel) d.channel->close();
    if (d.carrier && !d.carrier->ended()) d.carrier->stop(carrier_stop);
    if (!stopping) {
      say((was_up ? "host " + d.name + " was lost from the DVM: "
                  : "host " + d.name + " is left out of the DVM: ") +
          why);
    }
    // The jobs with an agent there: their own links notice too; they hear it first from here.
    for (auto& [id, s] : sessions) {
      auto it = s->agents.find(h);
      if (it == s->agents.end()) continue;
      if (it->second.running && s->channel) {
        s->channel->send({{"ev", "ended"}, {"host", d.name}, {"how", "host lost: " + why}});
      }
      s->agents.erase(it);
    }
    settle_sessions();
    ++freed_count;
    wake_waiters();
    maybe_ready();
    if (stopping) {
      maybe_stopped();
    } else if (ready == nullptr && !any_up()) {
      stop("every host of the DVM was lost");
    }
  }

  bool any_up() const {
    for (const auto& d : hosts) {
      if (d.state == host_state::up) return true;
    }
    return false;
  }

  void from_daemon(std::uint32_t h, const json& doc) {
    auto& d = hosts[h];
    d.heard = clock_type::now();
    const auto ev = string_at(doc, "ev");
    if (!ev) {
      lose(h, "its daemon sent an object without \"ev\"");
      return;
    }
    if (*ev == "pong") return;
    if (*ev == "ready") {
      if (d.state != host_state::starting) return;
      d.state = host_state::up;
      if (const auto pid = doc.find("pid"); pid != doc.end() && pid->is_number_integer()) {
        d.pid = pid->get<std::int64_t>();
      }
      maybe_ready();
      return;
    }
    const auto tag = string_at(doc, "tag");
    const auto slash = tag ? tag->find('/') : std::string::npos;
    if (slash == std::string::npos) return;
    std::uint64_t id = 0;
    try {
      id = std::stoull(tag->substr(0, slash));
    } catch (const std::exception&) {
      return;
    }
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    auto& s = *it->second;
    auto agent = s.agents.find(h);
    if (agent == s.agents.end()) return;
    if (*ev == "started") {
      agent->second.running = true;
    } else if (*ev == "failed" || *ev == "ended") {
      const bool was_running = agent->second.running;
      s.agents.erase(agent);
      if (s.channel) {
        if (*ev == "failed") {
          s.channel->send(
              {{"ev", "failed"},
               {"host", d.name},
               {"why", string_at(doc, "why").value_or("the daemon could not start it")}});
        } else if (was_running) {
          s.channel->send(
              {{"ev", "ended"}, {"host", d.name}, {"how", string_at(doc, "how").value_or("")}});
        }
      }
      settle_sessions();
    }
  }

  void arm_beat() {
    beat.expires_after(opts.heartbeat_interval);
    beat.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->stopping) return;
      const auto bound = self->opts.heartbeat_interval * self->opts.heartbeat_misses;
      const auto now = clock_type::now();
      for (std::uint32_t h = 0; h < self->hosts.size(); ++h) {
        auto& d = self->hosts[h];
        if (d.state != host_state::up) continue;
        if (now - d.heard > bound) {
          self->lose(h, "its daemon was silent for " +
                            std::to_string(
                                std::chrono::duration_cast<std::chrono::milliseconds>(now - d.heard)
                                    .count()) +
                            " ms");
          continue;
        }
        d.channel->send({{"op", "ping"}});
      }
      self->arm_beat();
    });
  }

  void maybe_ready() {
    if (!ready) return;
    for (const auto& d : hosts) {
      if (d.state == host_state::starting) return;
    }
    start_timer.cancel();
    auto done = std::move(ready);
    ready = nullptr;
    if (!any_up()) {
      std::string why = "no host of the DVM came up";
      for (const auto& d : hosts) why += "; " + d.name + ": " + d.lost;
      stop(why);
      done(why);
      return;
    }
    try {
      listen();
    } catch (const pm::error& e) {
      stop(e.what());
      done(e.what());
      return;
    }
    arm_idle();
    done({});
  }

  // ---- the submitters ----

  void listen() {
    const auto why = unsafe_socket_directory(parent_of(opts.socket_path));
    if (!why.empty()) {
      throw error(errc::system, "the DVM's socket cannot live there: " + why);
    }
    if (opts.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      throw error(errc::usage, "the DVM's socket path is too long: " + opts.socket_path);
    }
    ::unlink(opts.socket_path.c_str());
    boost::system::error_code ec;
    acceptor.emplace(io);
    acceptor->open(asio::local::stream_protocol(), ec);
    if (!ec) acceptor->bind(asio::local::stream_protocol::endpoint(opts.socket_path), ec);
    if (!ec) ::chmod(opts.socket_path.c_str(), 0600);
    if (!ec) acceptor->listen(128, ec);
    if (ec) {
      acceptor.reset();
      throw error(errc::system, "cannot listen on '" + opts.socket_path + "': " + ec.message());
    }
    accept();
  }

  void accept() {
    acceptor->async_accept([weak = weak_from_this()](const boost::system::error_code& ec,
                                                     asio::local::stream_protocol::socket sock) {
      auto self = weak.lock();
      if (!self || !self->acceptor || ec == asio::error::operation_aborted) return;
      if (!ec) self->admit(std::move(sock));
      self->accept();
    });
  }

  // Only this user's processes submit: the directory keeps others out, and the peer's uid is
  // checked again here.
  void admit(asio::local::stream_protocol::socket sock) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::geteuid()) {
      const auto peer = "uid " + std::to_string(cred.uid);
      note(strangers, peer, "another user",
           "only the DVM's own user may use it (further ones from " + peer +
               " are counted, not shown)");
      return;
    }
    if (stopping) return;
    auto s = std::make_shared<session>();
    s->id = next_id++;
    s->pid = cred.pid;
    boost::system::error_code ignored;
    s->channel = std::make_shared<line_channel>(io, sock.release(ignored));
    sessions.emplace(s->id, s);
    s->channel->start(
        [weak = weak_from_this(), id = s->id](const json& doc) {
          if (auto self = weak.lock()) self->from_submitter(id, doc);
        },
        [weak = weak_from_this(), id = s->id](const std::string& problem) {
          auto self = weak.lock();
          if (!self) return;
          if (problem.empty()) {
            self->submitter_gone(id);
          } else {
            self->end_malformed(id, "it sent " + problem);
          }
        });
  }

  // Says `why` for a connection in the log, bounded (bounded_log).
  void note(bounded_log& n, const std::string& peer, const std::string& kind,
            const std::string& why) {
    if (auto line = n.log.refused(peer, kind, why, clock_type::now())) say(*line);
    arm_summary(n);
  }

  void arm_summary(bounded_log& n) {
    const auto due = n.log.summary_due();
    if (!due || n.armed || stopping) return;
    if (!n.timer) n.timer.emplace(io);
    n.armed = true;
    n.timer->expires_at(*due);
    n.timer->async_wait([weak = weak_from_this(), &n](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      n.armed = false;
      if (auto line = n.log.summary(clock_type::now())) self->say(*line);
      self->arm_summary(n);
    });
  }

  void flush_notes() {
    for (auto* n : {&strangers, &broken}) {
      if (auto line = n->log.summary(clock_type::now(), true)) say(*line);
      if (n->timer) n->timer->cancel();
      n->armed = false;
    }
  }

  // A submitter's connection that broke the protocol (not a JSON object, a line too long, a
  // request of the wrong shape) ends with one line to it naming why, and one in the log
  // (bounded); the DVM and the other jobs go on (docs/dvm.md, "The channels").
  void end_malformed(std::uint64_t id, const std::string& why) {
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    auto& s = *it->second;
    if (s.channel) {
      s.channel->send({{"ok", false}, {"error", "the DVM ends this connection: " + why}});
    }
    note(broken, "pid " + std::to_string(s.pid), why.substr(0, why.find(" (")),
         why + (s.claimed ? "; job " + std::to_string(s.id) + " ends" : ""));
    submitter_gone(id);
  }

  static json to_json(const allocation& a) {
    json out = json::array();
    for (const auto& h : a.hosts) {
      out.push_back({{"name", h.name}, {"slots", h.slots}, {"max_slots", h.max_slots}});
    }
    return out;
  }

  // Every host with its state, lost ones included (pmrun --ps).
  json host_list() const {
    json out = json::array();
    for (std::uint32_t index = 0; index < hosts.size(); ++index) {
      const auto& h = opts.hosts.hosts[index];
      const auto& d = hosts[index];
      json one{{"name", h.name},
               {"slots", h.slots},
               {"max_slots", h.max_slots},
               {"used", ledger.used(h.name)},
               {"up", d.state == host_state::up},
               {"daemon_pid", d.pid}};
      if (!d.lost.empty()) one["lost"] = d.lost;
      out.push_back(std::move(one));
    }
    return out;
  }

  void from_submitter(std::uint64_t id, const json& doc) {
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    auto& s = *it->second;
    const auto op = string_at(doc, "op");
    std::optional<std::string> malformed;
    if (!op) {
      malformed = "a request without \"op\"";
    } else if (*op == "hosts") {
      // What a job maps on: the ledger's word, the whole DVM and what is free of it (nothing,
      // while earlier jobs wait: it waits behind them).
      s.seen = freed_count;
      s.saw_free = !behind_others(s.id);
      json answer{{"ok", true},
                  {"whole", to_json(ledger.whole())},
                  {"free", s.saw_free ? to_json(ledger.free()) : json::array()}};
      if (!s.saw_free) answer["queued"] = jobs_before(s.id);
      s.channel->send(answer);
    } else if (*op == "wait") {
      s.waiting = true;
      if (std::find(queue.begin(), queue.end(), s.id) == queue.end()) queue.push_back(s.id);
      // First in line, and slots came back since it looked (or it saw nothing, behind jobs
      // that are gone now): it looks again at once, else it waited for a "freed" that was sent
      // before it asked.
      if (queue.front() == s.id && (!s.saw_free || s.seen != freed_count)) wake_waiters();
    } else if (*op == "claim") {
      malformed = claim(s, doc);
    } else if (*op == "claim_more") {
      malformed = claim_more(s, doc);
    } else if (*op == "start") {
      malformed = start_agents(s, doc);
    } else if (*op == "ps") {
      s.channel->send(status());
    } else if (*op == "stop") {
      s.channel->send({{"ok", true}});
      stop("stopped on request (pmrun --dvm stop)");
    } else {
      malformed = "an unknown request '" + text::untrusted(*op) + "'";
    }
    if (malformed) end_malformed(id, "it sent " + *malformed);
  }

  // A claim's "slots": host name -> count, each a number a slot count can be. Every field a
  // submitter sends is checked for its type and range before use: nlohmann's value() and get()
  // throw on a wrong type, and one such throw ended the DVM and every job on it. Each request
  // below returns what was wrong with its shape (the connection ends), or nullopt.
  static std::optional<std::string> counts_at(const json& doc,
                                              std::map<std::string, std::uint32_t>& want) {
    const auto slots = doc.find("slots");
    if (slots == doc.end() || !slots->is_object()) return "a claim without \"slots\" (an object)";
    for (const auto& [name, count] : slots->items()) {
      if (!count.is_number_unsigned() ||
          count.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
        return "a claim whose counts are not numbers from 0 to " +
               std::to_string(std::numeric_limits<std::uint32_t>::max());
      }
      want[name] = count.get<std::uint32_t>();
    }
    return std::nullopt;
  }

  std::optional<std::string> claim(session& s, const json& doc) {
    if (s.claimed) return "a second claim (a job claims once, then claim_more)";
    std::map<std::string, std::uint32_t> want;
    if (auto why = counts_at(doc, want)) return why;
    const auto shown = strings_at(doc, "command");
    if (doc.contains("command") && !shown) {
      return "a claim whose \"command\" is not a list of strings";
    }
    if (behind_others(s.id)) {
      s.channel->send({{"ok", false}, {"busy", true}, {"error", "earlier jobs wait for slots"}});
      return std::nullopt;
    }
    if (const auto why = ledger.claim(s.id, want)) {
      s.channel->send({{"ok", false}, {"busy", true}, {"error", *why}});
      return std::nullopt;
    }
    s.claimed = true;
    // First in line no more: the next one may fit in what is left.
    if (!queue.empty() && queue.front() == s.id) {
      queue.pop_front();
      wake_waiters();
    }
    idle.cancel();  // a job: the DVM is busy
    idle_armed = false;
    if (shown) s.command = *shown;
    s.since = clock_type::now();
    s.channel->send({{"ok", true}, {"job", s.id}});
    return std::nullopt;
  }

  // More slots for a job that runs (its ranks' MPI_Comm_spawn): all or nothing, or with "share"
  // what is free of them (an oversubscribing job's, as its first claim). They come back with
  // the job's others.
  std::optional<std::string> claim_more(session& s, const json& doc) {
    const auto id = number_at(doc, "id");
    if (!id) return "a claim_more without \"id\" (a number)";
    const auto share = bool_at(doc, "share");
    if (doc.contains("share") && !share) return "a claim_more whose \"share\" is not true or false";
    std::map<std::string, std::uint32_t> want;
    if (auto why = counts_at(doc, want)) return why;
    const auto refuse = [&](const std::string& why) {
      s.channel->send({{"ev", "claim_refused"}, {"id", *id}, {"why", why}});
      return std::nullopt;
    };
    if (!s.claimed) return refuse("the job has no claim yet");
    if (const auto why = ledger.claim(s.id, want, share.value_or(false))) return refuse(*why);
    s.channel->send({{"ev", "claimed"}, {"id", *id}});
    return std::nullopt;
  }

  std::optional<std::string> start_agents(session& s, const json& doc) {
    const auto names = strings_at(doc, "hosts");
    const auto args = strings_at(doc, "args");
    const auto addrs = string_at(doc, "addrs");
    const auto token = string_at(doc, "token");
    const auto port = number_at(doc, "port");
    if (!names || !args || !addrs || !token || !port || *port == 0 || *port > 65535) {
      return "a start without its fields (\"hosts\" and \"args\": lists of strings; "
             "\"addrs\", \"token\": strings; \"port\": 1 to 65535)";
    }
    if (!s.claimed) return "a start before a claim";
    for (const auto& name : *names) {
      const auto h = opts.hosts.find(name);
      if (!h || hosts[*h].state != host_state::up || s.agents.contains(*h)) {
        s.channel->send({{"ev", "failed"},
                         {"host", name},
                         {"why", !h ? "no host of this DVM"
                                 : hosts[*h].state != host_state::up
                                     ? "host lost from the DVM: " + hosts[*h].lost
                                     : "its agent was started already"}});
        continue;
      }
      s.agents[*h] = {};
      hosts[*h].channel->send({{"op", "start"},
                               {"tag", std::to_string(s.id) + "/" + std::to_string(*h)},
                               {"node", name},
                               {"addrs", *addrs},
                               {"port", *port},
                               {"token", *token},
                               {"args", *args}});
    }
    return std::nullopt;
  }

  json status() const {
    json jobs_doc = json::array();
    for (const auto& j : collect_jobs()) {
      jobs_doc.push_back({{"id", j.id},
                          {"submitter_pid", j.submitter_pid},
                          {"command", j.command},
                          {"slots", j.slots},
                          {"elapsed_s", j.elapsed_s}});
    }
    return {{"ok", true},
            {"pid", static_cast<std::int64_t>(::getpid())},
            {"uri", "unix:" + opts.socket_path},
            {"hosts", host_list()},
            {"jobs", std::move(jobs_doc)}};
  }

  std::vector<dvm_job_status> collect_jobs() const {
    std::vector<dvm_job_status> out;
    const auto now = clock_type::now();
    for (const auto& [id, s] : sessions) {
      if (!s->claimed) continue;
      dvm_job_status j;
      j.id = id;
      j.submitter_pid = s->pid;
      j.command = s->command;
      j.slots = ledger.held(id);
      j.elapsed_s = std::chrono::duration<double>(now - s->since).count();
      out.push_back(std::move(j));
    }
    return out;
  }

  // A submitter closed its connection (its job ended, or it died): its agents are told to end
  // (they see their link end anyway), and its slots come back once none runs.
  void submitter_gone(std::uint64_t id) {
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    auto& s = *it->second;
    s.gone = true;
    if (const auto place = std::find(queue.begin(), queue.end(), id); place != queue.end()) {
      const bool first = place == queue.begin();
      queue.erase(place);
      if (first) wake_waiters();
    }
    s.channel->close();
    s.channel.reset();
    for (const auto& [h, agent] : s.agents) {
      if (hosts[h].state == host_state::up) {
        hosts[h].channel->send(
            {{"op", "stop"}, {"tag", std::to_string(s.id) + "/" + std::to_string(h)}});
      }
    }
    settle_sessions();
  }

  void settle_sessions() {
    bool freed = false;
    for (auto it = sessions.begin(); it != sessions.end();) {
      if (it->second->gone && it->second->agents.empty()) {
        freed = freed || it->second->claimed;
        ledger.release(it->first);
        it = sessions.erase(it);
      } else {
        ++it;
      }
    }
    if (freed) {
      ++freed_count;
      wake_waiters();
    }
    if (!any_job()) arm_idle();
    if (stopping) maybe_stopped();
  }

  bool behind_others(std::uint64_t id) const { return !queue.empty() && queue.front() != id; }
  std::size_t jobs_before(std::uint64_t id) const {
    return static_cast<std::size_t>(std::find(queue.begin(), queue.end(), id) - queue.begin());
  }

  // Slots came back (or a host was lost, or the first waiter left): the first waiting job looks
  // again; the others wait behind it.
  void wake_waiters() {
    if (queue.empty()) return;
    const auto it = sessions.find(queue.front());
    if (it == sessions.end()) return;
    auto& s = *it->second;
    if (s.waiting && s.channel) {
      s.waiting = false;
      s.channel->send({{"ev", "freed"}});
    }
  }

  // Only jobs keep a DVM from idling: a job that holds slots or waits for them. A connection
  // that claims nothing (`pmrun --ps`, a look at its hosts) is no activity: each one re-armed the
  // timer, so a DVM polled with --ps never stopped.
  bool any_job() const {
    if (!queue.empty()) return true;
    for (const auto& [id, s] : sessions) {
      if (s->claimed || s->waiting) return true;
    }
    return false;
  }

  // Armed once when the last job goes, and not again until another job came and went.
  void arm_idle() {
    if (opts.idle_timeout.count() <= 0 || stopping || !acceptor || idle_armed) return;
    idle_armed = true;
    idle.expires_after(opts.idle_timeout);
    idle.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->idle_armed = false;
      if (self->any_job()) return;
      self->stop("idle for " + std::to_string(self->opts.idle_timeout.count() / 1000) +
                 " s (--dvm-idle-timeout)");
    });
  }

  // ---- the end ----

  void stop(const std::string& why) {
    if (stopping) return;
    stopping = true;
    stop_why = why;
    flush_notes();
    beat.cancel();
    idle.cancel();
    start_timer.cancel();
    close_acceptor();
    // Each daemon's channel closes: it ends its job agents (and so their ranks), then itself.
    for (auto& d : hosts) {
      if (d.channel) d.channel->close();
      if (d.carrier && !d.carrier->ended()) {
        d.carrier->stop(sys::stop_sequence{.patience = std::chrono::milliseconds(3000),
                                           .first_signal = SIGTERM,
                                           .grace = std::chrono::milliseconds(2000),
                                           .last_signal = SIGKILL});
      }
    }
    for (auto& [id, s] : sessions) {
      if (s->channel) s->channel->close();
    }
    // The daemons' channels closed: they end, and srun with them; one that hangs on gets
    // SIGTERM after 3 s.
    if (step && !step->ended()) {
      step->stop(sys::stop_sequence{.patience = std::chrono::milliseconds(3000),
                                    .first_signal = SIGTERM,
                                    .grace = std::chrono::milliseconds(2000),
                                    .last_signal = SIGKILL});
    }
    asio::post(io, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->maybe_stopped();
    });
  }

  void close_acceptor() {
    if (!acceptor) return;
    boost::system::error_code ignored;
    acceptor->close(ignored);
    acceptor.reset();
    ::unlink(opts.socket_path.c_str());
  }

  void maybe_stopped() {
    if (!stopping || finished) return;
    for (const auto& d : hosts) {
      if (d.carrier && !d.carrier->ended()) return;
    }
    if (step && !step->ended()) return;
    finished = true;
    if (stopped) {
      auto done = std::move(stopped);
      stopped = nullptr;
      done(stop_why);
    }
  }
};

dvm_server::dvm_server(asio::io_context& io, dvm_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}

dvm_server::~dvm_server() {
  impl_->close_acceptor();
  for (auto& d : impl_->hosts) {
    if (d.carrier && !d.carrier->ended()) d.carrier->stop_now(carrier_stop);
  }
  if (impl_->step && !impl_->step->ended()) impl_->step->stop_now(carrier_stop);
}

void dvm_server::start(std::function<void(std::string)> ready) {
  impl_->ready = std::move(ready);
  impl_->start_all();
}

void dvm_server::stop(std::string why) {
  impl_->stop(why.empty() ? "stopped" : why);
}

void dvm_server::on_stopped(std::function<void(std::string)> stopped) {
  impl_->stopped = std::move(stopped);
}

std::string dvm_server::uri() const {
  return "unix:" + impl_->opts.socket_path;
}

std::vector<dvm_host_status> dvm_server::hosts() const {
  std::vector<dvm_host_status> out;
  for (std::uint32_t h = 0; h < impl_->hosts.size(); ++h) {
    const auto& d = impl_->hosts[h];
    dvm_host_status s;
    s.name = d.name;
    s.slots = impl_->opts.hosts.hosts[h].slots;
    s.used = impl_->ledger.used(d.name);
    s.up = d.state == impl::host_state::up;
    s.lost = d.lost;
    s.daemon_pid = d.pid;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<dvm_job_status> dvm_server::jobs() const {
  return impl_->collect_jobs();
}

}  // namespace pm
