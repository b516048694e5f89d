// job_runner: the Asio driver of the launcher machine (launch/launcher.hpp). It decides nothing:
// it stamps every input with the steady clock, moves the links' bytes (host_stream.hpp), opens
// and closes what carries them through the transports, runs the timers, the output layer and
// the ranks' stdin (rank_stdin.hpp), and carries out the machine's actions in order. An input
// that comes from carrying out an action is posted, never nested. docs/architecture.md.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <unordered_map>

#include "driver/discovery_command.hpp"
#include "driver/host_stream.hpp"
#include "driver/launch_config_for.hpp"
#include "driver/preflight.hpp"
#include "driver/rank_stdin.hpp"
#include "env/compose.hpp"
#include "io/output_forwarder.hpp"
#include "launch/launcher.hpp"
#include "pm/error.hpp"
#include "pm/launcher.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/routing.hpp"

namespace pm {

namespace asio = boost::asio;

struct job_runner::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io_, job_request request, job_callbacks callbacks_)
      : io(io_),
        req(std::move(request)),
        cb(std::move(callbacks_)),
        epoch(std::chrono::steady_clock::now()),
        nonce(req.prestarted ? req.prestarted->nonce() : driver::fresh_nonce()),
        input(io_, req.stdin_fd, req.per_rank_stdin) {}

  asio::io_context& io;
  job_request req;
  job_callbacks cb;
  std::chrono::steady_clock::time_point epoch;
  std::uint64_t nonce;
  std::optional<launch::launcher> machine;
  std::unique_ptr<transport_router> router;
  std::unique_ptr<io::output_forwarder> out;
  std::unordered_map<std::uint32_t, std::shared_ptr<driver::host_stream>> streams;
  std::unordered_map<std::uint64_t, std::unique_ptr<asio::steady_timer>> timers;
  std::unordered_map<std::uint32_t, std::uint64_t> held;  // output taken while congested
  driver::rank_stdin input;  // the ranks' stdin: this runner's copies, the pumps
  std::unique_ptr<driver::discovery_command> discovery;  // --host-discovery-script, while it runs
  std::optional<job_report> final_report;
  bool done = false;

  launch::link_time now() const { return std::chrono::steady_clock::now() - epoch; }

  // ---- inputs ----

  // One input to the machine and what it answered. `later`: posted, because it comes from
  // carrying out an action (the contract: never a nested call).
  // A host's stream may outlive the runner in a handler still queued on the io_context: it must
  // not reach into the machine after this.
  ~impl() {
    for (auto& entry : streams) {
      if (entry.second) entry.second->detach();
    }
  }

  template <class F>
  void feed(F&& f) {
    if (done || !machine) return;
    const auto keep = shared_from_this();  // on_finish may end the job_runner that holds us
    launch::actions acts;
    f(*machine, now(), acts);
    for (auto& a : acts) std::visit([this](auto& x) { this->carry_out(x); }, a);
  }
  template <class F>
  static void feed_from(const std::weak_ptr<impl>& weak, F&& f) {
    if (auto self = weak.lock()) self->feed(std::forward<F>(f));
  }
  template <class F>
  void feed_later(F f) {
    asio::post(io, [weak = weak_from_this(), f = std::move(f)]() mutable {
      if (auto self = weak.lock()) self->feed(std::move(f));
    });
  }

  driver::host_stream& stream(std::uint32_t h) {
    auto& s = streams[h];
    if (!s) s = std::make_shared<driver::host_stream>(io, h, *this->machine, stream_hooks(h));
    return *s;
  }

  driver::host_stream_hooks stream_hooks(std::uint32_t h) {
    driver::host_stream_hooks k;
    std::weak_ptr<impl> weak = weak_from_this();
    k.received = [weak, h](std::span<const std::uint8_t> bytes) {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.received(t, h, bytes, a);
      });
    };
    k.broken = [weak, h](const std::string& why) {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.stream_broken(t, h, why, a);
      });
    };
    k.tick = [weak, h] {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.link_tick(t, h, a);
      });
    };
    return k;
  }

  // ---- actions ----

  void carry_out(launch::open_host& x) {
    const auto h = x.target.host;
    auto& s = stream(h);
    const auto generation = s.begin();
    std::weak_ptr<impl> weak = weak_from_this();
    router->open(
        x.target,
        [weak, h, generation](agent_stream st) {
          auto self = weak.lock();
          if (!self || !self->streams[h]->attach(generation, st)) return;
          self->feed([&](launch::launcher& m, launch::link_time t, launch::actions& a) {
            m.stream_opened(t, h, st.pid, a);
          });
          self->streams[h]->start_reading();
        },
        [weak, h, generation](std::string reason) {
          auto self = weak.lock();
          if (!self || !self->streams[h]->current(generation)) return;
          self->feed([&](launch::launcher& m, launch::link_time t, launch::actions& a) {
            m.open_failed(t, h, reason, a);
          });
        });
  }
  void carry_out(launch::host_established& x) { router->established(x.host); }
  void carry_out(launch::write_host& x) { stream(x.host).flush(); }
  void carry_out(launch::pass_stdin& x) {
    std::vector<link::owned_fd> fds;
    fds.push_back(input.copy_for(x.rank));
    stream(x.host).attach_fds(x.offset, std::move(fds));
  }
  void carry_out(launch::close_host& x) {
    const auto h = x.host;
    stream(h).close();
    router->close(h, [weak = weak_from_this(), h](agent_end end) {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.carrier_ended(t, h, end, a);
      });
    });
  }
  void carry_out(launch::link_deadline& x) {
    stream(x.host).arm(
        x.at ? std::optional(epoch +
                             std::chrono::duration_cast<std::chrono::steady_clock::duration>(*x.at))
             : std::nullopt);
  }
  void carry_out(launch::start_timer_after& x) {
    auto timer = std::make_unique<asio::steady_timer>(io, x.after);
    timer->async_wait([weak = weak_from_this(), id = x.timer](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->timers.erase(id);
      self->feed([&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.timer_fired(t, id, a);
      });
    });
    timers[x.timer] = std::move(timer);
  }
  void carry_out(launch::cancel_timer_id& x) { timers.erase(x.timer); }  // destroying cancels
  void carry_out(launch::say& x) {
    if (cb.on_message) cb.on_message(x.line);
  }
  void carry_out(launch::rank_changed& x) {
    if (cb.on_rank_state) cb.on_rank_state(x.rank);
  }
  void carry_out(launch::take_pipes& x) {
    std::vector<link::owned_fd> fds;
    try {
      fds = stream(x.host).take_fds(x.count);
    } catch (const pm::error& e) {
      feed_later([h = x.host, why = std::string(e.what())](launch::launcher& m, launch::link_time t,
                                                           launch::actions& a) {
        m.stream_broken(t, h, why, a);
      });
      return;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const stream_kind k = i == 0 ? stream_kind::out : stream_kind::err;
      out->attach(x.rank, k, fds[i].release(), ended(x.rank, k));
    }
  }
  void carry_out(launch::end_orphaned_rank& x) {
    // The group's pipes are open, so a member of it most likely lives and holds its number (one
    // that left the group with setsid holds the pipe, not the number: then the number is free
    // again only once the kernel's pids wrapped around, ~4 million forks later).
    if (x.pgid > 1) ::kill(static_cast<pid_t>(-x.pgid), SIGKILL);
    out->abandon(x.rank, stream_kind::out);
    out->abandon(x.rank, stream_kind::err);
  }
  std::function<void(std::uint64_t)> ended(std::uint32_t rank, stream_kind k) {
    return [weak = weak_from_this(), rank, k](std::uint64_t bytes) {
      if (auto self = weak.lock()) {
        self->feed_later([=](launch::launcher& m, launch::link_time t, launch::actions& a) {
          m.output_ended(t, rank, k, bytes, a);
        });
      }
    };
  }
  void carry_out(launch::output_open& x) {
    out->open_stream(x.rank, x.stream, ended(x.rank, x.stream));
  }
  void carry_out(launch::output_bytes& x) {
    out->push(x.rank, x.stream, std::span<const char>(x.bytes.data(), x.bytes.size()));
    if (out->discarding(x.rank, x.stream)) {
      // Its destination failed: the rank gets SIGPIPE, as on this machine (the machine tells
      // its agent once).
      feed_later([r = x.rank, k = x.stream](launch::launcher& m, launch::link_time t,
                                            launch::actions& a) { m.output_unwanted(t, r, k, a); });
    }
    if (out->congested(x.rank, x.stream)) {
      held[x.host] += x.bytes.size();  // the agent stops once its window is used up
      return;
    }
    feed_later(
        [h = x.host, n = x.bytes.size()](launch::launcher& m, launch::link_time t,
                                         launch::actions& a) { m.output_taken(t, h, n, a); });
  }
  void carry_out(launch::output_close& x) { out->close_stream(x.rank, x.stream); }
  void carry_out(launch::output_add_job& x) { out->add_job(x.first, x.size); }
  void carry_out(launch::output_give_up&) { out->give_up(); }
  void carry_out(launch::output_drain&) {
    out->async_drain([weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        self->feed([](launch::launcher& m, launch::link_time t, launch::actions& a) {
          m.output_drained(t, a);
        });
      }
    });
  }
  // The output layer drained a congested destination: the agents may send again.
  void on_output_ready() {
    auto taken = std::move(held);
    held.clear();
    for (const auto& [h, n] : taken) {
      feed([h = h, n = n](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.output_taken(t, h, n, a);
      });
    }
  }
  void carry_out(launch::pump_stdin& x) {
    std::weak_ptr<impl> weak = weak_from_this();
    driver::stdin_pump_hooks k;
    k.credit = [weak, h = x.host]() -> std::uint64_t {
      auto self = weak.lock();
      if (!self || !self->machine || !self->machine->takes_input(h)) return 0;
      return self->machine->input_credit(h);
    };
    k.open = [weak, h = x.host] {
      auto self = weak.lock();
      return self && self->machine && self->machine->takes_input(h);
    };
    k.bytes = [weak, h = x.host, r = x.rank](std::span<const std::uint8_t> b) {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.stdin_bytes(t, h, r, b, a);
      });
    };
    k.ended = [weak, h = x.host, r = x.rank] {
      feed_from(weak, [&](launch::launcher& m, launch::link_time t, launch::actions& a) {
        m.stdin_ended(t, h, r, a);
      });
    };
    input.pump(x.host, x.rank, std::move(k));
  }
  void carry_out(launch::input_ready& x) { input.resume(x.host); }
  void carry_out(launch::release_stdin& x) { input.release(x.rank); }
  void carry_out(launch::restarting& x) {
    if (cb.on_restart) cb.on_restart(x.ended);
  }
  void carry_out(launch::rank_restarted& x) {
    if (cb.on_rank_restart) cb.on_rank_restart(x.restart);
  }
  void carry_out(launch::discover_hosts& x) {
    try {
      discovery = std::make_unique<driver::discovery_command>(
          io, x.command, x.bound, [weak = weak_from_this()](auto found) {
            auto self = weak.lock();
            if (!self) return;
            // Posted: the command's object ends before the machine hears of it.
            asio::post(self->io, [weak, found = std::move(found)]() mutable {
              auto s = weak.lock();
              if (!s) return;
              s->discovery.reset();
              s->feed([&](launch::launcher& m, launch::link_time t, launch::actions& a) {
                m.hosts_discovered(t, std::move(found), a);
              });
            });
          });
    } catch (const pm::error& e) {
      feed_later([why = std::string(e.what())](launch::launcher& m, launch::link_time t,
                                               launch::actions& a) {
        m.hosts_discovered(t, launch::launcher::discovery{{}, why}, a);
      });
    }
  }
  void carry_out(launch::claim_slots& x) {
    // The remote hosts' transport shares their slots (claims_spawn_slots is set only then).
    req.remote_transport->claim_slots(
        std::move(x.slots), x.share, [weak = weak_from_this(), id = x.id](std::string refusal) {
          auto self = weak.lock();
          if (!self) return;
          self->feed_later([id, refusal = std::move(refusal)](
                               launch::launcher& m, launch::link_time t, launch::actions& a) {
            m.slots_claimed(t, id, refusal, a);
          });
        });
  }
  void carry_out(launch::finished& x) {
    done = true;
    discovery.reset();  // a command still running is killed: nothing outlives the launch
    final_report = std::move(x.report);
    timers.clear();
    if (cb.on_finish) cb.on_finish(*final_report);
  }

  void start() {
    out = std::make_unique<io::output_forwarder>(io, req.output, req.map.size());
    out->set_resume_callback([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->on_output_ready();
    });
    const std::string agent = req.agent_path.empty() ? local::default_agent_path() : req.agent_path;
    if (::access(agent.c_str(), X_OK) != 0) {
      throw error(errc::launch,
                  "cannot start the agent: '" + agent + "' is not an executable file");
    }
    if (!req.remote.notice) req.remote.notice = cb.on_message;
    router =
        std::make_unique<transport_router>(io, req.remote, req.remote_transport, req.prestarted);
    machine.emplace(driver::launch_config_for(req, cb, nonce, agent));
    feed([](launch::launcher& m, launch::link_time t, launch::actions& a) { m.start(t, a); });
  }
};

job_runner::job_runner(asio::io_context& io, job_request request, job_callbacks callbacks)
    : impl_(std::make_shared<impl>(io, std::move(request), std::move(callbacks))) {
  driver::check_request_shape(impl_->req);
  driver::anchor_working_directories(impl_->req);
  driver::check_restart_policy(impl_->req);
  driver::check_programs(impl_->req);
}

job_runner::~job_runner() = default;

void job_runner::start() {
  impl_->start();
}

void job_runner::signal(int signo) {
  check_job_signal(signo);
  impl_->feed([signo](launch::launcher& m, launch::link_time t, launch::actions& a) {
    m.signal(t, signo, a);
  });
}

void job_runner::cancel() {
  impl_->feed([](launch::launcher& m, launch::link_time t, launch::actions& a) { m.cancel(t, a); });
}

void job_runner::give_up_output() {
  impl_->feed(
      [](launch::launcher& m, launch::link_time t, launch::actions& a) { m.give_up_output(t, a); });
}

bool job_runner::finished() const noexcept {
  return impl_->done;
}

job_report job_runner::report() const {
  if (impl_->final_report) return *impl_->final_report;
  if (impl_->machine) return impl_->machine->report();
  auto control = impl_->req.control;
  control.streams_per_rank = impl_->req.output.merge_stderr ? 1 : 2;
  return controller(impl_->req.map, control).report();
}

std::vector<agent_report> job_runner::agents() const {
  if (!impl_->machine) return {};
  return impl_->machine->agents();
}

}  // namespace pm
