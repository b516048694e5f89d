// pmd: the node agent. `pmd --local FD` serves one launcher over the Unix socket FD it inherited.
//
// The logic lives in pm::agent::agent (libpm/src/agent); this is its driver: one thread, one
// epoll loop over the channel socket, a signalfd (SIGCHLD, SIGTERM, SIGINT, SIGHUP) and one pidfd
// per running rank. pmd is a child subreaper, so every descendant of a rank that loses its parent
// becomes pmd's child, and the final sweep kills and reaps all of them. docs/agent.md.
//
// No PR_SET_PDEATHSIG: the closed channel is the launcher's death notice (it also works when the
// launcher is a thread of a bigger program, where the parent-death signal would fire when the
// spawning THREAD exits), and a SIGKILL from it would kill pmd before it could clear the ranks.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/agent.hpp"
#include "agent/children.hpp"
#include "pm/error.hpp"
#include "pm/version.hpp"
#include "transport/channel/socket.hpp"
#include "transport/local/spawner.hpp"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace {

namespace ag = pm::agent;
namespace ch = pm::channel;
using ch::owned_fd;
using clock_type = std::chrono::steady_clock;

constexpr const char* usage =
    "usage: pmd --local FD [--grace-ms MS]\n"
    "  the libpm node agent; started by the launcher, not by hand (docs/agent.md)\n";

struct rank_process {
  pid_t pid = 0;
  owned_fd pidfd;  // closed once the exit was seen (the leader stays a zombie)
};

class driver {
 public:
  driver(int sock, ag::options opts, std::optional<rlimit> nofile)
      : sock_(sock), machine_(opts), nofile_(nofile) {}

  int run();

 private:
  void watch(int fd, std::uint32_t events, std::uint64_t tag);
  void feed(const ag::event& e);
  void execute(ag::action& a);
  void do_spawn(const ch::rank_spec& spec);
  void on_channel_readable();
  void on_channel_writable();
  void on_signals();
  void on_pidfd(std::uint32_t rank);
  void flush();
  void lose_channel(const std::string& reason);
  int next_timeout_ms() const;

  static constexpr std::uint64_t tag_socket = ~std::uint64_t{0};
  static constexpr std::uint64_t tag_signals = ~std::uint64_t{0} - 1;

  owned_fd sock_;
  owned_fd epoll_;
  owned_fd sigfd_;
  ag::agent machine_;
  ch::inbox inbox_;
  ch::outbox outbox_;
  bool channel_open_ = true;
  bool want_write_ = false;
  bool reading_ = true;  // false after garbage: the stream cannot be resynchronised
  bool draining_ = false;
  owned_fd stdin_;  // attached to the spawn message being carried out
  std::unordered_map<std::uint32_t, rank_process> ranks_;
  std::unordered_map<std::uint32_t, std::vector<owned_fd>> output_;  // read ends, until `started`
  std::vector<std::pair<clock_type::time_point, std::uint64_t>> timers_;
  std::deque<ag::event> pending_;  // events that actions produced, fed after the current batch
  std::vector<ag::action> actions_;
  std::optional<int> exit_code_;
  std::optional<rlimit> nofile_;
};

// A shell's code for a program that cannot run: 127 not found, 126 otherwise.
int failure_code(const pm::error& e) {
  if (e.code() == pm::errc::not_found) return 127;
  if (e.code() == pm::errc::not_executable) return 126;
  return std::string_view(e.what()).ends_with(std::strerror(ENOENT)) ? 127 : 126;
}

pm::exit_status status_of(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return pm::exit_status::exited(info.si_status);
  return pm::exit_status::signaled(info.si_status);
}

void driver::watch(int fd, std::uint32_t events, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

void driver::feed(const ag::event& e) {
  pending_.push_back(e);
  // Only the outermost call drains: an action's result event is fed after the batch it came from.
  if (draining_) return;
  draining_ = true;
  while (!pending_.empty()) {
    ag::event next = std::move(pending_.front());
    pending_.pop_front();
    actions_.clear();
    machine_.handle(clock_type::now().time_since_epoch(), std::move(next), actions_);
    std::vector<ag::action> batch = std::move(actions_);
    for (auto& a : batch) execute(a);
  }
  draining_ = false;
  flush();
}

void driver::execute(ag::action& a) {
  if (auto* s = std::get_if<ag::spawn_rank>(&a)) {
    do_spawn(s->spec);
  } else if (auto* g = std::get_if<ag::signal_group>(&a)) {
    ::kill(-static_cast<pid_t>(g->pgid), g->signo);  // ESRCH: the group is empty already
  } else if (auto* m = std::get_if<ag::send>(&a)) {
    if (!channel_open_) return;
    std::vector<owned_fd> fds;
    if (const auto* st = std::get_if<ch::started>(&m->msg)) {
      if (auto it = output_.find(st->rank); it != output_.end()) {
        fds = std::move(it->second);
        output_.erase(it);
      }
    }
    outbox_.push(m->msg, std::move(fds));
  } else if (auto* t = std::get_if<ag::start_timer>(&a)) {
    timers_.emplace_back(clock_type::now() + t->after, t->timer);
  } else if (std::holds_alternative<ag::reap_orphans>(a)) {
    std::vector<pid_t> orphans = ag::list_children();
    std::erase_if(orphans, [&](pid_t pid) {
      for (const auto& [rank, r] : ranks_) {
        if (r.pid == pid) return true;  // rank leaders stay zombies until the sweep
      }
      return false;
    });
    ag::reap_ended(orphans);
  } else if (std::holds_alternative<ag::sweep>(a)) {
    // Rank groups got SIGKILL before this action, so reaping their leaders is safe now.
    // A child that leads a group (a rank, or a descendant that called setsid) takes its group
    // along; its pid cannot name another group while it is our child, alive or zombie.
    for (const pid_t pid : ag::list_children()) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    ag::reap_all_ended();
    for (auto& [rank, r] : ranks_) r.pidfd.reset();  // their exits are of no interest any more
    pending_.push_back(ag::swept{ag::list_children().size()});
  } else if (auto* x = std::get_if<ag::exit_agent>(&a)) {
    exit_code_ = x->code;
  }
}

void driver::do_spawn(const ch::rank_spec& spec) {
  // Output pipes: pmd keeps the write ends only until the rank has them.
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  std::string failure;
  if (spec.streams >= 1 && ::pipe2(out, O_CLOEXEC) != 0) failure = std::strerror(errno);
  if (failure.empty() && spec.streams == 2 && ::pipe2(err, O_CLOEXEC) != 0) {
    failure = std::strerror(errno);
  }
  owned_fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  if (!failure.empty()) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, 126, "cannot create pipes: " + failure});
    return;
  }
  pm::local::spawn_request req;
  req.path = spec.path;
  req.argv = spec.argv;
  req.env = spec.env;
  req.wdir = spec.wdir;
  req.stdin_fd = spec.stdin_from_launcher ? stdin_.get() : -1;
  req.stdout_fd = out_w.get();
  req.stderr_fd = spec.streams == 2 ? err_w.get() : out_w.get();
  req.nofile = nofile_;  // pmd raised its own limit; ranks get the one it was given
  pm::local::spawned_process res;
  try {
    res = pm::local::spawn(req);
  } catch (const pm::error& e) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, failure_code(e), e.what()});
    return;
  }
  rank_process& r = ranks_[spec.rank];
  r.pid = res.pid;
  r.pidfd.reset(res.pidfd);
  watch(r.pidfd.get(), EPOLLIN, spec.rank);
  std::vector<owned_fd> ends;
  if (out_r) ends.push_back(std::move(out_r));
  if (err_r) ends.push_back(std::move(err_r));
  output_[spec.rank] = std::move(ends);
  pending_.push_back(ag::rank_spawned{spec.rank, res.pid});
}

void driver::flush() {
  if (!channel_open_) return;
  std::string error;
  if (!outbox_.flush(sock_.get(), error)) {
    lose_channel(error);
    return;
  }
  const bool need = !outbox_.empty();
  if (need != want_write_) {
    want_write_ = need;
    watch(sock_.get(), (reading_ ? EPOLLIN : 0u) | (need ? EPOLLOUT : 0u), tag_socket);
  }
}

void driver::lose_channel(const std::string& reason) {
  if (!channel_open_) return;
  channel_open_ = false;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, sock_.get(), nullptr);
  output_.clear();  // read ends nobody will receive
  feed(ag::channel_lost{reason});
}

void driver::on_channel_readable() {
  ch::inbox::status st = ch::inbox::status::open;
  try {
    st = inbox_.receive(sock_.get());
    while (auto in = inbox_.next()) {
      if (std::holds_alternative<ch::spawn_request>(in->msg)) {
        stdin_ = in->fds.empty() ? owned_fd() : std::move(in->fds.front());
      }
      feed(ag::received{std::move(in->msg)});
      stdin_.reset();  // the ranks have their copies now
    }
  } catch (const pm::error& e) {
    // Say why, stop listening, and let the machine end the job.
    reading_ = false;
    feed(ag::bad_message{e.what()});
    return;
  }
  if (st == ch::inbox::status::closed) lose_channel("agent channel closed");
}

void driver::on_signals() {
  signalfd_siginfo si{};
  bool child = false;
  while (::read(sigfd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGCHLD) {
      child = true;
    } else {
      feed(ag::terminate_requested{static_cast<int>(si.ssi_signo)});
    }
  }
  if (child) feed(ag::child_changed{});
}

void driver::on_pidfd(std::uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.pidfd) return;
  siginfo_t info{};
  // WNOWAIT: the leader stays a zombie, so its pid (its group's id) cannot be reused.
  const int rc = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(it->second.pidfd.get()),
                          &info, WEXITED | WNOHANG | WNOWAIT);
  if (rc != 0 || info.si_pid == 0) {
    if (rc != 0) {  // reaped already (by the sweep): stop watching
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
      it->second.pidfd.reset();
    }
    return;
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
  it->second.pidfd.reset();
  feed(ag::rank_exited{rank, status_of(info)});
}

int driver::next_timeout_ms() const {
  if (timers_.empty()) return -1;
  auto first = timers_.front().first;
  for (const auto& t : timers_) first = std::min(first, t.first);
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(first - clock_type::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

int driver::run() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  sigfd_.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!epoll_ || !sigfd_) {
    std::fprintf(stderr, "pmd: cannot set up its event loop: %s\n", std::strerror(errno));
    return 2;
  }
  ::fcntl(sock_.get(), F_SETFL, ::fcntl(sock_.get(), F_GETFL) | O_NONBLOCK);
  ::fcntl(sock_.get(), F_SETFD, FD_CLOEXEC);
  watch(sock_.get(), EPOLLIN, tag_socket);
  watch(sigfd_.get(), EPOLLIN, tag_signals);

  epoll_event events[64];
  while (!exit_code_) {
    const int n = ::epoll_wait(epoll_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "pmd: epoll_wait: %s\n", std::strerror(errno));
      feed(ag::terminate_requested{SIGTERM});  // still clear everything
    }
    for (int i = 0; i < n && !exit_code_; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == tag_socket) {
        if ((events[i].events & EPOLLOUT) != 0) flush();
        if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && channel_open_ &&
            reading_) {
          on_channel_readable();
        }
      } else if (tag == tag_signals) {
        on_signals();
      } else {
        on_pidfd(static_cast<std::uint32_t>(tag));
      }
    }
    const auto now = clock_type::now();
    std::vector<std::uint64_t> due;
    std::erase_if(timers_, [&](const auto& t) {
      if (t.first > now) return false;
      due.push_back(t.second);
      return true;
    });
    for (const auto id : due) feed(ag::timer_fired{id});
  }
  // Last words (shutdown_done or an error) before exiting; bounded, the launcher may be gone.
  const auto deadline = clock_type::now() + std::chrono::seconds(2);
  while (channel_open_ && !outbox_.empty() && clock_type::now() < deadline) {
    std::string error;
    if (!outbox_.flush(sock_.get(), error)) break;
    if (!outbox_.empty()) ::usleep(1000);
  }
  return *exit_code_;
}

}  // namespace

int main(int argc, char** argv) {
  int fd = -1;
  ag::options opts;
  opts.pid = ::getpid();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--local" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 65535) {
        std::fprintf(stderr, "pmd: --local needs a descriptor number, not '%s'\n", argv[i]);
        return 2;
      }
      fd = static_cast<int>(v);
    } else if (a == "--grace-ms" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 3'600'000) {
        std::fprintf(stderr, "pmd: --grace-ms needs milliseconds, not '%s'\n", argv[i]);
        return 2;
      }
      opts.lost_grace = std::chrono::milliseconds(v);
    } else if (a == "--version") {
      std::printf("pmd %s (agent protocol %u)\n", PM_VERSION_STRING, pm::channel::protocol_version);
      return 0;
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "pmd: unknown argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (fd < 0) {
    std::fprintf(stderr, "pmd: --local FD is required\n%s", usage);
    return 2;
  }
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
    std::fprintf(stderr, "pmd: descriptor %d is not a stream socket\n", fd);
    return 2;
  }
  // Orphaned descendants of the ranks reparent to pmd, not to init: nothing escapes the sweep.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::fprintf(stderr, "pmd: cannot become a child subreaper: %s\n", std::strerror(errno));
    return 2;
  }
  // Its own process group: the terminal's ^C / ^Z go to the launcher, which decides.
  ::setpgid(0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  // One pidfd per running rank: take the hard limit of descriptors for pmd, and give the ranks
  // the limit pmd was started with.
  std::optional<rlimit> nofile;
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    nofile = lim;
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) nofile.reset();
  }
  try {
    driver d(fd, opts, nofile);
    return d.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmd: %s\n", e.what());
    return 2;
  }
}
