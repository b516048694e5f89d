// Running a job on this machine: pm::job_runner on an io_context the run owns, driven inside
// pm_run_poll / pm_run_wait on the caller's thread, with C callbacks for output, messages, rank
// state changes and the end.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/launcher.hpp"
#include "pm/standard_descriptors.hpp"
#include "run_start.hpp"

// Requests from any thread (pm_run_signal, pm_run_cancel) reach the loop's thread through a
// mutex-guarded list and an eventfd the loop watches: no Asio object is touched from another
// thread (posting across threads raced with the loop's run_one under TSan).
struct cross_thread_requests {
  static constexpr int cancel = 0;  // a request: a signal number, or this
  std::mutex mutex;
  std::vector<int> pending;
  int fd = -1;  // eventfd

  void add(int request) {
    {
      std::lock_guard lock(mutex);
      pending.push_back(request);
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);  // only fails if it overflows
  }
  std::vector<int> take() {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto n = ::read(fd, &count, sizeof count);
    std::lock_guard lock(mutex);
    return std::exchange(pending, {});
  }
};

struct pm_run {
  // The io_context outlives the runner (members are destroyed in reverse order).
  boost::asio::io_context io{1};
  cross_thread_requests requests;
  std::unique_ptr<boost::asio::posix::stream_descriptor> wake;  // watches requests.fd
  pm_run_options options{};
  std::unique_ptr<pm::job_runner> runner;
  std::unique_ptr<pm_report> final_report;  // set by the runner's on_finish
  std::vector<pm::rank_state> seen;         // per rank: the state on_rank_state last reported
  std::vector<std::int64_t> seen_pid;       // ... and its pid
  std::string line;                         // the NUL-terminated copy an output line is passed in
  std::uint32_t size = 0;
  bool in_loop = false;
};

namespace pm::c {
namespace {

// The local transport starts ranks on this machine, as host 0 of the allocation.
void check_local(const pm_map& m) {
  const auto& map = m.map;
  const auto& hosts = map.allocation().hosts;
  for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
    const auto h = map.host_of_node(node);
    const auto& host = hosts[h];
    if (h != 0 || !(host.local || me().is_me(host.name))) {
      const auto rank = map.ranks_on_host(h).front();
      throw pm::error(pm::errc::launch,
                      "rank " + std::to_string(rank) + " is mapped to host '" + host.name +
                          "': the local transport runs a job whose ranks are all on this machine, "
                          "the allocation's first host (" +
                          (hosts.empty() ? std::string("none") : "'" + hosts[0].name + "'") + ")");
    }
  }
}

// Calls on_rank_state for a rank whose state differs from the last one reported.
void report_state_change(pm_run& run, const pm::rank_report& r) {
  if (run.options.on_rank_state == nullptr) return;
  // A spawned job's ranks (MPI_Comm_spawn) are numbered after the map's: they join here.
  if (r.rank >= run.seen.size()) {
    run.seen.resize(std::size_t{r.rank} + 1, pm::rank_state::pending);
    run.seen_pid.resize(run.seen.size(), 0);
  }
  // The same state again is news only as a new process: a rank restarted alone
  // (enable_recovery) runs again under another pid.
  if (run.seen[r.rank] == r.state &&
      (r.state != pm::rank_state::running || r.pid == 0 || run.seen_pid[r.rank] == r.pid))
    return;
  run.seen[r.rank] = r.state;
  run.seen_pid[r.rank] = r.pid;
  pm_rank_info info = PM_RANK_INFO_INIT;
  fill_rank_info(r, info);
  run.options.on_rank_state(&info, run.options.user_data);
}

bool finished(const pm_run& run);

// Output written to a descriptor that is not open would be lost, or land in whatever takes that
// number later: refused at the start, as a missing program is.
void check_output_descriptor(const char* fn, const char* name, int fd) {
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    invalid(fn, std::string(name) + " " + std::to_string(fd) + " is not an open descriptor");
  }
}

// Keeps a wait on the eventfd armed; each wake-up hands the requests to the runner.
void watch_requests(pm_run& run) {
  run.wake->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [&run](const boost::system::error_code& ec) {
                         if (ec) return;  // cancelled: the run is being destroyed
                         for (const int request : run.requests.take()) {
                           if (request == cross_thread_requests::cancel)
                             run.runner->cancel();
                           else
                             run.runner->signal(request);
                         }
                         if (!finished(run)) watch_requests(run);
                       });
}

pm::job_callbacks callbacks(pm_run& run) {
  pm::job_callbacks cb;
  cb.on_message = [&run](std::string_view line) {
    if (run.options.on_message == nullptr) return;
    run.line.assign(line);
    run.options.on_message(run.line.c_str(), run.options.user_data);
  };
  if (run.options.on_rank_state != nullptr)
    cb.on_rank_state = [&run](const pm::rank_report& rank) { report_state_change(run, rank); };
  if (run.options.on_restart != nullptr) {
    cb.on_restart = [&run](const pm::incarnation_report& ended) {
      run.line.assign(ended.summary);
      run.options.on_restart(ended.number, ended.exit_code, run.line.c_str(),
                             run.options.user_data);
    };
  }
  if (run.options.on_rank_restart != nullptr) {
    cb.on_rank_restart = [&run](const pm::rank_restart_report& x) {
      run.line.assign(x.summary);
      run.options.on_rank_restart(x.rank, x.count, x.number, run.line.c_str(),
                                  run.options.user_data);
    };
  }
  cb.on_finish = [&run](const pm::job_report& report) {
    run.final_report = std::make_unique<pm_report>(pm_report{report});
    // Every change was reported as it happened; this only catches what the runner does not
    // report (nothing today), so that the C contract does not depend on it.
    for (const auto& r : run.final_report->value.ranks) report_state_change(run, r);
    if (run.options.on_finish != nullptr)
      run.options.on_finish(run.final_report.get(), run.options.user_data);
  };
  return cb;
}

pm::output_sink sink(pm_run& run) {
  return [&run](std::uint32_t rank, pm::output_stream stream, std::string_view line,
                pm::line_flags flags) {
    run.line.assign(line);
    const unsigned f =
        (flags.partial ? PM_LINE_PARTIAL : 0u) | (flags.continued ? PM_LINE_CONTINUED : 0u);
    run.options.on_output(rank, stream == pm::output_stream::out ? PM_STDOUT : PM_STDERR,
                          run.line.c_str(), line.size(), f, run.options.user_data);
  };
}

bool finished(const pm_run& run) {
  return run.final_report != nullptr;
}

// One step of the event loop: at most one handler, until `deadline` (nullopt: no limit; a time in
// the past: only a ready one). Returns false when nothing ran.
bool step(pm_run& run, std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::size_t ran = 0;
  if (!deadline)
    ran = run.io.run_one();
  else if (*deadline <= std::chrono::steady_clock::now())
    ran = run.io.poll_one();
  else
    ran = run.io.run_one_until(*deadline);
  if (ran == 0 && run.io.stopped()) {
    run.io.restart();
    if (!finished(run)) {
      throw pm::error(pm::errc::internal,
                      "the job's event loop ran out of work before the job ended");
    }
    return false;
  }
  return ran != 0;
}

// Handlers one pm_run_poll(run, 0, ...) runs at most (pm.h).
constexpr std::size_t ready_batch = 256;
constexpr std::chrono::milliseconds ready_time{5};  // ... and for about this long

// Runs until the job ended, or (with a deadline) until nothing is ready before it: a deadline
// already past runs the handlers that are ready (at most ready_batch), a later one stops once it
// has passed.
void run_loop(const char* function, pm_run& run,
              std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (run.in_loop) {
    invalid(function,
            "called from inside one of the run's own callbacks (or from two threads at once)");
  }
  run.in_loop = true;
  struct leave {
    pm_run& r;
    ~leave() { r.in_loop = false; }
  } on_exit{run};
  const bool ready_only = deadline && *deadline <= std::chrono::steady_clock::now();
  // Ranks that write without pause keep a handler ready at every turn: a poll for "what is ready"
  // takes a bounded batch of them and returns, so that a caller polling several runs in turn
  // gets its thread back.
  // (One handler may pass on a whole chunk of lines: the batch is bounded in time too.)
  std::size_t budget = ready_only ? ready_batch : 0;
  const auto ready_until = std::chrono::steady_clock::now() + ready_time;
  while (!finished(run)) {
    const bool ran = step(run, deadline);
    if (!deadline) continue;
    if (!ran) break;
    const auto now = std::chrono::steady_clock::now();
    if (ready_only ? --budget == 0 || now >= ready_until : now >= *deadline) break;
  }
}

}  // namespace
}  // namespace pm::c

using namespace pm::c;

extern "C" {

int pm_run_start(pm_run** out, const pm_map* map, const pm_run_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    return start_run(fn, out, *map, options, nullptr);
  });
}

int pm_launch(pm_report** out, const pm_map* map, const pm_run_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    pm_run* raw = nullptr;
    if (const int rc = pm_run_start(&raw, map, options); rc != PM_OK) {
      throw c_error{rc, pm_last_error()};
    }
    std::unique_ptr<pm_run, decltype(&pm_run_destroy)> run(raw, &pm_run_destroy);
    *out = finish_run(fn, *run);
    return PM_OK;
  });
}

}  // extern "C"

namespace pm::c {

pm_report* finish_run(const char* fn, pm_run& run) {
  run_loop(fn, run, std::nullopt);
  return new pm_report{run.final_report->value};
}

int start_run(const char* fn, pm_run** out, const pm_map& mapped, const pm_run_options* options,
              const remote_factory& remote) {
  const pm_map* map = &mapped;
  {
    const pm_run_options defaults = PM_RUN_OPTIONS_INIT;
    if (options == nullptr) options = &defaults;
    check_version(fn, "pm_run_options", options->version, PM_RUN_OPTIONS_VERSION);
    if (!remote) check_local(*map);

    // First: the run's event loop makes an eventfd, which must not take a closed 1 or 2.
    pm::open_missing_standard_descriptors();
    auto run = std::make_unique<pm_run>();
    // A version 1 caller's struct ends before the restart fields, a version 2 caller's before
    // the recovery fields: copy only what it has (the rest stays as PM_RUN_OPTIONS_INIT says).
    run->options = defaults;
    std::memcpy(&run->options, options,
                options->version >= 3   ? sizeof(pm_run_options)
                : options->version == 2 ? offsetof(pm_run_options, enable_recovery)
                                        : offsetof(pm_run_options, max_restarts));
    run->size = map->map.size();
    run->seen.assign(run->size, pm::rank_state::pending);
    run->seen_pid.assign(run->size, 0);

    pm::job_request request;
    request.map = map->map;
    request.apps = map->apps;
    request.mapping = map->mapping;
    request.env = decided_env(*map);  // with each app's own variables (job_env::app_overrides)
    request.control.abort_on_failure = options->no_abort_on_failure == 0;
    request.control.timeout = std::chrono::milliseconds(options->timeout_ms);
    request.control.stall_timeout = map->stall_timeout;
    if (options->kill_grace_ms != 0)
      request.control.kill_grace = std::chrono::milliseconds(options->kill_grace_ms);
    request.output.tag = options->tag_output != 0;
    request.output.merge_stderr = options->merge_stderr != 0;
    request.output.stdout_fd = options->stdout_fd;
    request.output.stderr_fd = options->stderr_fd;
    if (options->on_output != nullptr) {
      request.output.sink = sink(*run);
    } else {
      check_output_descriptor(fn, "stdout_fd", options->stdout_fd);
      if (options->merge_stderr == 0) check_output_descriptor(fn, "stderr_fd", options->stderr_fd);
    }
    // A destination that fails (a closed pipe, a full disk) is said once, as pmrun says it.
    request.output.on_error = [&r = *run](std::string_view line) {
      if (r.options.on_message == nullptr) return;
      r.line.assign(line);
      r.options.on_message(r.line.c_str(), r.options.user_data);
    };
    if (options->agent_path != nullptr) request.agent_path = options->agent_path;
    request.restarts.max_restarts = run->options.max_restarts;
    request.restarts.per_rank = run->options.enable_recovery != 0;
    // Recovery without restarts lets the others run on: the launcher's rule (restart_policy).

    run->requests.fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (run->requests.fd < 0)
      throw pm::error(pm::errc::system, std::string("eventfd: ") + std::strerror(errno));
    run->wake = std::make_unique<boost::asio::posix::stream_descriptor>(run->io, run->requests.fd);
    if (remote) {  // no tree relay through it: the launcher's rule for an embedder's transport
      request.remote_transport = remote(run->io, request.remote);
    }
    run->runner = std::make_unique<pm::job_runner>(run->io, std::move(request), callbacks(*run));
    run->runner->start();
    watch_requests(*run);
    *out = run.release();
    return PM_OK;
  }
}

}  // namespace pm::c

extern "C" {

int pm_run_poll(pm_run* run, int timeout_ms, int* finished) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "run", run);
    require(fn, "finished", finished);
    if (timeout_ms < -1) invalid(fn, "timeout_ms must be -1, 0 or positive");
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (timeout_ms >= 0)
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    run_loop(fn, *run, deadline);
    *finished = pm::c::finished(*run) ? 1 : 0;
    return PM_OK;
  });
}

int pm_run_wait(pm_run* run, int* exit_code) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "run", run);
    run_loop(fn, *run, std::nullopt);
    if (exit_code != nullptr) *exit_code = run->final_report->value.exit_code;
    return PM_OK;
  });
}

int pm_run_signal(pm_run* run, int signo) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "run", run);
    if (signo <= 0 || signo >= 65)
      invalid(fn, "signal " + std::to_string(signo) + " is not a signal");
    // Checked now, on the caller's thread: job_runner::signal, which refuses it as well, runs
    // later on the loop's, where its error could only be swallowed.
    pm::check_job_signal(signo);
    // The runner is touched only on the loop's thread, so any thread may call this.
    run->requests.add(signo);
    return PM_OK;
  });
}

int pm_run_cancel(pm_run* run) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "run", run);
    run->requests.add(cross_thread_requests::cancel);
    return PM_OK;
  });
}

int pm_run_finished(const pm_run* run, int* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "run", run);
    require(fn, "out", out);
    *out = finished(*run) ? 1 : 0;
    return PM_OK;
  });
}

int pm_run_report(pm_report** out, const pm_run* run) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "run", run);
    *out = new pm_report{finished(*run) ? run->final_report->value : run->runner->report()};
    return PM_OK;
  });
}

void pm_run_destroy(pm_run* run) {
  if (run == nullptr) return;
  // From inside one of its own callbacks the loop below still uses the run: freeing it there
  // would pull it from under the loop, so the call does nothing (documented in pm.h).
  if (run->in_loop) return;
  // A job still running is cancelled and run to its end, so that nothing it started outlives it.
  // Anything that fails here is swallowed: the transport's destructor still kills what is left.
  if (!finished(*run)) {
    try {
      run->runner->cancel();
      const auto grace = std::chrono::milliseconds(
          run->options.kill_grace_ms != 0 ? run->options.kill_grace_ms : 3000);
      // The ranks' grace and a second for a slow reader of their output; then output that cannot
      // be written (a pipe nobody reads) is let go, so that the caller's thread is not held by
      // it. Bounded, against a bug: a minute more.
      run_loop(__func__, *run, std::chrono::steady_clock::now() + grace + std::chrono::seconds(1));
      if (!finished(*run)) {
        run->runner->give_up_output();
        run_loop(__func__, *run, std::chrono::steady_clock::now() + std::chrono::seconds(60));
      }
    } catch (...) {
    }
  }
  delete run;
}

}  // extern "C"
