#include "transport/local/local_transport.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include "link/socket.hpp"
#include "pm/env.hpp"
#include "pm/error.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "sys/watched_process.hpp"
#include "transport/local/nofile_limit.hpp"

extern char** environ;

namespace pm::local {

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::string default_agent_path() {
  if (const char* env = std::getenv("PM_AGENT"); env != nullptr && *env != '\0') {
    if (!executable(env)) {
      throw error(errc::launch, std::string("PM_AGENT names '") + env +
                                    "', which is not an "
                                    "executable file");
    }
    return env;
  }
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back(exe.parent_path());
  }
  // The object holding libpm (libpm.so when shared; the executable when static).
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&default_agent_path), &info) != 0 &&
      info.dli_fname != nullptr) {
    const fs::path lib = fs::weakly_canonical(info.dli_fname, ec).parent_path();
    if (!lib.empty() && (dirs.empty() || dirs.front() != lib)) dirs.push_back(lib);
  }
  std::vector<fs::path> candidates;
  for (const auto& d : dirs) {
    candidates.push_back(d / "pmd");
    candidates.push_back(d.parent_path() / "libexec" / "pmd");
    candidates.push_back(d.parent_path() / "bin" / "pmd");
  }
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) candidates.push_back(fs::path(dir) / "pmd");
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const auto& c : candidates) {
    if (executable(c)) return c.string();
  }
  std::string where = dirs.empty() ? std::string("$PATH") : dirs.front().string() + ", $PATH";
  throw error(errc::launch, "cannot find the agent program pmd (looked in " + where +
                                "); set PM_AGENT to its path");
}

namespace {

// pmd with one end of a new socket pair as its stdin and stdout; `ours` gets the other end.
// `env`: its environment; nullopt: this process's (an empty one is given as empty: an embedder
// that gave the job an empty environment must not see its own reach the ranks).
sys::spawned_process spawn_agent(const std::string& path, std::vector<std::string> argv,
                                 std::optional<std::vector<std::string>> env,
                                 link::owned_fd& ours) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw error(errc::system,
                std::string("cannot create the agent's socket: ") + std::strerror(errno));
  }
  ours.reset(sv[0]);
  link::owned_fd theirs(sv[1]);
  sys::spawn_request req;
  req.path = path;
  req.argv = std::move(argv);
  if (env) {
    req.env = std::move(*env);
  } else {
    for (char** e = environ; *e != nullptr; ++e) req.env.emplace_back(*e);
  }
  // The launcher may have raised its descriptor limit: pmd starts with the one it was given,
  // and hands that on to the ranks.
  req.nofile = original_nofile_limit();
  // pmd speaks the link on its stdin and stdout, the same socket here; its stderr is ours, for
  // last-resort diagnostics.
  req.stdin_fd = theirs.get();
  req.stdout_fd = theirs.get();
  req.stderr_fd = STDERR_FILENO;
  try {
    return pm::sys::spawn(req);  // `theirs` closes on return: only pmd holds that end now
  } catch (const pm::error& e) {
    throw error(errc::launch, std::string("cannot start the agent: ") + e.what());
  }
}

std::string hex_nonce(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace

}  // namespace pm::local

namespace pm {

struct early_agent::impl {
  std::string path;
  std::uint64_t nonce = 0;
  sys::spawned_process process;
  int fd = -1;  // our end of the socket pair; -1 once adopted
};

// What local_transport needs of an early_agent beyond its public face.
struct early_agent_access {
  static early_agent::impl& of(early_agent& a) noexcept { return *a.impl_; }
};

early_agent::early_agent(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

std::shared_ptr<early_agent> early_agent::start(const std::string& agent_path) {
  try {
    const std::string path = agent_path.empty() ? local::default_agent_path() : agent_path;
    std::uint64_t nonce = 0;
    if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) return nullptr;
    // This process's environment without an outer job's identity (OMPI_COMM_WORLD_*, PMIX_*,
    // SLURM_STEP_*, ...), as the job's base environment would have it: pmd's own PMIx server must
    // not see the identity of a job the caller runs inside.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry = *e;
      if (!is_outer_job_identity(entry.substr(0, entry.find('=')))) env.emplace_back(entry);
    }
    link::owned_fd ours;
    auto p = std::make_unique<impl>();
    p->process = local::spawn_agent(path, {path, "--stdio", "--nonce", local::hex_nonce(nonce)},
                                    std::move(env), ours);
    p->path = path;
    p->nonce = nonce;
    p->fd = ours.release();
    return std::shared_ptr<early_agent>(new early_agent(std::move(p)));
  } catch (const pm::error&) {
    return nullptr;  // the job's own start finds the same problem and names it
  }
}

early_agent::~early_agent() {
  if (impl_->fd < 0) return;  // adopted: the job's transport ends it
  sys::send_signal(impl_->process.pidfd, SIGKILL);
  sys::wait_exit(impl_->process.pidfd);
  ::close(impl_->process.pidfd);
  ::close(impl_->fd);
}

std::uint64_t early_agent::nonce() const noexcept {
  return impl_->nonce;
}
std::int64_t early_agent::pid() const noexcept {
  return impl_->process.pid;
}
const std::string& early_agent::path() const noexcept {
  return impl_->path;
}
bool early_agent::adopted() const noexcept {
  return impl_->fd < 0;
}

}  // namespace pm

namespace pm::local {

// One pmd per host index this transport started (normally one: this machine).
struct local_transport::impl {
  explicit impl(asio::io_context& context) : io(context) {}

  struct agent_process {
    std::unique_ptr<sys::watched_process> process;
    std::string how;  // once exited: "" when it exited 0
    std::vector<std::function<void(agent_end)>> waiting;
  };

  asio::io_context& io;
  local_transport_options opts;
  std::unordered_map<std::uint32_t, agent_process> agents;

  void on_exit(std::uint32_t host, const sys::exit_check& end) {
    auto& a = agents[host];
    if (!(end.status && end.status->success())) {
      a.how = "the agent pmd (pid " + std::to_string(a.process->pid()) + ") " + sys::describe(end);
    }
    for (auto& d : a.waiting) asio::post(io, [d = std::move(d), how = a.how] { d({how, false}); });
    a.waiting.clear();
  }
};

local_transport::local_transport(boost::asio::io_context& io, local_transport_options options)
    : impl_(std::make_shared<impl>(io)) {
  impl_->opts = std::move(options);
}

local_transport::~local_transport() {
  // Nothing may outlive the transport: a pmd still running is given the time its own clean-up
  // takes (its socket is closed by now or soon, and it saw end-of-file), then SIGKILL (for a pmd
  // that hangs), and is reaped here, blocking briefly.
  for (auto& [host, a] : impl_->agents) {
    if (a.process) a.process->stop_now({.first_signal = 0, .grace = std::chrono::seconds(2)});
  }
}

void local_transport::open(const agent_target& target, std::function<void(agent_stream)> opened,
                           std::function<void(std::string reason)> failed) {
  auto& io = impl_->io;
  try {
    std::vector<std::string> argv = target.agent_argv;
    if (argv.empty()) argv.push_back("pmd");
    std::string path = impl_->opts.agent_path.empty() ? argv.front() : impl_->opts.agent_path;
    if (path.find('/') == std::string::npos) path = default_agent_path();
    argv.front() = path;
    link::owned_fd ours;
    sys::spawned_process res;
    auto* early = impl_->opts.early ? &early_agent_access::of(*impl_->opts.early) : nullptr;
    if (early != nullptr && early->fd >= 0 && target.info.local &&
        argv ==
            std::vector<std::string>{early->path, "--stdio", "--nonce", hex_nonce(early->nonce)}) {
      // Started before the job was known, with the command line this job asks for (the job took
      // its nonce): adopted, it is this transport's to watch and end from now on.
      res = early->process;
      ours.reset(early->fd);
      early->fd = -1;
    } else {
      res = spawn_agent(path, std::move(argv), target.environment, ours);
    }
    auto& a = impl_->agents[target.host];
    a = impl::agent_process{};
    a.process = std::make_unique<sys::watched_process>(io, res);
    a.process->on_exit([weak = std::weak_ptr<impl>(impl_), host = target.host](const auto& end) {
      if (auto self = weak.lock()) self->on_exit(host, end);
    });
    agent_stream s;
    s.read_fd = ours.release();
    s.write_fd = s.read_fd;
    s.socket = true;
    s.pid = res.pid;
    asio::post(io, [opened = std::move(opened), s] { opened(s); });
  } catch (const pm::error& e) {
    asio::post(io, [failed = std::move(failed), what = std::string(e.what())] { failed(what); });
  }
}

void local_transport::close(std::uint32_t host, std::function<void(agent_end)> done) {
  auto it = impl_->agents.find(host);
  if (it == impl_->agents.end()) {
    asio::post(impl_->io, [done = std::move(done)] { done({}); });
    return;
  }
  auto& a = it->second;
  if (a.process->ended()) {
    asio::post(impl_->io, [done = std::move(done), how = a.how] { done({how, false}); });
    return;
  }
  a.waiting.push_back(std::move(done));
  // pmd exits on its own once its link closed and its ranks are cleared (the grace of its stop
  // sequence at most); a pmd that does not is killed after that and a margin.
  a.process->stop({.first_signal = 0, .grace = impl_->opts.kill_after});
}

std::int64_t local_transport::agent_pid(std::uint32_t host) const noexcept {
  auto it = impl_->agents.find(host);
  return it == impl_->agents.end() ? 0 : it->second.process->pid();
}

}  // namespace pm::local
