// Launching and ending ranks: the job's setup, spawn requests, signals, and what the agent
// reports of each rank (docs/agent-link.md, "Messages"). Each declares its wire form once
// (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "link/messages/pmix_job.hpp"
#include "link/wire_schema.hpp"
#include "pm/exit_status.hpp"

namespace pm::link {

// ---- launcher -> agent ----
/// One app context as the agent needs it to start that app's ranks.
struct app_spec {
  std::vector<std::string> argv;  ///< argv[0] as the user gave it; the agent resolves it
  std::string wdir;               ///< empty: the agent's working directory
  std::vector<std::string> env;   ///< "NAME=value" the app's ranks get on top of everything
  friend bool operator==(const app_spec&, const app_spec&) = default;
  static constexpr auto wire() {
    return wire_map(field("argv", &app_spec::argv), field("wdir", &app_spec::wdir),
                    field("env", &app_spec::env));
  }
  static void check(const app_spec& a, std::string_view type);  ///< a program to run
};
/// Everything about the job the agent needs before the first spawn; sent once, after hello.
/// The agent composes each rank's environment on its own host: its own environment minus an outer
/// job's identity, plus `base` (the -mca exports), the rank's profile variables, `overrides` (-x),
/// its app's variables. The launcher's environment itself never crosses the link.
struct job_setup {
  std::uint32_t host = 0;          ///< this agent's host index in the allocation
  std::uint32_t grace_ms = 3000;   ///< the stop sequence: SIGTERM, this grace, SIGKILL
  std::uint32_t heartbeat_ms = 0;  ///< send a heartbeat this often (0: never)
  std::uint32_t silence_ms = 0;    ///< the launcher silent this long is lost (0: never)
  bool forward_output = true;      ///< false: output pipes travel as descriptors (local socket)
  std::uint8_t streams = 2;        ///< per rank: 2 stdout+stderr, 1 merged, 0 /dev/null
  /// The launcher's working directory: where an app without its own wdir runs, as mpirun does;
  /// a host that has no such directory runs it in the home directory instead.
  std::string cwd;
  std::vector<std::string> base;       ///< "NAME=value" added to the agent's own environment
  std::vector<std::string> overrides;  ///< "NAME=value" that win over the profile variables
  std::vector<app_spec> apps;
  std::optional<pmix_job> pmix;  ///< absent: no PMIx server for the ranks (--no-pmix)
  friend bool operator==(const job_setup&, const job_setup&) = default;
  static constexpr auto wire() {
    return wire_message("job", sender::launcher, field("host", &job_setup::host),
                        field("grace_ms", &job_setup::grace_ms),
                        field("heartbeat_ms", &job_setup::heartbeat_ms),
                        field("silence_ms", &job_setup::silence_ms),
                        field("forward_output", &job_setup::forward_output),
                        field("streams", &job_setup::streams, 0, 2), field("cwd", &job_setup::cwd),
                        field("base", &job_setup::base), field("overrides", &job_setup::overrides),
                        field("apps", &job_setup::apps), field("pmix", &job_setup::pmix));
  }
  static void check(const job_setup& m, std::string_view type);  ///< apps, consistent PMIx facts
};
/// One rank to start.
struct rank_spec {
  std::uint32_t rank = 0;
  std::uint32_t app = 0;
  std::vector<std::string> env;      ///< the rank's profile variables ("NAME=value")
  bool stdin_from_launcher = false;  ///< local: the spawn's descriptor; remote: input frames
  friend bool operator==(const rank_spec&, const rank_spec&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &rank_spec::rank), field("app", &rank_spec::app),
                    field("env", &rank_spec::env), field("stdin", &rank_spec::stdin_from_launcher));
  }
};
/// Start these ranks. Over a local socket, one descriptor may travel with it: the stdin the ranks
/// with `stdin` read (required if any rank has it).
struct spawn_request {
  std::vector<rank_spec> ranks;
  friend bool operator==(const spawn_request&, const spawn_request&) = default;
  static constexpr auto wire() {
    return wire_message("spawn", sender::launcher, field("ranks", &spawn_request::ranks))
        .with_fds(1);
  }
};
/// Signal each listed rank's process group.
struct signal_request {
  std::vector<std::uint32_t> ranks;
  int signo = 0;
  friend bool operator==(const signal_request&, const signal_request&) = default;
  static constexpr auto wire() {
    return wire_message("signal", sender::launcher, field("ranks", &signal_request::ranks),
                        field("signo", &signal_request::signo, 0, max_signal));
  }
};
/// The job is over: kill whatever is left of the ranks and their descendants, then exit.
struct shutdown_request {
  friend bool operator==(const shutdown_request&, const shutdown_request&) = default;
  static constexpr auto wire() { return wire_message("shutdown", sender::launcher); }
};

// ---- agent -> launcher ----
/// A rank runs. Over a local socket, 0..2 descriptors travel with it: the rank's output pipe read
/// ends, stdout then stderr (1: merged; 0: none).
struct started {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;
  friend bool operator==(const started&, const started&) = default;
  static constexpr auto wire() {
    return wire_message("started", sender::agent, field("rank", &started::rank),
                        field("pid", &started::pid))
        .with_fds(2);
  }
};
struct spawn_failed {
  std::uint32_t rank = 0;
  int code = 127;      ///< shell-style: 127 not found, 126 not executable
  std::string reason;  ///< one line
  friend bool operator==(const spawn_failed&, const spawn_failed&) = default;
  static constexpr auto wire() {
    return wire_message("spawn_failed", sender::agent, field("rank", &spawn_failed::rank),
                        field("code", &spawn_failed::code, 0, 255),
                        field("reason", &spawn_failed::reason));
  }
};
struct exited {
  std::uint32_t rank = 0;
  exit_status status;
  friend bool operator==(const exited&, const exited&) = default;
  static constexpr auto wire() {
    return wire_message("exited", sender::agent, field("rank", &exited::rank),
                        exit_status_field(&exited::status));
  }
};
/// Everything is cleared; the agent exits right after.
struct shutdown_done {
  friend bool operator==(const shutdown_done&, const shutdown_done&) = default;
  static constexpr auto wire() { return wire_message("shutdown_done", sender::agent); }
};

}  // namespace pm::link
