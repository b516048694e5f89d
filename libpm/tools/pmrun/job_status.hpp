// What a running pmrun job looks like from outside: `pmrun --ps` (docs/cli.md, "Looking at
// running jobs").
//
// Each pmrun that runs longer than a moment listens on a Unix socket in a directory only its user
// can enter (`status_directory`); whoever connects gets one JSON document — the job's command,
// hosts and its report as of now (ranks, hosts, pids, states) — and the connection closes. The
// socket reads nothing, so nothing a client sends can reach the job. `pmrun --ps` reads every
// socket of the directory (a list of jobs) or one job's (its ranks).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pm/environment.hpp"

namespace pm::tools {

/// $PM_STATUS_DIR, else $XDG_RUNTIME_DIR/pm, else /tmp/pm-UID.
std::string status_directory(const env_map& env);

/// `dir` exists (made 0700 here if its parent does), belongs to this user and is closed to others:
/// only then may a socket that tells pids and command lines, or takes jobs, live there.
bool private_directory(const std::string& dir);
bool is_private_directory(const std::string& dir);

/// The socket path of the pmrun with process id `pid` in `dir`.
std::string status_socket_path(const std::string& dir, std::int64_t pid);

/// Serves a job's status document on its socket until destroyed (which removes the socket).
class job_status_server {
 public:
  /// Listens after `delay`, so that a short job never touches the file system for it. A
  /// directory that cannot be made private (another owner, open to others) means no status: the
  /// job runs the same, `pmrun --ps` does not see it.
  job_status_server(boost::asio::io_context& io, std::string dir,
                    std::function<std::string()> document,
                    std::chrono::milliseconds delay = std::chrono::milliseconds(100));
  ~job_status_server();
  job_status_server(const job_status_server&) = delete;
  job_status_server& operator=(const job_status_server&) = delete;

 private:
  void listen();
  void accept();

  boost::asio::io_context& io_;
  std::string dir_, path_;
  std::function<std::string()> document_;
  boost::asio::steady_timer timer_;
  std::optional<boost::asio::local::stream_protocol::acceptor> acceptor_;
};

/// A status document's "command" as a shell would take it back, on one line (pmrun --ps's
/// COMMAND column, a DVM's jobs too).
std::string command_line(const nlohmann::json& doc);

/// `pmrun --ps [PID] [--json]`: `args` are the words after --ps. Prints to stdout; returns the exit
/// code (0; 1 when the job asked for does not run; 2 for bad usage).
int show_jobs(const std::vector<std::string>& args, const env_map& env);

}  // namespace pm::tools
