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
#include "link/messages/stall.hpp"
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
/// The job binds, maps within hosts, gives GPUs or reports bindings (docs/gpus.md): the agent reads
/// its host's topology (hwloc; HWLOC_XMLFILE in tests) and answers with `topology` before the
/// launcher sends any spawn. Absent: the agent never loads hwloc (a plain job does not pay for it).
struct topology_request {
  friend bool operator==(const topology_request&, const topology_request&) = default;
  static constexpr auto wire() { return wire_map(); }
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
  std::optional<topology_request> topology = std::nullopt;  ///< version 9; absent: none wanted
  /// --stall-timeout: watch the ranks' progress (stall.hpp); absent: not watched.
  std::optional<stall_watch> stall = std::nullopt;
  friend bool operator==(const job_setup&, const job_setup&) = default;
  static constexpr auto wire() {
    return wire_message("job", sender::launcher, field("host", &job_setup::host),
                        field("grace_ms", &job_setup::grace_ms),
                        field("heartbeat_ms", &job_setup::heartbeat_ms),
                        field("silence_ms", &job_setup::silence_ms),
                        field("forward_output", &job_setup::forward_output),
                        field("streams", &job_setup::streams, 0, 2), field("cwd", &job_setup::cwd),
                        field("base", &job_setup::base), field("overrides", &job_setup::overrides),
                        field("apps", &job_setup::apps), field("pmix", &job_setup::pmix),
                        field("topology", &job_setup::topology), field("stall", &job_setup::stall));
  }
  static void check(const job_setup& m, std::string_view type);  ///< apps, consistent PMIx facts
};
/// Where a rank is bound (version 9): the launcher planned it from the host's topology.
struct rank_binding {
  /// The PUs (OS indexes) the agent binds the rank to before exec, as a Linux cpu list
  /// ("0-3,8"); empty: not bound (its GPUs alone were chosen).
  std::string cpus = {};
  friend bool operator==(const rank_binding&, const rank_binding&) = default;
  static constexpr auto wire() { return wire_map(field("cpus", &rank_binding::cpus)); }
};
/// One rank to start.
struct rank_spec {
  std::uint32_t rank = 0;
  std::uint32_t app = 0;
  /// The rank's profile variables ("NAME=value"), and with GPUs its device variables
  /// (CUDA_VISIBLE_DEVICES, ...: pm::topo::rank_environment), the same layer (env/compose.hpp).
  std::vector<std::string> env;
  bool stdin_from_launcher = false;  ///< local: the spawn's descriptor; remote: input frames
  std::optional<rank_binding> binding = std::nullopt;  ///< absent: the job binds nothing
  friend bool operator==(const rank_spec&, const rank_spec&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &rank_spec::rank), field("app", &rank_spec::app),
                    field("env", &rank_spec::env), field("stdin", &rank_spec::stdin_from_launcher),
                    field("binding", &rank_spec::binding));
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

/// Version 11: the job restarts in place (docs/resilience.md). End every rank this agent started
/// and everything they left (SIGKILL to each rank's group, then reap them and the orphans that
/// came back to the agent; the tree's child agents stay), forget them, and get ready for the ranks
/// of `incarnation`; with PMIx the host's server drops every namespace it served and registers
/// `pmix`, the new incarnation's. Answered with `restarted` once nothing of the ranks before is
/// left on this host. The job's setup (apps, environment, stop sequence) stays.
struct restart_request {
  std::uint32_t incarnation = 0;  ///< the one about to start: 1, 2, ... (the first job is 0)
  std::optional<pmix_job> pmix;   ///< the new incarnation's facts for this host (absent: no PMIx)
  friend bool operator==(const restart_request&, const restart_request&) = default;
  static constexpr auto wire() {
    return wire_message("restart", sender::launcher,
                        field("incarnation", &restart_request::incarnation),
                        field("pmix", &restart_request::pmix));
  }
};

// ---- agent -> launcher ----
// What happens to ranks (started, exited, and stream_closed in io.hpp) travels in lists: an
// agent says in one message what happened to its ranks in one turn of its loop (version 10), so
// that a host's 128 ranks ending together cost one message at every tree level, not 384.

/// A rank that runs, and its pid.
struct started_rank {
  std::uint32_t rank = 0;
  std::int64_t pid = 0;
  friend bool operator==(const started_rank&, const started_rank&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &started_rank::rank), field("pid", &started_rank::pid));
  }
};
/// These ranks run (at least one). Over a local socket, 0..2 descriptors may travel with it, and
/// then it names one rank: that rank's output pipe read ends, stdout then stderr (1: merged; 0:
/// none).
struct started {
  std::vector<started_rank> ranks;
  friend bool operator==(const started&, const started&) = default;
  static constexpr auto wire() {
    return wire_message("started", sender::agent, field("ranks", &started::ranks)).with_fds(2);
  }
  static void check(const started& m, std::string_view type);  ///< at least one rank
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
/// A rank that ended, and how.
struct ended_rank {
  std::uint32_t rank = 0;
  exit_status status;
  friend bool operator==(const ended_rank&, const ended_rank&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &ended_rank::rank), exit_status_field(&ended_rank::status));
  }
};
/// These ranks ended (at least one).
struct exited {
  std::vector<ended_rank> ranks;
  friend bool operator==(const exited&, const exited&) = default;
  static constexpr auto wire() {
    return wire_message("exited", sender::agent, field("ranks", &exited::ranks));
  }
  static void check(const exited& m, std::string_view type);  ///< at least one rank
};
/// The answer to job_setup::topology (version 9), before the agent starts any rank: its host's
/// summary as pm::topo::to_text writes it, or why it has none (hwloc failed, pmd built without it).
struct host_shape {
  std::string text = {};
  std::string error = {};  ///< one line; empty when `text` holds the summary
  friend bool operator==(const host_shape&, const host_shape&) = default;
  static constexpr auto wire() {
    return wire_message("topology", sender::agent, field("text", &host_shape::text),
                        field("error", &host_shape::error));
  }
};
/// The answer to `restart`: no process of an earlier incarnation is left on this host, and the
/// agent takes spawns for `incarnation`. `port`: a TCP port free on this host now (the next
/// MASTER_PORT when rank 0 runs here, as hello's; 0: none).
struct restarted {
  std::uint32_t incarnation = 0;
  std::uint16_t port = 0;
  friend bool operator==(const restarted&, const restarted&) = default;
  static constexpr auto wire() {
    return wire_message("restarted", sender::agent, field("incarnation", &restarted::incarnation),
                        field("port", &restarted::port, 0, 65535));
  }
};
/// Everything is cleared; the agent exits right after.
struct shutdown_done {
  friend bool operator==(const shutdown_done&, const shutdown_done&) = default;
  static constexpr auto wire() { return wire_message("shutdown_done", sender::agent); }
};

}  // namespace pm::link
