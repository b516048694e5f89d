// job_runner: the Asio driver of the controller. It stamps events with the steady clock, queues
// them (an action's failure comes back as a later event, never as a nested call), carries out the
// controller's actions with the transport, timers and the output layer, and reports the end.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <unordered_map>

#include "io/output_forwarder.hpp"
#include "pm/error.hpp"
#include "pm/launcher.hpp"
#include "transport/local/executable.hpp"
#include "transport/local/local_transport.hpp"

namespace pm {

namespace asio = boost::asio;

struct job_runner::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io_, job_request request_, job_callbacks callbacks_)
      : io(io_),
        req(std::move(request_)),
        cb(std::move(callbacks_)),
        ctl(req.map, req.control),
        epoch(std::chrono::steady_clock::now()) {}

  asio::io_context& io;
  job_request req;
  job_callbacks cb;
  controller ctl;
  std::chrono::steady_clock::time_point epoch;
  std::vector<std::string> paths;  // resolved program per app
  std::unique_ptr<transport> tp;
  std::unique_ptr<io::output_forwarder> out;
  std::deque<event> queue;
  bool drain_posted = false;
  std::unordered_map<std::uint64_t, std::unique_ptr<asio::steady_timer>> timers;
  std::vector<action> actions;
  bool done = false;
  std::optional<job_report> final_report;
  std::vector<rank_state> told;  // per rank: the state on_rank_state last reported

  job_time now() const { return std::chrono::steady_clock::now() - epoch; }

  // The PATH the ranks of app `app` see: the app's own PATH wins over an -x PATH, which wins
  // over the inherited one.
  std::string rank_path_variable(std::uint32_t app) const {
    for (const auto* list : {&req.env.app_variables(app), &req.env.overrides, &req.env.base}) {
      for (auto it = list->rbegin(); it != list->rend(); ++it) {
        if (it->name == "PATH") return it->value;
      }
    }
    return "/usr/local/bin:/usr/bin:/bin";
  }

  void resolve_programs() {
    for (std::uint32_t i = 0; i < req.apps.size(); ++i) {
      const auto& app = req.apps[i];
      if (app.argv.empty()) throw error(errc::launch, "an app context has no program");
      paths.push_back(local::resolve_executable(app.argv[0], rank_path_variable(i), app.wdir));
    }
  }

  void post(event e) {
    queue.push_back(std::move(e));
    if (drain_posted) return;
    drain_posted = true;
    asio::post(io, [self = shared_from_this()] { self->drain(); });
  }

  void drain() {
    drain_posted = false;
    while (!queue.empty()) {
      event e = std::move(queue.front());
      queue.pop_front();
      actions.clear();
      ctl.handle(now(), e, actions);
      tell_state_changes(e);
      for (auto& a : actions) std::visit([this](auto& act) { execute(act); }, a);
    }
  }

  // on_rank_state for the ranks the event may have moved: only rank events and a lost host
  // change a rank's state (the controller's rules), so this is O(1) per event.
  void tell_state_changes(const event& e) {
    if (!cb.on_rank_state) return;
    if (told.empty()) told.assign(req.map.size(), rank_state::pending);
    const auto tell = [&](std::uint32_t rank) {
      if (rank >= told.size()) return;
      auto rr = ctl.rank_report_of(rank);
      if (rr.state == told[rank]) return;
      told[rank] = rr.state;
      cb.on_rank_state(rr);
    };
    if (const auto* x = std::get_if<rank_started>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<rank_exited>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<rank_spawn_failed>(&e)) tell(x->rank);
    if (const auto* x = std::get_if<host_lost>(&e)) {
      if (x->host < req.map.allocation().hosts.size())
        for (auto rank : req.map.ranks_on_host(x->host)) tell(rank);
    }
  }

  // Spawn requests go to the transport in small batches: each rank's environment is built just
  // before it is sent, so the launcher never holds every rank's environment at once.
  static constexpr std::size_t spawn_batch = 16;

  rank_launch launch_of(std::uint32_t r) const {
    const auto p = req.map.at(r);
    rank_launch l;
    l.rank = r;
    l.path = paths[p.app];
    l.argv = req.apps[p.app].argv;
    l.env = rank_environment(req.env, req.map, r);
    l.wdir = req.apps[p.app].wdir;
    l.streams = req.output.merge_stderr ? 1 : 2;
    l.stdin_from_launcher = req.stdin_fd >= 0 && static_cast<std::int64_t>(r) == req.stdin_rank;
    return l;
  }

  void execute(spawn& s) {
    if (!req.per_rank_stdin.empty()) {
      // --stdin all: every rank reads its own pipe, so each is started with its own descriptor.
      for (auto r : s.ranks) {
        auto l = launch_of(r);
        const int fd = req.per_rank_stdin[r];
        l.stdin_from_launcher = fd >= 0;
        tp->spawn(s.host, {std::move(l)}, fd);
      }
      return;
    }
    for (std::size_t first = 0; first < s.ranks.size(); first += spawn_batch) {
      std::vector<rank_launch> batch;
      const auto end = std::min(s.ranks.size(), first + spawn_batch);
      batch.reserve(end - first);
      for (auto i = first; i < end; ++i) batch.push_back(launch_of(s.ranks[i]));
      tp->spawn(s.host, std::move(batch), req.stdin_fd);
    }
  }
  void execute(signal_ranks& s) { tp->signal(s.host, s.ranks, s.signo); }
  void execute(start_timer& t) {
    auto timer = std::make_unique<asio::steady_timer>(io, t.after);
    timer->async_wait([weak = weak_from_this(), id = t.timer](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!ec && self) self->post(timer_fired{id});
    });
    timers[t.timer] = std::move(timer);
  }
  void execute(cancel_timer& t) { timers.erase(t.timer); }  // destroying cancels the wait
  void execute(emit& e) {
    if (cb.on_message) cb.on_message(e.line);
  }
  // The ranks are gone but something they left holds their output open: the transport clears it
  // (it does the same, idempotently, at the finish).
  void execute(clear_leftovers&) { tp->shutdown(nullptr); }
  void execute(finish& f) {
    final_report = std::move(f.report);
    timers.clear();
    // Every stream reached end-of-stream; let the output layer write what it holds, then let the
    // transport clear what the ranks left behind, then report.
    out->async_drain([self = shared_from_this()] {
      self->tp->shutdown([self] {
        self->done = true;
        if (self->cb.on_finish) self->cb.on_finish(*self->final_report);
      });
    });
  }

  void start() {
    transport_callbacks tcb;
    tcb.on_event = [weak = weak_from_this()](event e) {
      if (auto self = weak.lock()) self->post(std::move(e));
    };
    tcb.on_output_fd = [weak = weak_from_this()](std::uint32_t rank, stream_kind stream, int fd) {
      auto self = weak.lock();
      if (!self) {
        ::close(fd);
        return;
      }
      self->out->attach(rank, stream == stream_kind::out ? output_stream::out : output_stream::err,
                        fd, [weak, rank, stream](std::uint64_t bytes) {
                          if (auto s = weak.lock()) s->post(stream_closed{rank, stream, bytes});
                        });
    };
    out = std::make_unique<io::output_forwarder>(io, req.output, req.map.size());
    local::local_transport_options topts;
    topts.agent_path = req.agent_path;
    tp = std::make_unique<local::local_transport>(io, std::move(tcb), topts);
    post(job_start{});
  }
};

job_runner::job_runner(asio::io_context& io, job_request request, job_callbacks callbacks)
    : impl_(std::make_shared<impl>(io, std::move(request), std::move(callbacks))) {
  impl_->req.control.streams_per_rank = impl_->req.output.merge_stderr ? 1 : 2;
  impl_->ctl = controller(impl_->req.map, impl_->req.control);
  impl_->resolve_programs();
}

job_runner::~job_runner() = default;

void job_runner::start() {
  impl_->start();
}
void job_runner::signal(int signo) {
  check_job_signal(signo);
  impl_->post(signal_received{signo});
}
void job_runner::cancel() {
  impl_->post(abort_requested{std::nullopt, 1, "cancelled"});
}
bool job_runner::finished() const noexcept {
  return impl_->done;
}
job_report job_runner::report() const {
  return impl_->final_report ? *impl_->final_report : impl_->ctl.report();
}

}  // namespace pm
