// pmd: the node agent. `pmd --stdio --nonce N` serves one launcher over its stdin and stdout: a
// Unix socket from a launcher on the same machine (output pipes then travel as descriptors), or
// the pipes of an ssh session (output then travels as data frames of the link). `pmd --connect
// --nonce N`, started by the launcher's srun step, dials the launcher back over TCP with the job's
// token from its environment and serves the link on that socket (docs/slurm.md).
//
// The logic lives in pm::agent::agent (libpm/src/agent) and the link's in pm::link::endpoint; this
// is their driver: one thread, one epoll loop over the link's descriptors, a signalfd (SIGCHLD,
// SIGTERM, SIGINT, SIGHUP), one pidfd per running rank and, when output is forwarded, the ranks'
// output pipes. pmd is a child subreaper, so every descendant of a rank that loses its parent
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/agent.hpp"
#include "agent/children.hpp"
#include "agent/host_facts.hpp"
#include "agent/rank_env.hpp"
#include "child_agents.hpp"
#include "link/endpoint.hpp"
#include "link/socket.hpp"
#include "pm/error.hpp"
#include "pm/version.hpp"
#include "pmix_gateway.hpp"
#include "sys/executable.hpp"
#include "sys/pidfd.hpp"
#include "sys/spawner.hpp"
#include "transport/srun/connect_back.hpp"

extern char** environ;

namespace {

namespace ag = pm::agent;
namespace ln = pm::link;
using ln::owned_fd;
using clock_type = std::chrono::steady_clock;

constexpr const char* usage =
    "usage: pmd --stdio --nonce HEX [--grace-ms MS] [--hello-ms MS]\n"
    "       pmd --connect --nonce HEX [--grace-ms MS] [--hello-ms MS]   (dial back: "
    "PM_AGENT_ADDRS,\n"
    "                         PM_AGENT_PORT, PM_AGENT_TOKEN or PM_AGENT_TOKEN_FILE)\n"
    "  the libpm node agent; started by the launcher, not by hand (docs/agent.md)\n"
    "  --hello-ms MS  how long to wait for the launcher's hello (default 20000, the launcher's\n"
    "                 own hello timeout; 300000 on a socket of a launcher on this machine,\n"
    "                 which may start pmd before it knows the job; 0: for ever)\n";

// The launcher's hello must come this long after pmd started (--hello-ms): as long as the
// launcher waits for pmd's (remote_launch::hello_timeout). Over ssh (pipes) the launcher wrote
// its hello before pmd even ran, so only a stream that is not a launcher's (a silent pipe, a
// terminal) ever meets the bound. A launcher on this machine (a socket pair) may start pmd early,
// before it has read the allocation and mapped the job (pm::early_agent), and write its hello
// only then: it gets longer (a dead launcher closes the socket anyway, which ends pmd at once).
constexpr std::chrono::milliseconds default_hello_bound{20000};
constexpr std::chrono::milliseconds default_socket_hello_bound{300000};

struct rank_process {
  pid_t pid = 0;
  owned_fd pidfd;  // closed once the exit was seen (the leader stays a zombie)
};

// A rank's stdin fed from the launcher's input frames (remote agents): the write end of its pipe.
struct input_pipe {
  owned_fd fd;
  std::string pending;   // received, not yet written (at most the link's window)
  bool closing = false;  // input_closed came: close once pending is written
  bool watched = false;
};

// A forwarded output pipe of a rank (remote agents: output travels as data frames).
struct output_pipe {
  owned_fd fd;
  std::uint64_t bytes = 0;
  bool watched = false;
};

class driver {
 public:
  driver(ln::stream_fds link, ag::options opts, std::uint64_t nonce,
         std::chrono::milliseconds hello_bound, std::optional<rlimit> nofile)
      : link_(link),
        machine_(std::move(opts)),
        ep_(endpoint_options(nonce, hello_bound)),
        nofile_(nofile) {}

  int run();

 private:
  static ln::endpoint_options endpoint_options(std::uint64_t nonce,
                                               std::chrono::milliseconds hello_bound) {
    ln::endpoint_options o;
    o.self = ln::role::agent;
    o.nonce = nonce;
    o.hello_timeout = hello_bound;
    return o;
  }
  ln::link_time now() const { return clock_type::now().time_since_epoch(); }
  void watch(int fd, std::uint32_t events, std::uint64_t tag);
  void unwatch(int fd) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }
  void feed(ag::event e);
  void execute(ag::action& a);
  void do_spawn(const ag::process_spec& spec);
  void on_link_readable();
  void on_link_events(std::vector<ln::link_event>& events);
  void on_signals();
  void on_pidfd(std::uint32_t rank);
  void on_output(std::uint32_t rank, pm::output_stream stream);
  void on_input(std::uint32_t rank, std::span<const std::uint8_t> bytes);
  void write_input(std::uint32_t rank);
  void close_input(std::uint32_t rank);
  void resume_output();
  void flush(bool writable = false);
  void lose_link(const std::string& reason);
  int next_timeout_ms() const;
  void start_pmix(const ln::pmix_job& job, std::vector<std::string> executables);
  void send_now(const ln::message& m);
  void on_child_message(ln::message& m);

  // epoll tags: the kind in the top byte, the rank below.
  static constexpr std::uint64_t tag_link_in = 1ull << 56;
  static constexpr std::uint64_t tag_link_out = 2ull << 56;
  static constexpr std::uint64_t tag_signals = 3ull << 56;
  static constexpr std::uint64_t tag_pidfd = 4ull << 56;
  static constexpr std::uint64_t tag_stdout = 5ull << 56;
  static constexpr std::uint64_t tag_stderr = 6ull << 56;
  static constexpr std::uint64_t tag_stdin = 7ull << 56;
  static constexpr std::uint64_t tag_pmix = 8ull << 56;

  ln::stream_fds link_;
  owned_fd epoll_;
  owned_fd sigfd_;
  ag::agent machine_;
  ln::endpoint ep_;
  ln::stream_reader reader_;
  ln::stream_writer writer_;
  bool link_open_ = true;
  bool want_write_ = false;  // the link's write end is full: write again when it is writable
  // Capacity the ranks' output pipes may still be given beyond the default (F_SETPIPE_SZ counts
  // against the user's pipe-user-pages-soft, 64 MiB, beyond which new pipes get one page).
  std::size_t pipe_budget_ = std::size_t{16} << 20;
  bool draining_ = false;
  owned_fd stdin_;  // attached to the spawn message being carried out
  std::unordered_map<std::uint32_t, rank_process> ranks_;
  std::unordered_map<std::uint32_t, std::vector<owned_fd>> pipes_to_pass_;  // until `started`
  std::unordered_map<std::uint64_t, output_pipe> forwarded_;  // key: rank << 1 | (stream == err)
  std::vector<std::uint64_t> paused_;                         // forwarded pipes waiting for credit
  std::unordered_map<std::uint32_t, input_pipe> inputs_;      // ranks whose stdin comes as frames
  std::vector<std::pair<clock_type::time_point, std::uint64_t>> timers_;
  std::deque<ag::event> pending_;  // events that actions produced, fed after the current batch
  std::vector<ag::action> actions_;
  std::optional<int> exit_code_;
  std::optional<rlimit> nofile_;
  std::unique_ptr<pmd::pmix_gateway> pmix_;      // when the job's ranks get PMIx
  std::unique_ptr<pmd::child_agents> children_;  // the tree launch: agents this one started
  // Forwarded output is read through this; not zero-filled, so that a pmd whose ranks' output
  // goes straight to the launcher (every local job) never touches it.
  static constexpr std::size_t buffer_size = std::size_t{256} << 10;
  std::unique_ptr<char[]> buffer_{new char[buffer_size]};
};

// A shell's code for a program that cannot run: 127 not found, 126 otherwise.
int failure_code(const pm::error& e) {
  if (e.code() == pm::errc::not_found) return 127;
  if (e.code() == pm::errc::not_executable) return 126;
  const std::string_view what = e.what();
  return what.ends_with(std::strerror(ENOENT)) ||
                 what.find("not found") != std::string_view::npos ||
                 what.find("does not exist") != std::string_view::npos
             ? 127
             : 126;
}

std::uint64_t pipe_key(std::uint32_t rank, pm::output_stream s) {
  return (std::uint64_t{rank} << 1) | (s == pm::output_stream::err ? 1 : 0);
}

void driver::watch(int fd, std::uint32_t events, std::uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

void driver::feed(ag::event e) {
  pending_.push_back(std::move(e));
  // Only the outermost call drains: an action's result event is fed after the batch it came from.
  if (draining_) return;
  draining_ = true;
  while (!pending_.empty()) {
    ag::event next = std::move(pending_.front());
    pending_.pop_front();
    actions_.clear();
    machine_.handle(now(), std::move(next), actions_);
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
    if (!link_open_) return;
    std::vector<owned_fd> fds;
    if (const auto* st = std::get_if<ln::started>(&m->msg)) {
      if (auto it = pipes_to_pass_.find(st->rank); it != pipes_to_pass_.end()) {
        fds = std::move(it->second);
        pipes_to_pass_.erase(it);
      }
    }
    const auto at = ep_.send(m->msg, static_cast<std::uint32_t>(fds.size()));
    writer_.attach(at, std::move(fds));
  } else if (auto* t = std::get_if<ag::start_timer>(&a)) {
    timers_.emplace_back(clock_type::now() + t->after, t->timer);
  } else if (std::holds_alternative<ag::reap_orphans>(a)) {
    std::vector<pid_t> orphans = ag::list_children();
    std::erase_if(orphans, [&](pid_t pid) {
      if (children_ && children_->owns(pid)) return true;  // reaped through their pidfds
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
    if (children_ && !children_->empty()) {
      // Child agents' ssh end by themselves once their stdin is closed (their agents clear
      // their own ranks first); they still count as children left, so the sweep comes back.
      children_->end_all();
      std::vector<pid_t> others = ag::list_children();
      std::erase_if(others, [&](pid_t pid) { return children_->owns(pid); });
      for (const pid_t pid : others) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      ag::reap_ended(others);
    } else {
      for (const pid_t pid : ag::list_children()) {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      ag::reap_all_ended();
    }
    for (auto& [rank, r] : ranks_) r.pidfd.reset();  // their exits are of no interest any more
    pending_.push_back(ag::swept{ag::list_children().size()});
  } else if (auto* x = std::get_if<ag::exit_agent>(&a)) {
    exit_code_ = x->code;
  }
}

void driver::do_spawn(const ag::process_spec& spec) {
  // Output pipes: pmd keeps the write ends only until the rank has them.
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  std::string failure;
  if (spec.streams >= 1 && ::pipe2(out, O_CLOEXEC) != 0) failure = std::strerror(errno);
  if (failure.empty() && spec.streams == 2 && ::pipe2(err, O_CLOEXEC) != 0) {
    failure = std::strerror(errno);
  }
  owned_fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  // Forwarded output: larger pipes, so that pmd reads (and frames) more per wake-up, while the
  // budget lasts (best effort).
  for (const int fd : {out_r.get(), err_r.get()}) {
    constexpr std::size_t bigger = std::size_t{256} << 10;
    if (fd < 0 || !spec.forward_output || pipe_budget_ < bigger) continue;
    if (::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(bigger)) >= 0) pipe_budget_ -= bigger;
  }
  if (!failure.empty()) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, 126, "cannot create pipes: " + failure});
    return;
  }
  pm::sys::spawn_request req;
  req.env = spec.environment();  // composed now, for this rank only
  std::string wdir = spec.wdir;
  if (spec.wdir_may_fall_back && !wdir.empty()) {
    struct stat st {};
    if (::stat(wdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      const auto home = ag::find_variable(req.env, "HOME");
      wdir = home.empty() ? std::string("/") : std::string(home);
    }
  }
  try {
    // The program is found on this host, in the rank's own PATH and working directory.
    const auto path = ag::find_variable(req.env, "PATH");
    req.path = pm::sys::resolve_executable(
        spec.argv.front(), path.empty() ? std::string_view("/usr/local/bin:/usr/bin:/bin") : path,
        wdir);
  } catch (const pm::error& e) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, failure_code(e), e.what()});
    return;
  }
  req.argv = spec.argv;
  if (pmix_) {
    // The ranks' PMIx server (started when one connects) wins over the job's variables; Open
    // MPI yields when idle on an oversubscribed host, as under mpirun, unless the user said.
    std::vector<std::string> extra = pmix_->rank_env(spec.rank);
    const auto unset = [&](std::string_view name) {
      return ag::find_variable(req.env, name).empty();
    };
    if (pmix_->oversubscribed() && unset("OMPI_MCA_mpi_yield_when_idle")) {
      extra.emplace_back("OMPI_MCA_mpi_yield_when_idle=1");
    }
    // Without RDMA devices Open MPI ends up with ob1 over self, vader and tcp; naming them spares
    // each rank opening (and probing) every other transport component: MPI_Init about 2x faster
    // (docs/pmix.md). The user's own choice, in the environment or -mca, wins.
    if (pmix_->tcp_only_host()) {
      if (unset("OMPI_MCA_pml")) extra.emplace_back("OMPI_MCA_pml=ob1");
      if (unset("OMPI_MCA_btl")) extra.emplace_back("OMPI_MCA_btl=self,vader,tcp");
    }
    req.env = ag::compose_rank_environment(req.env, extra, {}, {});
  }
  req.wdir = wdir;
  // Stdin as input frames (no descriptor came with the spawn): a pipe whose write end pmd feeds.
  owned_fd in_r, in_w;
  if (spec.stdin_from_launcher && !stdin_) {
    int in[2];
    if (::pipe2(in, O_CLOEXEC) != 0) {
      pending_.push_back(ag::rank_spawn_failed{
          spec.rank, 126, std::string("cannot create pipes: ") + std::strerror(errno)});
      return;
    }
    in_r.reset(in[0]);
    in_w.reset(in[1]);
    ::fcntl(in_w.get(), F_SETFL, ::fcntl(in_w.get(), F_GETFL) | O_NONBLOCK);
  }
  req.stdin_fd = !spec.stdin_from_launcher ? -1 : in_r ? in_r.get() : stdin_.get();
  req.stdout_fd = out_w.get();
  req.stderr_fd = spec.streams == 2 ? err_w.get() : out_w.get();
  req.nofile = nofile_;               // pmd raised its own limit; ranks get the one it was given
  req.parent_death_signal = SIGKILL;  // a SIGKILLed pmd leaves no rank behind, not even briefly
  pm::sys::spawned_process res;
  try {
    res = pm::sys::spawn(req);
  } catch (const pm::error& e) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, failure_code(e), e.what()});
    return;
  }
  if (in_w) inputs_[spec.rank].fd = std::move(in_w);
  rank_process& r = ranks_[spec.rank];
  r.pid = res.pid;
  r.pidfd.reset(res.pidfd);
  watch(r.pidfd.get(), EPOLLIN, tag_pidfd | spec.rank);
  if (spec.forward_output) {
    const auto keep = [&](owned_fd fd, pm::output_stream s) {
      if (!fd) return;
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
      auto& p = forwarded_[pipe_key(spec.rank, s)];
      p.fd = std::move(fd);
      p.watched = true;
      watch(p.fd.get(), EPOLLIN,
            (s == pm::output_stream::out ? tag_stdout : tag_stderr) | spec.rank);
    };
    keep(std::move(out_r), pm::output_stream::out);
    keep(std::move(err_r), pm::output_stream::err);
  } else {
    std::vector<owned_fd> ends;
    if (out_r) ends.push_back(std::move(out_r));
    if (err_r) ends.push_back(std::move(err_r));
    pipes_to_pass_[spec.rank] = std::move(ends);
  }
  if (pmix_) pmix_->rank_started(spec.rank, res.pid);
  pending_.push_back(ag::rank_spawned{spec.rank, res.pid});
}

// A forwarded pipe is readable: send what the link's credit allows; at end-of-stream, say so.
void driver::on_output(std::uint32_t rank, pm::output_stream stream) {
  const auto key = pipe_key(rank, stream);
  auto it = forwarded_.find(key);
  if (it == forwarded_.end() || !it->second.fd) return;
  auto& p = it->second;
  for (int round = 0; round < 4; ++round) {
    if (!link_open_) return;
    const auto credit = ep_.credit();
    if (credit == 0) {
      // Back-pressure: the rank blocks in write() until the launcher consumed its output.
      if (p.watched) {
        unwatch(p.fd.get());
        p.watched = false;
        paused_.push_back(key);
      }
      return;
    }
    const auto want = std::min<std::size_t>(buffer_size, credit);
    const ssize_t n = ::read(p.fd.get(), buffer_.get(), want);
    if (n > 0) {
      p.bytes += static_cast<std::uint64_t>(n);
      ep_.send_output(
          rank, stream,
          {reinterpret_cast<const std::uint8_t*>(buffer_.get()), static_cast<std::size_t>(n)});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // End of stream (or a read error: nothing more will come).
    unwatch(p.fd.get());
    const auto bytes = p.bytes;
    forwarded_.erase(it);
    feed(ag::output_ended{rank, stream, bytes});
    return;
  }
}

// Stdin bytes for a rank: written to its pipe as far as it takes them; the rest waits for
// EPOLLOUT. Acknowledged once written (or dropped: a rank that is gone or closed its stdin), so the
// launcher sends at most the link's window ahead of what the rank reads.
void driver::on_input(std::uint32_t rank, std::span<const std::uint8_t> bytes) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end() || !it->second.fd) {
    ep_.acknowledge(bytes.size());
    return;
  }
  it->second.pending.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  write_input(rank);
}

void driver::write_input(std::uint32_t rank) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end()) return;
  auto& in = it->second;
  while (in.fd && !in.pending.empty()) {
    const ssize_t n = ::write(in.fd.get(), in.pending.data(), in.pending.size());
    if (n > 0) {
      ep_.acknowledge(static_cast<std::uint64_t>(n));
      in.pending.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!in.watched) {
        in.watched = true;
        watch(in.fd.get(), EPOLLOUT, tag_stdin | rank);
      }
      return;
    }
    // EPIPE: the rank closed its stdin or ended; what it did not read is dropped.
    ep_.acknowledge(in.pending.size());
    in.pending.clear();
    if (in.watched) unwatch(in.fd.get());
    in.fd.reset();
  }
  if (in.pending.empty()) {
    if (in.watched) {
      unwatch(in.fd.get());
      in.watched = false;
    }
    if (in.closing) in.fd.reset();  // end of input: the rank reads end-of-file
  }
}

void driver::close_input(std::uint32_t rank) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end()) return;
  it->second.closing = true;
  write_input(rank);
}

void driver::resume_output() {
  auto keys = std::move(paused_);
  paused_.clear();
  for (const auto key : keys) {
    auto it = forwarded_.find(key);
    if (it == forwarded_.end() || !it->second.fd || it->second.watched) continue;
    it->second.watched = true;
    const auto rank = static_cast<std::uint32_t>(key >> 1);
    const bool err = (key & 1) != 0;
    watch(it->second.fd.get(), EPOLLIN, (err ? tag_stderr : tag_stdout) | rank);
  }
}

// Writes what the link has queued. `writable`: epoll said the write end takes bytes again. While
// the end is known to be full, only that event writes: every other attempt failed with EAGAIN (a
// host's pmd made 7,214 such writes for 64 MiB of output behind ssh).
void driver::flush(bool writable) {
  if (!link_open_) return;
  if (want_write_ && !writable) return;
  std::string error;
  if (!writer_.flush(link_, ep_, error)) {
    lose_link("the link broke: " + error);
    return;
  }
  if (children_) children_->resume();
  const bool need = !ep_.output().empty();
  if (need != want_write_) {
    want_write_ = need;
    // A separate write end (ssh's stdout) stays watched, edge-triggered, from the start: no
    // epoll_ctl each time it fills and drains.
    if (link_.write_fd == link_.read_fd) {
      watch(link_.read_fd, EPOLLIN | (need ? EPOLLOUT : 0u), tag_link_in);
    }
  }
}

void driver::lose_link(const std::string& reason) {
  if (!link_open_) return;
  link_open_ = false;
  // Before the launcher's hello, pmd has no launcher to tell: one line on its stderr (garbage on
  // its input, another job's nonce, a silent input past --hello-ms, an input that ended).
  if (!ep_.greeted()) std::fprintf(stderr, "pmd: %s\n", reason.c_str());
  unwatch(link_.read_fd);
  if (link_.write_fd != link_.read_fd) unwatch(link_.write_fd);
  pipes_to_pass_.clear();  // read ends nobody will receive
  // Forwarded output has nowhere to go now. A pipe left in the epoll set would wake epoll_wait at
  // once, forever, as soon as a rank wrote (on_output reads nothing without a link): pmd spun
  // through the grace. The ranks block in write() until the stop sequence ends them.
  for (auto& [key, p] : forwarded_) {
    if (p.watched && p.fd) unwatch(p.fd.get());
    p.watched = false;
  }
  paused_.clear();
  if (pmix_) pmix_->release_aborts();
  if (children_) children_->end_all();  // their agents see their launcher gone too
  feed(ag::channel_lost{reason});
}

void driver::on_link_events(std::vector<ln::link_event>& events) {
  for (auto& e : events) {
    if (!link_open_) return;
    if (auto* m = std::get_if<ln::message_in>(&e)) {
      std::vector<owned_fd> fds;
      try {
        fds = reader_.take_fds(m->fds, ln::type_name(m->msg));
      } catch (const pm::error& err) {
        feed(ag::bad_message{err.what()});
        lose_link(err.what());
        return;
      }
      if (const auto* j = std::get_if<ln::job_setup>(&m->msg)) {
        // The launcher's heartbeats and silence timeout, from now on (remote hosts).
        ep_.set_heartbeats(now(), std::chrono::milliseconds(j->heartbeat_ms),
                           std::chrono::milliseconds(j->silence_ms));
        if (j->pmix && !pmix_) {
          try {
            std::vector<std::string> executables;
            for (const auto& app : j->apps) executables.push_back(app.argv.front());
            start_pmix(*j->pmix, std::move(executables));
          } catch (const std::exception& err) {
            feed(ag::bad_message{err.what()});
            return;
          }
        }
      }
      if (std::holds_alternative<ln::child_open>(m->msg) ||
          std::holds_alternative<ln::child_data>(m->msg) ||
          std::holds_alternative<ln::child_close>(m->msg)) {
        on_child_message(m->msg);
        continue;
      }
      if (const auto* f = std::get_if<ln::fence_result>(&m->msg)) {
        if (pmix_) pmix_->fence_done(*f);
        continue;
      }
      if (const auto* q = std::get_if<ln::modex_request>(&m->msg)) {
        if (pmix_) {
          pmix_->serve_modex(*q);
        } else {
          send_now(ln::modex_reply{q->id, false, {}});
        }
        continue;
      }
      if (const auto* a = std::get_if<ln::modex_reply>(&m->msg)) {
        if (pmix_) pmix_->modex_done(*a);
        continue;
      }
      if (const auto* t = std::get_if<ln::proc_table_reply>(&m->msg)) {
        if (pmix_) pmix_->proc_table_done(*t);
        continue;
      }
      if (const auto* n = std::get_if<ln::pmix_notify>(&m->msg)) {
        if (pmix_) pmix_->notify(*n);
        continue;
      }
      if (const auto* r = std::get_if<ln::pmix_spawn_reply>(&m->msg)) {
        if (pmix_) pmix_->spawn_done(*r);
        continue;
      }
      if (const auto* r = std::get_if<ln::pmix_data_reply>(&m->msg)) {
        if (pmix_) pmix_->data_done(*r);
        continue;
      }
      // A spawned job: its namespace first (its ranks' spawn requests follow), then its apps.
      if (const auto* j = std::get_if<ln::job_add>(&m->msg); j && pmix_) pmix_->add_job(*j);
      if (const auto* sig = std::get_if<ln::signal_request>(&m->msg); sig && pmix_) {
        // The job is being stopped: a rank blocked in PMIx_Abort may return once signalled.
        const std::vector<std::uint32_t> ranks = sig->ranks;
        feed(ag::received{std::move(m->msg)});
        for (const auto r : ranks) pmix_->release_abort(r);
        continue;
      }
      if (std::holds_alternative<ln::shutdown_request>(m->msg) && pmix_) pmix_->release_aborts();
      if (const auto* c = std::get_if<ln::input_closed>(&m->msg)) close_input(c->rank);
      if (std::holds_alternative<ln::spawn_request>(m->msg)) {
        stdin_ = fds.empty() ? owned_fd() : std::move(fds.front());
      }
      feed(ag::received{std::move(m->msg)});
      stdin_.reset();  // the ranks have their copies now
    } else if (auto* in = std::get_if<ln::input_in>(&e)) {
      on_input(in->rank, in->bytes);
    } else if (std::holds_alternative<ln::credit_granted>(e)) {
      resume_output();
    } else if (auto* d = std::get_if<ln::link_down>(&e)) {
      // Closed, garbage, another job's nonce, silence: the endpoint is down and sends nothing
      // more (a byte stream cannot be resynchronised to carry an error message after garbage).
      // pmd clears its ranks and exits; the launcher sees the stream end.
      lose_link(d->reason);
      return;
    }
    // peer_greeted: nothing to do.
  }
}

void driver::on_link_readable() {
  for (int round = 0; round < 16 && link_open_; ++round) {
    std::vector<ln::link_event> events;
    const auto st = reader_.read_once(link_, now(), ep_, events);
    on_link_events(events);
    if (st != ln::stream_reader::status::data) return;
  }
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
  // keep_zombie: the leader stays a zombie, so its pid (its group's id) cannot be reused.
  const auto end = pm::sys::check_exit(it->second.pidfd.get(), pm::sys::reap_mode::keep_zombie);
  if (!end.ended) return;
  unwatch(it->second.pidfd.get());
  it->second.pidfd.reset();
  if (!end.status) return;  // reaped already (by the sweep): nothing more to say
  const pm::exit_status status = *end.status;
  if (pmix_) {
    // Upcalls queued before the exit (its PMIx_Finalize) count: run them first.
    pmix_->on_ready();
    if (pmix_->unfinalized(rank)) send_now(ln::pmix_unfinalized{rank, status});
    pmix_->rank_ended(rank, status);
  }
  feed(ag::rank_exited{rank, status});
}

int driver::next_timeout_ms() const {
  std::optional<clock_type::time_point> first;
  for (const auto& t : timers_) {
    if (!first || t.first < *first) first = t.first;
  }
  if (const auto d = ep_.deadline(); d && link_open_) {
    const clock_type::time_point at{std::chrono::duration_cast<clock_type::duration>(*d)};
    if (!first || at < *first) first = at;
  }
  if (!first) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*first - clock_type::now());
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
  for (const int fd : {link_.read_fd, link_.write_fd}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag_link_in;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, link_.read_fd, &ev) != 0) {
      // A regular file or /dev/null: nothing a launcher hands pmd (docs/agent.md).
      std::fprintf(stderr,
                   "pmd: its input cannot be waited on (%s): a launcher gives a pipe or a "
                   "socket\n",
                   std::strerror(errno));
      return 2;
    }
  }
  if (link_.write_fd != link_.read_fd) {
    watch(link_.write_fd, EPOLLOUT | EPOLLET, tag_link_out);
    // Behind ssh: a larger pipe to sshd takes more output per wake-up (best effort; a socket or
    // a file refuses it).
    ::fcntl(link_.write_fd, F_SETPIPE_SZ, 1 << 20);
  }
  watch(sigfd_.get(), EPOLLIN, tag_signals);

  ln::hello mine;
  mine.pid = ::getpid();
  mine.hostname = ag::host_name();
  mine.addrs = ag::reachable_addresses();
  mine.port = ag::free_port(mine.addrs);
  ep_.start(now(), mine);
  flush();

  epoll_event events[64];
  while (!exit_code_) {
    const int n = ::epoll_wait(epoll_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "pmd: epoll_wait: %s\n", std::strerror(errno));
      feed(ag::terminate_requested{SIGTERM});  // still clear everything
    }
    for (int i = 0; i < n && !exit_code_; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      const std::uint64_t kind = tag & (0xffull << 56);
      const auto rank = static_cast<std::uint32_t>(tag & 0xffffffffull);
      if (kind == tag_link_in) {
        if ((events[i].events & EPOLLOUT) != 0) flush(true);
        if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && link_open_) {
          on_link_readable();
        }
      } else if (kind == tag_link_out) {
        flush(true);
      } else if (kind == tag_signals) {
        on_signals();
      } else if (kind == tag_pidfd) {
        on_pidfd(rank);
      } else if (kind == tag_stdout) {
        on_output(rank, pm::output_stream::out);
      } else if (kind == tag_stderr) {
        on_output(rank, pm::output_stream::err);
      } else if (kind == tag_stdin) {
        write_input(rank);
      } else if (kind == tag_pmix) {
        if (pmix_) pmix_->on_ready();
      } else if (pmd::child_agents::owns_tag(tag)) {
        if (children_) children_->on_event(tag);
      }
    }
    if (link_open_) {
      std::vector<ln::link_event> link_events;
      ep_.tick(now(), link_events);
      on_link_events(link_events);
    }
    const auto t = clock_type::now();
    std::vector<std::uint64_t> due;
    std::erase_if(timers_, [&](const auto& x) {
      if (x.first > t) return false;
      due.push_back(x.second);
      return true;
    });
    for (const auto id : due) feed(ag::timer_fired{id});
    flush();
  }
  // Last words (shutdown_done or an error) before exiting; bounded, the launcher may be gone.
  const auto deadline = clock_type::now() + std::chrono::seconds(2);
  while (link_open_ && !ep_.output().empty() && clock_type::now() < deadline) {
    std::string error;
    if (!writer_.flush(link_, ep_, error)) break;
    if (!ep_.output().empty()) ::usleep(1000);
  }
  // The PMIx server's directories go; the server itself is not finalized (pmix_gateway::stop):
  // if it ran, its threads still do, so end now, without the static destructors and atexit
  // handlers that would meet them.
  if (pmix_ && !pmix_->stop()) {
    std::fflush(stderr);
    std::_Exit(*exit_code_);
  }
  pmix_.reset();
  return *exit_code_;
}

void driver::send_now(const ln::message& m) {
  if (!link_open_) return;
  ep_.send(m);
  flush();
}

void driver::on_child_message(ln::message& m) {
  if (!children_) {
    pmd::child_agents::hooks h;
    h.watch = [this](int fd, std::uint32_t events, std::uint64_t tag) { watch(fd, events, tag); };
    h.unwatch = [this](int fd) { unwatch(fd); };
    h.send = [this](const ln::message& msg) {
      if (link_open_) ep_.send(msg);
    };
    h.queued = [this] { return ep_.output().size(); };
    std::vector<std::string> env;  // pmd's own: the launcher's never reaches this host
    for (char** e = ::environ; *e != nullptr; ++e) env.emplace_back(*e);
    children_ = std::make_unique<pmd::child_agents>(std::move(h), std::move(env));
  }
  if (const auto* o = std::get_if<ln::child_open>(&m)) {
    children_->open(*o);
  } else if (auto* d = std::get_if<ln::child_data>(&m)) {
    children_->data(*d);
  } else if (const auto* c = std::get_if<ln::child_close>(&m)) {
    children_->close(c->host);
  }
}

void driver::start_pmix(const ln::pmix_job& job, std::vector<std::string> executables) {
  pmd::pmix_gateway::hooks h;
  h.abort = [this](std::uint32_t rank, int status, const std::string& message) {
    send_now(ln::pmix_abort{rank, status, message});
  };
  h.fence = [this](ln::fence_contribution c) { send_now(c); };
  h.modex_ask = [this](ln::modex_request q) { send_now(q); };
  h.modex_answer = [this](ln::modex_reply a) { send_now(a); };
  h.notice = [this](const std::string& line) { send_now(ln::agent_notice{line}); };
  h.proc_table = [this](ln::proc_table_request q) { send_now(q); };
  h.spawn = [this](ln::pmix_spawn q) { send_now(q); };
  h.publish = [this](ln::pmix_publish q) { send_now(q); };
  h.lookup = [this](ln::pmix_lookup q) { send_now(q); };
  h.unpublish = [this](ln::pmix_unpublish q) { send_now(q); };
  pmix_ = std::make_unique<pmd::pmix_gateway>(job, std::move(executables), std::move(h));
  watch(pmix_->fd(), EPOLLIN, tag_pmix);
  send_now(pmix_->server_info());  // `pmrun --ps` shows tools where to attach
}

bool parse_hex(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(text, &end, 16);
  return errno == 0 && end != text && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  bool stdio = false;
  bool connect = false;  // started by srun: dial the launcher back (docs/slurm.md)
  std::optional<std::uint64_t> nonce;
  std::optional<std::chrono::milliseconds> hello_bound;
  ag::options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--stdio") {
      stdio = true;
    } else if (a == "--connect") {
      connect = true;
    } else if (a == "--nonce" && i + 1 < argc) {
      std::uint64_t v = 0;
      if (!parse_hex(argv[++i], v)) {
        std::fprintf(stderr, "pmd: --nonce needs a hexadecimal number, not '%s'\n", argv[i]);
        return 2;
      }
      nonce = v;
    } else if (a == "--grace-ms" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 3'600'000) {
        std::fprintf(stderr, "pmd: --grace-ms needs milliseconds, not '%s'\n", argv[i]);
        return 2;
      }
      opts.lost_grace = std::chrono::milliseconds(v);
    } else if (a == "--hello-ms" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 86'400'000) {
        std::fprintf(stderr, "pmd: --hello-ms needs milliseconds, not '%s'\n", argv[i]);
        return 2;
      }
      hello_bound = std::chrono::milliseconds(v);
    } else if (a == "--version") {
      std::printf("pmd %s (agent link version %u)\n", PM_VERSION_STRING,
                  pm::link::protocol_version);
      return 0;
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "pmd: unknown argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (stdio == connect || !nonce) {
    std::fprintf(stderr, "pmd: --stdio or --connect, and --nonce, are required\n%s", usage);
    return 2;
  }
  struct stat st {};
  ln::stream_fds link{0, 1, false};
  if (connect) {
    // Before the environment is read for the ranks: the token and addresses leave it here.
    try {
      const int fd = pm::srun::connect_from_environment();
      link = ln::stream_fds{fd, fd, false};
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pmd: %s\n", e.what());
      return 2;
    }
  } else if (::fstat(0, &st) == 0 && S_ISSOCK(st.st_mode)) {
    link.socket = true;
  }
  // Orphaned descendants of the ranks reparent to pmd, not to init: nothing escapes the sweep.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::fprintf(stderr, "pmd: cannot become a child subreaper: %s\n", std::strerror(errno));
    return 2;
  }
  // Its own process group: the terminal's ^C / ^Z go to the launcher, which decides. (Under sshd
  // pmd leads its own session already, and this fails harmlessly.)
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
  extern char** environ;
  for (char** e = environ; *e != nullptr; ++e) opts.environment.emplace_back(*e);
  try {
    const auto bound =
        hello_bound.value_or(link.socket ? default_socket_hello_bound : default_hello_bound);
    driver d(link, std::move(opts), *nonce, bound, nofile);
    return d.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmd: %s\n", e.what());
    return 2;
  }
}
