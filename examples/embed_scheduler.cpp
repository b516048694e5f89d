// Embedding libpm in a scheduler: run a job on the scheduler's own io_context, get its messages
// and report through callbacks, keep serving other work meanwhile (here: a heartbeat timer).
//
//   embed_scheduler PROGRAM [ARGS...]      runs PROGRAM as 4 ranks on this machine
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <iostream>

#include "pm/env.hpp"
#include "pm/error.hpp"
#include "pm/launch_facts.hpp"
#include "pm/launcher.hpp"
#include "pm/rank_map.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: embed_scheduler PROGRAM [ARGS...]\n";
    return 2;
  }
  try {
    boost::asio::io_context io;  // the scheduler's loop; libpm adds its work to it

    // Where: this machine, 4 slots. What: one app context of 4 ranks.
    pm::allocation alloc;
    alloc.source = pm::allocation_source::api;
    const auto me = pm::local_host_info();
    alloc.hosts.push_back(pm::host{me.hostname, 4, 0, true, true});
    pm::job_spec spec;
    spec.apps.push_back(pm::app_context{{argv + 1, argv + argc}, 4, {}, {}});

    pm::job_request request;
    request.map = pm::map_job(spec, alloc);
    request.apps = spec.apps;
    request.env = pm::make_job_env(pm::current_environment(), {}, pm::default_env_profiles,
                                   pm::decide_launch_facts(request.map, me, std::nullopt));
    request.output.tag = true;

    int exit_code = -1;
    pm::job_runner runner(io, std::move(request),
                          {[](std::string_view line) { std::cerr << "[job] " << line << "\n"; },
                           [&](const pm::job_report& report) {
                             exit_code = report.exit_code;
                             std::cerr
                                 << "[scheduler] job finished: exit code " << report.exit_code
                                 << (report.summary.empty() ? "" : " (" + report.summary + ")")
                                 << "\n";
                           }});
    runner.start();

    // The scheduler's own work goes on beside the job.
    boost::asio::steady_timer heartbeat(io);
    int beats = 0;
    std::function<void()> beat = [&] {
      heartbeat.expires_after(std::chrono::milliseconds(50));
      heartbeat.async_wait([&](const boost::system::error_code& ec) {
        if (ec || runner.finished()) return;
        ++beats;
        beat();
      });
    };
    beat();
    io.run();
    std::cerr << "[scheduler] served " << beats << " heartbeats while the job ran\n";
    return exit_code;
  } catch (const pm::error& e) {
    std::cerr << "embed_scheduler: " << e.what() << "\n";
    return 2;
  }
}
