// pmd: the node agent. `pmd --stdio --nonce N` serves one launcher over its stdin and stdout: a
// Unix socket from a launcher on the same machine (output pipes then travel as descriptors), or
// the pipes of an ssh session (output then travels as data frames of the link). `pmd --connect
// --nonce N`, started by the launcher's srun step, dials the launcher back over TCP with the job's
// token from its environment and serves the link on that socket (docs/slurm.md).
//
// The logic lives in pm::agent::host_machine (libpm/src/agent: the agent machine, its PMIx relay
// and its child relay) and the link's in pm::link::endpoint; this is their driver: one thread, one
// epoll loop over the link's descriptors, a signalfd (SIGCHLD, SIGTERM, SIGINT, SIGHUP), one pidfd
// per running rank, the ranks' streams when they cross the link (rank_streams), the PMIx server's
// descriptors (pmix_helper: the server itself runs in pmd-helper) and the child agents' pipes
// (child_agents). Every event goes to the machine, every action is carried out here. pmd is a child
// subreaper, so every descendant of a rank that loses its parent becomes pmd's child, and the final
// sweep kills and reaps all of them. docs/agent.md.
//
// No PR_SET_PDEATHSIG: the closed channel is the launcher's death notice (it also works when the
// launcher is a thread of a bigger program, where the parent-death signal would fire when the
// spawning THREAD exits), and a SIGKILL from it would kill pmd before it could clear the ranks.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
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
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/children.hpp"
#include "agent/host_facts.hpp"
#include "agent/host_machine.hpp"
#include "child_agents.hpp"
#include "command_line.hpp"
#include "dvm_host.hpp"
#include "event_set.hpp"
#include "host_shape.hpp"
#include "launcher_link.hpp"
#include "link/endpoint.hpp"
#include "link/socket.hpp"
#include "own_process.hpp"
#include "pm/error.hpp"
#include "pmix_helper.hpp"
#include "rank_processes.hpp"
#include "rank_streams.hpp"
#include "sys/local_files.hpp"
#include "sys/proc_sample.hpp"
#include "sys/spawner.hpp"
#include "timer_queue.hpp"

extern char** environ;

namespace {

namespace ag = pm::agent;
namespace ln = pm::link;
using ln::owned_fd;
using clock_type = std::chrono::steady_clock;

class driver {
 public:
  driver(ln::stream_fds link, ag::options opts, std::uint64_t nonce,
         std::chrono::milliseconds hello_bound, std::optional<rlimit> nofile)
      : link_(link, nonce, hello_bound),
        machine_(with_files(std::move(opts))),
        ranks_(events_),
        nofile_(nofile),
        streams_(events_, link_, [this](std::uint32_t rank, pm::output_stream s, std::uint64_t n) {
          feed(ag::event{ag::output_ended{rank, s, n}});
        }) {}

  int run();

 private:
  static ag::options with_files(ag::options o) {
    static const pm::sys::local_files files;
    o.files = &files;
    o.read_topology = [] { return pmd::read_host_shape(); };
    return o;
  }
  ln::link_time now() const { return clock_type::now().time_since_epoch(); }
  void feed(ag::host_event e);
  void execute(ag::host_action& a);
  void execute(ag::action& a);
  void start_pmix(const ag::start_pmix& s);
  void do_spawn(const ag::process_spec& spec);
  void on_link_readable();
  void on_link_events(std::vector<ln::link_event>& events);
  void on_signals();
  void on_pidfd(std::uint32_t rank);
  pmd::rank_processes::kept kept_elsewhere() const;
  void flush(bool writable = false);
  void lose_link(const std::string& reason, bool quiet = false);
  int next_timeout_ms() const;

  // epoll tags: the kind in the top byte, the rank below.
  // 1, 2: launcher_link; 4: rank_processes.
  static constexpr std::uint64_t tag_signals = 3ull << 56;
  // 5, 6, 7: rank_streams; 9 to 12: child_agents.
  static constexpr std::uint64_t tag_pmix = 8ull << 56;

  pmd::event_set events_;  // before every part that watches descriptors in it
  pmd::launcher_link link_;
  owned_fd sigfd_;
  ag::host_machine machine_;
  // Capacity the ranks' output pipes may still be given beyond the default (F_SETPIPE_SZ counts
  // against the user's pipe-user-pages-soft, 64 MiB, beyond which new pipes get one page).
  std::size_t pipe_budget_ = std::size_t{16} << 20;
  bool told_unbound_ = false;  // the launcher heard that a binding was not applied
  bool draining_ = false;
  owned_fd stdin_;             // attached to the spawn message being carried out
  pmd::rank_processes ranks_;  // the rank leaders, until the sweep
  std::unordered_map<std::uint32_t, std::vector<owned_fd>> pipes_to_pass_;  // until `started`
  pmd::timer_queue timers_;
  std::deque<ag::host_event> pending_;  // what actions produced, fed after the current batch
  std::vector<ag::host_action> actions_;
  std::optional<int> exit_code_;
  std::vector<std::string> addrs_;  // this host's addresses, as hello named them
  std::optional<rlimit> nofile_;
  pmd::rank_streams streams_;                    // ranks' streams as frames (remote agents)
  std::unique_ptr<pmd::pmix_helper> pmix_;       // when the job's ranks get PMIx
  std::unique_ptr<pmd::child_agents> children_;  // the tree launch: agents this one started
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

void driver::feed(ag::host_event e) {
  pending_.push_back(std::move(e));
  // Only the outermost call drains: an action's result event is fed after the batch it came from.
  if (draining_) return;
  draining_ = true;
  while (!pending_.empty()) {
    ag::host_event next = std::move(pending_.front());
    pending_.pop_front();
    actions_.clear();
    machine_.handle(now(), std::move(next), actions_);
    std::vector<ag::host_action> batch = std::move(actions_);
    for (auto& a : batch) execute(a);
  }
  draining_ = false;
  flush();
}

void driver::execute(ag::host_action& a) {
  if (auto* x = std::get_if<ag::action>(&a)) {
    execute(*x);
  } else if (auto* p = std::get_if<ag::pmix_action>(&a)) {
    if (pmix_) pmix_->execute(*p);
  } else if (auto* c = std::get_if<ag::child_action>(&a)) {
    if (!children_) {
      pmd::child_agents::hooks h;
      h.watch = [this](int fd, std::uint32_t ev, std::uint64_t tag) { events_.watch(fd, ev, tag); };
      h.unwatch = [this](int fd) { events_.unwatch(fd); };
      h.report = [this](ag::child_event e) { feed(std::move(e)); };
      h.queued = [this] { return link_.endpoint().output().size(); };
      std::vector<std::string> env;  // pmd's own: the launcher's never reaches this host
      for (char** e = ::environ; *e != nullptr; ++e) env.emplace_back(*e);
      children_ = std::make_unique<pmd::child_agents>(std::move(h), std::move(env));
    }
    children_->execute(*c);
  } else if (auto* s = std::get_if<ag::start_pmix>(&a)) {
    start_pmix(*s);
  } else if (auto* h = std::get_if<ag::set_heartbeats>(&a)) {
    link_.endpoint().set_heartbeats(now(), h->every, h->silence);
  } else if (auto* i = std::get_if<ag::close_input>(&a)) {
    streams_.close_input(i->rank);
  } else if (auto* o = std::get_if<ag::close_output>(&a)) {
    streams_.close_output(o->rank, o->stream);
  }
}

// The server itself starts when a rank connects; until then the gateway only listens.
void driver::start_pmix(const ag::start_pmix& s) {
  try {
    pmix_ =
        std::make_unique<pmd::pmix_helper>(s.job, [this](ag::pmix_event e) { feed(std::move(e)); });
  } catch (const std::exception& e) {
    pending_.push_back(ag::pmix_unavailable{e.what()});
    return;
  }
  events_.watch(pmix_->fd(), EPOLLIN, tag_pmix);
  pending_.push_back(ag::pmix_ready{pmix_->facts()});
}

void driver::execute(ag::action& a) {
  if (auto* s = std::get_if<ag::spawn_rank>(&a)) {
    do_spawn(s->spec);
  } else if (auto* g = std::get_if<ag::signal_group>(&a)) {
    ::kill(-static_cast<pid_t>(g->pgid), g->signo);  // ESRCH: the group is empty already
  } else if (auto* m = std::get_if<ag::send>(&a)) {
    // A rank's output pipes (a local launcher reads them itself) travel with a `started` that
    // names that rank alone.
    if (const auto* st = std::get_if<ln::started>(&m->msg); st && !pipes_to_pass_.empty()) {
      for (const auto& r : st->ranks) {
        std::vector<owned_fd> fds;
        if (auto it = pipes_to_pass_.find(r.rank); it != pipes_to_pass_.end()) {
          fds = std::move(it->second);
          pipes_to_pass_.erase(it);
        }
        link_.send(ln::started{{r}}, std::move(fds));
      }
      return;
    }
    link_.send(m->msg, {});
  } else if (auto* t = std::get_if<ag::start_timer>(&a)) {
    timers_.start(t->timer, t->after);
  } else if (std::holds_alternative<ag::reap_orphans>(a)) {
    ranks_.reap_orphans(kept_elsewhere());
  } else if (std::holds_alternative<ag::sweep>(a)) {
    // Rank groups got SIGKILL before this action, so reaping their leaders is safe now; the
    // child agents' stdin was closed before it (their ssh are waited for, not killed). The PMIx
    // server goes with the ranks it served: pmd-helper is not left as a child (pmix_helper::stop).
    if (pmix_) pmix_->stop();
    pending_.push_back(ag::swept{ranks_.sweep(kept_elsewhere())});
  } else if (std::holds_alternative<ag::sweep_ranks>(a)) {
    // A restart: the rank groups got SIGKILL before this action; the child agents' ssh stay.
    std::vector<std::pair<std::uint32_t, pm::exit_status>> exits;
    const auto left = ranks_.sweep_ranks(kept_elsewhere(), exits);
    // Upcalls the server queued before the exits (a PMIx_Finalize) count: reported first, and
    // the answer follows at once (the launcher may place the incarnation anew meanwhile).
    if (pmix_) pmix_->drain_upcalls();
    for (auto& [rank, status] : exits) pending_.push_back(ag::event{ag::rank_exited{rank, status}});
    // With nothing left: the next incarnation's port, picked as hello's.
    const std::uint16_t port = left == 0 ? ag::free_port(addrs_) : 0;
    pending_.push_back(ag::event{ag::ranks_swept{left, port}});
  } else if (std::holds_alternative<ag::forget_ranks>(a)) {
    ranks_.forget();
    streams_.forget_ranks();
    pipes_to_pass_.clear();
  } else if (const auto* f = std::get_if<ag::forget_rank>(&a)) {
    // --enable-recovery: the rank starts again (its group got SIGKILL just before).
    ranks_.forget(f->rank);
    streams_.forget_rank(f->rank);
    pipes_to_pass_.erase(f->rank);
  } else if (auto* x = std::get_if<ag::exit_agent>(&a)) {
    exit_code_ = x->code;
  } else if (auto* look = std::get_if<ag::sample_ranks>(&a)) {
    // --stall-timeout: what /proc says of each live rank (its group's leader and descendants).
    ag::ranks_sampled r;
    r.ranks.reserve(look->ranks.size());
    for (const auto& [rank, pid] : look->ranks) {
      ag::rank_sample one;
      one.rank = rank;
      if (const auto seen = pm::sys::read_activity(static_cast<pid_t>(pid))) {
        one.state = seen->state;
        one.wchan = seen->wchan;
        one.cpu_ms = seen->cpu_ms;
        one.written = seen->written;
      } else {
        one.gone = true;
      }
      r.ranks.push_back(std::move(one));
    }
    pending_.push_back(std::move(r));
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
  // Found on this host by the machine, in the rank's own PATH and working directory.
  req.path = spec.program.empty() ? spec.argv.front() : spec.program;
  req.argv = spec.argv;
  req.wdir = spec.wdir;
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
  if (!spec.cpus.empty()) {
    // A summary from HWLOC_XMLFILE may name cpus this machine lacks: planned and reported, not
    // applied (docs/gpus.md, "Fake topologies"); the launcher hears it once.
    std::string why;
    req.cpus = pmd::bindable_cpus(spec.cpus, why);
    if (req.cpus.empty() && !told_unbound_) {
      told_unbound_ = true;
      link_.send(ln::agent_notice{"binding not applied (" + why + ")"}, {});
    }
  }
  pm::sys::spawned_process res;
  try {
    res = pm::sys::spawn(req);
  } catch (const pm::error& e) {
    pending_.push_back(ag::rank_spawn_failed{spec.rank, failure_code(e), e.what()});
    return;
  }
  if (in_w) streams_.feed_input(spec.rank, std::move(in_w));
  if (pmix_ && !req.cpus.empty()) pmix_->rank_bound(spec.rank, spec.cpus);
  ranks_.add(spec.rank, res.pid, owned_fd(res.pidfd));
  if (spec.forward_output) {
    streams_.forward(spec.rank, pm::output_stream::out, std::move(out_r));
    streams_.forward(spec.rank, pm::output_stream::err, std::move(err_r));
  } else {
    std::vector<owned_fd> ends;
    if (out_r) ends.push_back(std::move(out_r));
    if (err_r) ends.push_back(std::move(err_r));
    pipes_to_pass_[spec.rank] = std::move(ends);
  }
  pending_.push_back(ag::event{ag::rank_spawned{spec.rank, res.pid}});
}

// Writes what the link has queued (`writable`: epoll said its write end takes bytes again).
void driver::flush(bool writable) {
  std::string error;
  if (!link_.flush(writable, error)) {
    // The launcher went away (a run destroyed before its loop ran, a killed pmrun): there is
    // nobody to tell, and the embedding program's stderr is no place for it.
    lose_link("the link broke: " + error, /*quiet=*/true);
    return;
  }
  if (children_) children_->resume();  // the queue toward the launcher may have drained
}

void driver::lose_link(const std::string& reason, bool quiet) {
  if (!link_.open()) return;
  link_.close();
  // Before the launcher's hello, pmd has no launcher to tell: one line on its stderr (garbage on
  // its input, another job's nonce, a silent input past --hello-ms, an input that ended).
  if (!quiet && !link_.endpoint().greeted()) std::fprintf(stderr, "pmd: %s\n", reason.c_str());
  pipes_to_pass_.clear();  // read ends nobody will receive
  // Forwarded output has nowhere to go now: the ranks block in write() until the stop sequence
  // ends them.
  streams_.stop_reading();
  feed(ag::event{ag::channel_lost{reason}});
}

void driver::on_link_events(std::vector<ln::link_event>& events) {
  for (auto& e : events) {
    if (!link_.open()) return;
    if (auto* m = std::get_if<ln::message_in>(&e)) {
      std::vector<owned_fd> fds;
      try {
        fds = link_.take_fds(m->fds, ln::type_name(m->msg));
      } catch (const pm::error& err) {
        feed(ag::event{ag::bad_message{err.what()}});
        lose_link(err.what());
        return;
      }
      if (std::holds_alternative<ln::spawn_request>(m->msg)) {
        stdin_ = fds.empty() ? owned_fd() : std::move(fds.front());
      }
      feed(ag::event{ag::received{std::move(m->msg)}});
      stdin_.reset();  // the ranks have their copies now
    } else if (auto* in = std::get_if<ln::input_in>(&e)) {
      streams_.input(in->rank, in->bytes);
    } else if (std::holds_alternative<ln::credit_granted>(e)) {
      streams_.resume();
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
  link_.read(now(), [this](std::vector<ln::link_event>& events) { on_link_events(events); });
}

void driver::on_signals() {
  const auto got = pmd::read_signals(sigfd_.get());
  for (const int signo : got.others) feed(ag::event{ag::terminate_requested{signo}});
  if (got.child) feed(ag::event{ag::child_changed{}});
}

void driver::on_pidfd(std::uint32_t rank) {
  const auto status = ranks_.exit_of(rank);
  if (!status) return;
  // Upcalls the server queued before the exit (its PMIx_Finalize) count: reported first.
  if (pmix_) {
    pmix_->after_upcalls([this, rank, s = *status] { feed(ag::event{ag::rank_exited{rank, s}}); });
    return;
  }
  feed(ag::event{ag::rank_exited{rank, *status}});
}

pmd::rank_processes::kept driver::kept_elsewhere() const {
  const pid_t helper = pmix_ ? pmix_->helper_pid() : 0;
  const bool agents = children_ && !children_->empty();
  if (!agents && helper == 0) return {};
  return [this, helper, agents](pid_t pid) {
    return pid == helper || (agents && children_->owns(pid));
  };
}

int driver::next_timeout_ms() const {
  auto first = timers_.next();
  if (const auto d = link_.endpoint().deadline(); d && link_.open()) {
    const clock_type::time_point at{std::chrono::duration_cast<clock_type::duration>(*d)};
    if (!first || at < *first) first = at;
  }
  if (!first) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*first - clock_type::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

int driver::run() {
  sigfd_ = pmd::signal_reader();
  if (!events_ || !sigfd_) {
    std::fprintf(stderr, "pmd: cannot set up its event loop: %s\n", std::strerror(errno));
    return 2;
  }
  if (const auto why = link_.attach(events_.fd()); !why.empty()) {
    // A regular file or /dev/null: nothing a launcher hands pmd (docs/agent.md).
    std::fprintf(stderr,
                 "pmd: its input cannot be waited on (%s): a launcher gives a pipe or a socket\n",
                 why.c_str());
    return 2;
  }
  events_.watch(sigfd_.get(), EPOLLIN, tag_signals);

  ln::hello mine;
  mine.pid = ::getpid();
  mine.hostname = ag::host_name();
  mine.addrs = ag::reachable_addresses();
  mine.port = ag::free_port(mine.addrs);
  addrs_ = mine.addrs;
  link_.endpoint().start(now(), mine);
  flush();

  epoll_event events[64];
  while (!exit_code_) {
    const int n = ::epoll_wait(events_.fd(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "pmd: epoll_wait: %s\n", std::strerror(errno));
      feed(ag::event{ag::terminate_requested{SIGTERM}});  // still clear everything
    }
    for (int i = 0; i < n && !exit_code_; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      const std::uint64_t kind = tag & (0xffull << 56);
      const auto rank = static_cast<std::uint32_t>(tag & 0xffffffffull);
      if (kind == pmd::launcher_link::tag_in) {
        if ((events[i].events & EPOLLOUT) != 0) flush(true);
        if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && link_.open()) {
          on_link_readable();
        }
      } else if (kind == pmd::launcher_link::tag_out) {
        flush(true);
      } else if (kind == tag_signals) {
        on_signals();
      } else if (kind == pmd::rank_processes::tag_pidfd) {
        on_pidfd(rank);
      } else if (pmd::rank_streams::owns_tag(tag)) {
        streams_.on_event(tag);
      } else if (kind == tag_pmix) {
        if (pmix_) pmix_->on_ready();
      } else if (pmd::child_agents::owns_tag(tag)) {
        if (children_) children_->on_event(tag);
      }
    }
    if (link_.open()) {
      std::vector<ln::link_event> link_events;
      const auto due = link_.endpoint().deadline();
      const auto at = now();
      link_.endpoint().tick(at, link_events);
      on_link_events(link_events);
      // The link's timer (its heartbeat) was due: the child agents get theirs, and are timed.
      if (due && at >= *due && machine_.relays()) feed(ag::children_tick{});
    }
    for (const auto id : timers_.take_due()) feed(ag::event{ag::timer_fired{id}});
    // What this turn did to ranks goes out in one message per kind (host_machine.hpp).
    if (machine_.holds_reports()) feed(ag::turn_ended{});
    flush();
  }
  link_.last_words();
  // pmd-helper's server ends and its directories go (pmix_helper::stop).
  if (pmix_) pmix_->stop();
  pmix_.reset();
  return *exit_code_;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = pmd::parse_command_line(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  const auto& command = std::get<pmd::command_line>(parsed);
  if (command.dvm_host) return pmd::run_dvm_host(command.connect);
  if (command.topology) {
    // HWLOC_XMLFILE=x.xml pmd --topology: another machine's shape, as the agent would send it.
    const auto shape = pmd::read_host_shape();
    if (!shape.error.empty()) {
      std::fprintf(stderr, "pmd: %s\n", shape.error.c_str());
      return 1;
    }
    std::printf("%s\n", shape.text.c_str());
    return 0;
  }
  ag::options opts;
  if (command.grace) opts.lost_grace = *command.grace;
  try {
    // Before the environment is read for the ranks: a dial-back token leaves it here.
    const auto link = pmd::launcher_link::open_stream(command.connect);
    const auto nofile = pmd::become_agent_process();
    for (char** e = ::environ; *e != nullptr; ++e) opts.environment.emplace_back(*e);
    driver d(link, std::move(opts), command.nonce, command.hello_wait(link.socket), nofile);
    return d.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmd: %s\n", e.what());
    return 2;
  }
}
