// A DVM from C (pm.h, docs/dvm.md): pm::dvm_server on a thread of its own, and jobs run on a DVM
// through pm::dvm_client as pm_run_start runs them on this machine.
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <future>
#include <sstream>
#include <thread>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/dvm.hpp"
#include "pm/error.hpp"
#include "pm/standard_descriptors.hpp"
#include "run_start.hpp"

struct pm_dvm {
  boost::asio::io_context io{1};
  std::thread thread;
  std::string dir;  // made for the socket; removed at the end
  std::string uri;
  std::atomic<bool> running{false};
  std::optional<pm::dvm_server> server;  // made, run and destroyed on `thread`
};

namespace {

// The DVM's thread: the server starts, runs and ends there, so that the carriers' parent-death
// signal (tied to the thread that spawned them) fires only when the DVM ends.
void serve(pm_dvm& d, pm::dvm_options options, std::promise<std::string>& ready) {
  d.server.emplace(d.io, std::move(options));
  bool stopped = false;
  d.server->on_stopped([&](const std::string&) {
    stopped = true;
    d.running = false;
  });
  d.server->start([&](std::string problem) {
    d.running = problem.empty();
    ready.set_value(std::move(problem));
  });
  while (!stopped && d.io.run_one() > 0) {
  }
  d.server.reset();  // blocking: whatever still runs ends and is reaped
}

}  // namespace

using namespace pm::c;

extern "C" {

int pm_dvm_start(pm_dvm** out, const pm_allocation* hosts, const pm_dvm_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "hosts", hosts);
    const pm_dvm_options defaults = PM_DVM_OPTIONS_INIT;
    if (options == nullptr) options = &defaults;
    check_version(fn, "pm_dvm_options", options->version, PM_DVM_OPTIONS_VERSION);
    if (hosts->value.hosts.empty()) invalid(fn, "the allocation has no host");
    pm::open_missing_standard_descriptors();  // before the io_context's eventfd (pm.h)
    auto d = std::make_unique<pm_dvm>();
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    std::string tmpl =
        std::string(runtime != nullptr && *runtime != '\0' ? runtime : "/tmp") + "/pm-dvm.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw pm::error(pm::errc::system, "cannot make the DVM's directory " + tmpl);
    }
    d->dir = tmpl;
    pm::dvm_options o;
    o.hosts = hosts->value;
    o.socket_path = d->dir + "/dvm.sock";
    if (options->agent_path != nullptr) o.agent_path = options->agent_path;
    if (options->rsh_agent != nullptr) {
      // Words separated by blanks (no quoting: pmrun's -mca plm_rsh_agent takes that).
      std::istringstream words(options->rsh_agent);
      o.remote.rsh_agent.clear();
      for (std::string w; words >> w;) o.remote.rsh_agent.push_back(w);
      if (o.remote.rsh_agent.empty()) invalid(fn, "rsh_agent is blank");
    }
    o.idle_timeout = std::chrono::milliseconds(options->idle_timeout_ms);
    if (options->on_message != nullptr) {
      o.on_message = [fn_ = options->on_message, data = options->user_data](std::string_view l) {
        const std::string line(l);
        fn_(line.c_str(), data);
      };
    }
    d->uri = "unix:" + o.socket_path;
    std::promise<std::string> ready;
    auto answer = ready.get_future();
    d->thread = std::thread([&d = *d, o, &ready]() mutable { serve(d, std::move(o), ready); });
    const auto problem = answer.get();
    if (!problem.empty()) {
      d->thread.join();
      std::error_code ignored;
      std::filesystem::remove_all(d->dir, ignored);
      throw pm::error(pm::errc::launch, problem);
    }
    *out = d.release();
    return PM_OK;
  });
}

int pm_dvm_uri(const pm_dvm* dvm, char** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "dvm", dvm);
    require(fn, "out", out);
    *out = ::strdup(dvm->uri.c_str());
    if (*out == nullptr) throw std::bad_alloc();
    return PM_OK;
  });
}

int pm_dvm_running(const pm_dvm* dvm, int* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "dvm", dvm);
    require(fn, "out", out);
    *out = dvm->running ? 1 : 0;
    return PM_OK;
  });
}

void pm_dvm_destroy(pm_dvm* dvm) {
  if (dvm == nullptr) return;
  // On its own thread (its on_message) the join below could never return: nothing (pm.h).
  if (std::this_thread::get_id() == dvm->thread.get_id()) return;
  boost::asio::post(dvm->io, [dvm] {
    if (dvm->server) dvm->server->stop("stopped (pm_dvm_destroy)");
  });
  if (dvm->thread.joinable()) dvm->thread.join();
  std::error_code ignored;
  std::filesystem::remove_all(dvm->dir, ignored);
  delete dvm;
}

int pm_dvm_run_start(pm_run** out, const char* uri, const pm_job* job, int wait,
                     const pm_run_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "uri", uri);
    require(fn, "job", job);
    if (job->spec.apps.empty()) invalid(fn, "the job has no app (pm_job_add_app)");
    auto client = std::make_shared<pm::dvm_client>(uri);
    std::vector<std::string> command{"(libpm C API)"};
    if (!job->spec.apps.front().argv.empty()) command = job->spec.apps.front().argv;
    auto placed = client->claim(job->spec, wait != 0, command);
    const auto map = pm::c::map_of(*job, job->spec, std::move(placed));
    return pm::c::start_run(fn, out, *map, options,
                            [client](boost::asio::io_context& io, const pm::remote_launch& r) {
                              return client->make_transport(io, r);
                            });
  });
}

int pm_dvm_launch(pm_report** out, const char* uri, const pm_job* job, int wait,
                  const pm_run_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    pm_run* raw = nullptr;
    if (const int rc = pm_dvm_run_start(&raw, uri, job, wait, options); rc != PM_OK) {
      throw c_error{rc, pm_last_error()};
    }
    std::unique_ptr<pm_run, decltype(&pm_run_destroy)> run(raw, &pm_run_destroy);
    *out = pm::c::finish_run(fn, *run);
    return PM_OK;
  });
}

}  // extern "C"
