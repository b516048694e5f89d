#include "transport/srun/srun_transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "link/socket.hpp"
#include "pm/error.hpp"
#include "sys/executable.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/stop_sequence.hpp"
#include "sys/watched_process.hpp"
#include "text/printable.hpp"
#include "transport/srun/callback_listener.hpp"
#include "transport/srun/connect_back.hpp"
#include "transport/srun/srun_command.hpp"

extern char** environ;

namespace pm::srun {

namespace {

namespace asio = boost::asio;

// After the last stream of a step closed: srun normally ends at once (every agent exited); one
// that does not (it waits for a node Slurm has not declared dead yet) gets SIGTERM, then SIGKILL.
constexpr sys::stop_sequence after_the_last_stream{.patience = std::chrono::milliseconds(1000),
                                                   .first_signal = SIGTERM,
                                                   .grace = std::chrono::milliseconds(1000),
                                                   .last_signal = SIGKILL};
// When the transport goes: no waiting for srun to end by itself.
constexpr sys::stop_sequence at_once{
    .first_signal = SIGTERM, .grace = std::chrono::milliseconds(1000), .last_signal = SIGKILL};

// srun's own informational lines ("srun: cluster configuration lacks support for cpu binding",
// which --quiet does not silence) are not the user's business; its errors, slurmstepd's and the
// agents' lines are.
bool worth_telling(std::string_view line) {
  if (!line.starts_with("srun: ")) return true;
  for (const std::string_view word : {"error", "fatal", "abort", "CANCELLED", "DUE TO"}) {
    if (line.find(word) != std::string_view::npos) return true;
  }
  return false;
}

// `srun --version` within a second: "slurm 22.05.8"; empty when it cannot say.
std::string srun_version(const std::string& path, const std::vector<std::string>& env) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {};
  link::owned_fd r(out[0]), w(out[1]);
  sys::spawn_request req;
  req.path = path;
  req.argv = {path, "--version"};
  req.env = env;
  req.stdout_fd = w.get();
  sys::spawned_process p;
  try {
    p = sys::spawn(req);
  } catch (const pm::error&) {
    return {};
  }
  w.reset();
  link::owned_fd pidfd(p.pidfd);
  std::string text;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd pf{r.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pf, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(r.get(), buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  sys::send_signal(pidfd.get(), SIGKILL);
  sys::wait_exit(pidfd.get());
  return text;
}

}  // namespace

struct srun_transport::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& context, remote_launch o) : io(context), opts(std::move(o)) {}

  struct host_entry {
    std::string name;
    std::function<void(agent_stream)> opened;
    std::function<void(std::string)> failed;
    std::size_t step = SIZE_MAX;  // index into steps, once launched
    bool connected = false;
    bool closed = false;
    link::owned_fd watch;  // a duplicate of its socket: srun's end ends the stream
  };
  struct step {
    std::unique_ptr<sys::watched_process> process;
    std::unique_ptr<asio::posix::stream_descriptor> out;  // srun's stdout and stderr
    std::string output;                                   // its last 8 KiB
    std::string partial;                                  // a line not yet complete
    std::vector<std::uint32_t> hosts;
    std::vector<std::function<void(agent_end)>> waiting;
    bool exited() const { return process && process->ended(); }
  };

  asio::io_context& io;
  remote_launch opts;
  callback_listener listener{
      io, listener_options{opts.iface, [this](const std::string& line) { notice(line); },
                           [this](std::uint32_t host, int fd) { on_accepted(host, fd); }}};
  std::optional<bool> external_launcher;
  std::unordered_map<std::uint32_t, host_entry> hosts;
  std::vector<std::uint32_t> to_launch;
  std::vector<std::string> agent_argv;
  bool launch_posted = false;
  std::vector<std::unique_ptr<step>> steps;

  void notice(const std::string& line) const {
    if (opts.notice) opts.notice("srun: " + line);
  }

  // ---- the agents' calls ----

  // An accepted caller: the stream of the host its greeting named.
  void on_accepted(std::uint32_t host, int stream) {
    auto& h = hosts[host];
    h.connected = true;
    h.watch.reset(::fcntl(stream, F_DUPFD_CLOEXEC, 3));
    agent_stream s;
    s.read_fd = stream;
    s.write_fd = stream;
    s.socket = false;  // TCP: no descriptors travel
    s.pid = steps[h.step]->process->pid();
    asio::post(io, [opened = h.opened, s] { opened(s); });
  }

  // ---- the step ----

  void launch() {
    launch_posted = false;
    auto list = std::move(to_launch);
    to_launch.clear();
    if (list.empty()) return;
    try {
      listener.listen(hosts[list.front()].name);
      srun_settings settings;
      if (!opts.srun_command.empty()) settings.command = opts.srun_command;
      settings.extra_args = opts.srun_args;
      const char* path_env = std::getenv("PATH");
      std::string path;
      try {
        path = sys::resolve_executable(settings.command.front(),
                                       path_env != nullptr ? path_env : "/usr/bin:/bin", "");
      } catch (const pm::error& e) {
        throw error(errc::launch, std::string("srun: ") + e.what());
      }
      std::vector<std::string> env;
      for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
      env = srun_environment(env, listener.addresses(), listener.port(), listener.token());
      if (!external_launcher) external_launcher = has_external_launcher(srun_version(path, env));
      settings.external_launcher = *external_launcher;
      std::vector<std::string> nodes;
      for (const auto h : list) nodes.push_back(hosts[h].name);
      auto argv = srun_argv(settings, nodes, agent_argv);
      argv.front() = path;
      int out[2];
      if (::pipe2(out, O_CLOEXEC) != 0) throw error(errc::system, std::strerror(errno));
      link::owned_fd out_r(out[0]), out_w(out[1]);
      sys::spawn_request req;
      req.path = path;
      req.argv = argv;
      req.argv.front() = settings.command.front();
      req.env = std::move(env);
      req.stdout_fd = out_w.get();
      req.stderr_fd = out_w.get();
      sys::spawned_process res;
      try {
        res = sys::spawn(req);
      } catch (const pm::error& e) {
        throw error(errc::launch, std::string("cannot start srun: ") + e.what());
      }
      auto s = std::make_unique<step>();
      s->process = std::make_unique<sys::watched_process>(io, res);
      s->out = std::make_unique<asio::posix::stream_descriptor>(io, out_r.release());
      s->out->non_blocking(true);
      s->hosts = list;
      const std::size_t index = steps.size();
      steps.push_back(std::move(s));
      for (const auto h : list) {
        hosts[h].step = index;
        listener.expect(h, hosts[h].name);
      }
      steps[index]->process->on_exit([weak = weak_from_this(), index](const sys::exit_check&) {
        if (auto self = weak.lock()) self->on_exit(index);
      });
      read_output(index);
    } catch (const pm::error& e) {
      for (const auto h : list) {
        auto& entry = hosts[h];
        entry.closed = true;
        asio::post(io, [failed = entry.failed, what = std::string(e.what())] { failed(what); });
      }
    }
  }

  void read_output(std::size_t index) {
    auto& s = *steps[index];
    s.out->async_wait(asio::posix::descriptor_base::wait_read,
                      [weak = weak_from_this(), index](const boost::system::error_code& ec) {
                        auto self = weak.lock();
                        if (ec || !self) return;
                        if (self->drain_output(*self->steps[index])) self->read_output(index);
                      });
  }

  // What srun prints is Slurm's word on the step ("srun: error: node3: task 2: Killed",
  // "slurmstepd: error: *** STEP 7.1 ON node2 CANCELLED AT ... DUE TO TIME LIMIT ***") or an
  // agent's last words ("pmd: cannot reach the launcher ..."): the user sees each line.
  void pass_lines(step& s, std::string_view bytes) const {
    s.partial.append(bytes);
    std::size_t start = 0;
    for (auto nl = s.partial.find('\n'); nl != std::string::npos;
         nl = s.partial.find('\n', start)) {
      std::string line = text::last_line(s.partial.substr(start, nl - start));
      if (!line.empty() && opts.notice && worth_telling(line)) opts.notice(line);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() > 4096) {
      if (opts.notice) opts.notice(text::last_line(s.partial));
      s.partial.clear();
    }
  }

  // Reads what srun printed; false at its end.
  bool drain_output(step& s) {
    if (!s.out || !s.out->is_open()) return false;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(s.out->native_handle(), buf, sizeof buf);
      if (n > 0) {
        s.output.append(buf, static_cast<std::size_t>(n));
        if (s.output.size() > 8192) s.output.erase(0, s.output.size() - 8192);
        pass_lines(s, std::string_view(buf, static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      boost::system::error_code ignored;
      s.out->close(ignored);
      return false;
    }
  }

  void on_exit(std::size_t index) {
    auto& s = *steps[index];
    drain_output(s);
    const auto end = end_of(s);
    for (const auto h : s.hosts) {
      auto& entry = hosts[h];
      listener.forget(h);
      if (entry.closed) continue;
      if (!entry.connected) {
        // Its agent never called and never will.
        entry.closed = true;
        const std::string why =
            end.how.empty() ? "srun ended before the agent on " + entry.name + " called back"
                            : end.how;
        asio::post(io, [failed = entry.failed, why] { failed(why); });
      } else if (entry.watch) {
        ::shutdown(entry.watch.get(), SHUT_RDWR);  // the link sees its end now
      }
    }
    for (auto& d : s.waiting) asio::post(io, [d = std::move(d), end] { d(end); });
    s.waiting.clear();
  }

  agent_end end_of(const step& s) const {
    agent_end e;
    const std::string said = text::last_line(s.output);
    const auto& end = s.process->end();
    if (end.status && end.status->success()) return e;
    e.how = "srun " + sys::describe(end);
    if (!said.empty()) e.how += ": " + said;
    return e;
  }

  void close(std::uint32_t host, std::function<void(agent_end)> done) {
    auto it = hosts.find(host);
    if (it == hosts.end() || it->second.step == SIZE_MAX) {
      if (it != hosts.end()) it->second.closed = true;
      if (std::all_of(hosts.begin(), hosts.end(), [](const auto& h) { return h.second.closed; })) {
        listener.flush_refusals();
      }
      asio::post(io, [done = std::move(done)] { done({}); });
      return;
    }
    auto& entry = it->second;
    const bool was_connected = entry.connected;
    entry.closed = true;
    if (std::all_of(hosts.begin(), hosts.end(), [](const auto& h) { return h.second.closed; })) {
      listener.flush_refusals();
    }
    listener.forget(host);
    entry.watch.reset();
    const std::size_t index = entry.step;
    auto& s = *steps[index];
    if (s.exited()) {
      asio::post(io, [done = std::move(done), e = end_of(s)] { done(e); });
      return;
    }
    bool others = false;
    for (const auto h : s.hosts) others = others || !hosts[h].closed;
    if (others) {
      // The step carries other hosts still: this one's stream is over, srun goes on.
      agent_end e;
      if (!was_connected) {
        const auto said = text::last_line(s.output);
        e.how = "its agent never called back" + (said.empty() ? "" : "; srun said: " + said);
      }
      asio::post(io, [done = std::move(done), e] { done(e); });
      return;
    }
    s.waiting.push_back(std::move(done));
    s.process->stop(after_the_last_stream);
  }
};

srun_transport::srun_transport(asio::io_context& io, remote_launch options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}

srun_transport::~srun_transport() {
  for (auto& s : impl_->steps) {
    if (s->process) s->process->stop_now(at_once);
  }
}

void srun_transport::open(const agent_target& target, std::function<void(agent_stream)> opened,
                          std::function<void(std::string reason)> failed) {
  auto& self = *impl_;
  auto& entry = self.hosts[target.host];
  entry = impl::host_entry{};
  entry.name = target.info.name;
  entry.opened = std::move(opened);
  entry.failed = std::move(failed);
  if (self.agent_argv.empty()) {
    // The agent dials back instead of talking over its stdio.
    self.agent_argv = target.agent_argv;
    for (auto& word : self.agent_argv) {
      if (word == "--stdio") word = "--connect";
    }
  }
  self.to_launch.push_back(target.host);
  // Every host opened in this turn of the io_context goes into one step.
  if (!self.launch_posted) {
    self.launch_posted = true;
    asio::post(self.io, [weak = std::weak_ptr<impl>(impl_)] {
      if (auto s = weak.lock()) s->launch();
    });
  }
}

void srun_transport::close(std::uint32_t host, std::function<void(agent_end)> done) {
  impl_->close(host, std::move(done));
}

}  // namespace pm::srun
