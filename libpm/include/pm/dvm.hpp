// A DVM: agents kept warm across jobs (docs/dvm.md). PRRTE's `prte`/`prun`/`pterm` model, for
// the command line (pmrun --dvm start, pmrun --dvm-uri, pmrun --dvm stop) and for schedulers that
// embed libpm and run many short jobs on one allocation.
//
// pm::dvm_server starts one daemon per host (`pmd --dvm-host`: ssh, or a plain child on this
// machine) and keeps it. Submitters reach the server over a Unix socket in a directory only its
// user may enter, and the server checks each caller's uid too. A job on a DVM is an ordinary
// pm::job_runner job whose transport (dvm_client::transport) asks each host's daemon to start the
// job's own agent there, which dials the submitter back with a per-job token: no ssh per job, the
// same env contract, output, PMIx server and failure policy as a cold launch, and each job its own
// failure domain. Slots are shared: a job claims the slots its map uses and gets them back when
// it ends; one that does not fit waits, or is refused when asked not to wait.
//
// Nothing outlives the DVM: its daemons end their jobs' agents (and so their ranks) when the
// server stops, is SIGKILLed (their channel ends) or goes silent, and a submitter that dies ends
// its own job (its agents lose their link), not the DVM.
// Threads: every member function is called on the io_context's thread (the client's blocking
// calls before any transport is made, from any one thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/export.hpp"
#include "pm/job.hpp"
#include "pm/launcher.hpp"
#include "pm/rank_map.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm {

struct dvm_options {
  /// The DVM's hosts. One that is this machine (host::local) gets its daemon as a plain child; the
  /// others through `remote` (ssh; rsh_agent, rsh_args and agent_path apply).
  allocation hosts;
  remote_launch remote;
  /// pmd on this machine; empty: pm's default search (as job_request::agent_path).
  std::string agent_path;
  /// The Unix socket submitters connect to. Its directory must be this user's and closed to
  /// others (0700); the server refuses to listen elsewhere.
  std::string socket_path;
  /// Every daemon must say it is up within this; one that does not is dropped and named.
  std::chrono::milliseconds start_timeout{20000};
  /// No job for this long: the DVM stops by itself (0: never).
  std::chrono::milliseconds idle_timeout{0};
  /// The server pings each daemon this often; a daemon silent for interval x misses is lost.
  std::chrono::milliseconds heartbeat_interval{500};
  std::uint32_t heartbeat_misses = 6;
  /// The DVM's lines (a host lost, a caller refused), without newline.
  std::function<void(std::string_view line)> on_message;
};

struct dvm_host_status {
  std::string name;
  std::uint32_t slots = 0;
  std::uint32_t used = 0;       ///< held by running jobs
  bool up = false;              ///< its daemon answers
  std::string lost;             ///< why it was dropped; empty while up
  std::int64_t daemon_pid = 0;  ///< the daemon's pid on that host
};

struct dvm_job_status {
  std::uint64_t id = 0;
  std::int64_t submitter_pid = 0;
  std::vector<std::string> command;
  std::map<std::string, std::uint32_t> slots;  ///< host -> slots held
  double elapsed_s = 0;
};

class PM_API dvm_server {
 public:
  dvm_server(boost::asio::io_context& io, dvm_options options);
  /// Blocking: every daemon's carrier ends (SIGTERM, then SIGKILL) and is reaped; the socket goes.
  ~dvm_server();
  dvm_server(const dvm_server&) = delete;
  dvm_server& operator=(const dvm_server&) = delete;

  /// Starts every host's daemon. Once each one answered or was dropped (named in on_message), the
  /// server listens and `ready` gets an empty string; or one line when no host came up or the
  /// socket cannot be made (the DVM is stopped then).
  void start(std::function<void(std::string problem)> ready);
  /// Ends every job and daemon; `stopped` runs once every carrier ended.
  void stop(std::string why = {});
  /// Runs once when the DVM has stopped: asked to (stop(), `pmrun --dvm stop`), idle, or every
  /// host lost; `why` says which.
  void on_stopped(std::function<void(std::string why)> stopped);
  /// "unix:PATH": what submitters connect to.
  std::string uri() const;
  std::vector<dvm_host_status> hosts() const;
  std::vector<dvm_job_status> jobs() const;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

/// A submitter's connection to a DVM: pmrun --dvm-uri, or an embedding scheduler. One per job:
/// its slots are held as long as the connection (or the transport it becomes) lives.
class PM_API dvm_client {
 public:
  /// Connects: `uri` is "unix:PATH", or "file:PATH" naming a file that holds one (pmrun --dvm
  /// start --report-uri). Throws pm::error(errc::launch) with one line when nothing answers there
  /// or the socket is not this user's DVM.
  explicit dvm_client(const std::string& uri);
  ~dvm_client();
  dvm_client(const dvm_client&) = delete;
  dvm_client& operator=(const dvm_client&) = delete;

  /// The DVM's hosts that are up, with all their slots (what a job may be mapped onto).
  allocation hosts();
  /// Maps `spec` on the free slots and claims them for this job. When they are not free now it
  /// waits (`wait`, calling `waiting` once with a line for the user) until jobs end, or throws
  /// pm::error(errc::mapping) naming what is free. A job that could never fit gets map_job's own
  /// error. `command` is what `pmrun --ps` shows for the job.
  rank_map claim(const job_spec& spec, bool wait, const std::vector<std::string>& command,
                 const std::function<void(std::string_view line)>& waiting = {});
  /// The DVM's state as JSON: {"uri", "pid", "hosts": [...], "jobs": [...]} (pmrun --ps).
  std::string status_json();
  /// Asks the DVM to stop; returns once it said it will.
  void stop();
  /// The transport that starts this job's agents through the DVM's daemons; the connection goes
  /// with it (the claim is released when the transport and the job's agents are gone).
  std::shared_ptr<transport> make_transport(boost::asio::io_context& io,
                                            const remote_launch& remote);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace pm
