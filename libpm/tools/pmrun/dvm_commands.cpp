#include "dvm_commands.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/remote_options.hpp"
#include "job_status.hpp"
#include "pm/dvm.hpp"
#include "pm/error.hpp"
#include "pm/exit_status.hpp"
#include "text/printable.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/ssh/ssh_command.hpp"
#include "uri_claim.hpp"

namespace pmrun {

namespace {

namespace asio = boost::asio;

// A stopping DVM ends its daemons within a few seconds (their carriers get SIGTERM after 3 s,
// SIGKILL 2 s later); `--dvm stop` waits this long for its server to be gone.
constexpr int stop_wait_ms = 15000;

std::string read_small_file(const std::string& path) {
  try {
    return pm::read_text_file(path);
  } catch (const pm::error&) {
    return {};
  }
}

// Blocks until process `pid` is gone, at most `ms`; false when it is still there.
bool wait_gone(pid_t pid, int ms) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  int r = 0;
  do {
    r = ::poll(&p, 1, ms);
  } while (r < 0 && errno == EINTR);
  ::close(fd);
  return r > 0;
}

// A URI file that names a DVM still answering: starting another one there would overwrite the
// only record of the first, which would then run on unseen. Empty when none answers.
std::string live_dvm_named_in(const std::string& path) {
  if (path.empty() || path == "-") return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  try {
    pm::dvm_client client("file:" + path);
    auto uri = read_small_file(path).substr(0, 256);
    while (!uri.empty() && uri.back() == '\n') uri.pop_back();
    return pm::text::printable(uri);
  } catch (const std::exception&) {
    return {};  // unreadable, not a URI, or nothing answers: a stale file is overwritten
  }
}

std::string already_runs(const std::string& uri, const std::string& file) {
  return "a DVM already runs at " + uri + " (named in " + pm::text::printable(file) +
         "); stop it first (pmrun --dvm stop --dvm-uri file:" + pm::text::printable(file) +
         ") or give another --report-uri";
}

// Records the DVM's URI once it is up: in --report-uri's file and the default one, each claimed
// at once with its check (uri_claim.hpp). A file that names a DVM still answering is left to it:
// a refusal for the file that records this one (--report-uri, else the default), else left
// quietly (the default file, when --report-uri records this one elsewhere). Returns the refusal.
std::string record_uri(const std::string& uri_file, const std::string& report_uri,
                       const std::string& uri_text) {
  std::string holder;
  if (report_uri == "-") {
    std::fputs(uri_text.c_str(), stdout);
    std::fflush(stdout);
  } else if (!report_uri.empty()) {
    if (claim_uri_file(report_uri, uri_text, "--report-uri", live_dvm_named_in, holder) ==
        uri_claim::taken) {
      return already_runs(holder, report_uri);
    }
  }
  if (uri_file.empty() || uri_file == report_uri) return {};
  if (claim_uri_file(uri_file, uri_text, "--dvm start", live_dvm_named_in, holder) ==
          uri_claim::taken &&
      report_uri.empty()) {
    return already_runs(holder, uri_file);
  }
  return {};
}

// The server, in the child: runs until the DVM stops. Writes "ok\n" or one line of trouble to
// `status` once every daemon answered.
int serve(pm::dvm_options options, int status, const std::string& uri_file,
          const std::string& report_uri, const std::string& log) {
  asio::io_context io(1);
  // Until the DVM is up, its lines (a host left out) also go to `status`: the user who started it
  // reads them on the terminal, not only in the log.
  bool up = false;
  auto to_log = options.on_message;
  options.on_message = [&up, status, to_log](std::string_view line) {
    if (to_log) to_log(line);
    if (up) return;
    auto note = "note " + std::string(line);
    std::replace(note.begin(), note.end(), '\n', ' ');  // one line each: the status pipe's unit
    note += "\n";
    (void)!::write(status, note.data(), note.size());
  };
  pm::dvm_server server(io, options);
  std::string why_stopped;
  bool stopped = false;
  server.on_stopped([&](std::string why) {
    why_stopped = std::move(why);
    stopped = true;
  });
  asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) server.stop(std::string("stopped by ") + ::strsignal(signo));
  });
  const auto uri_text = server.uri() + "\n";
  server.start([&](std::string problem) {
    if (problem.empty()) {
      try {
        problem = record_uri(uri_file, report_uri, uri_text);
      } catch (const pm::error& e) {
        problem = e.what();
      }
      if (!problem.empty()) server.stop(problem);
    }
    // From now on stdout is the log's too: whoever reads pmrun's stdout (`$(pmrun --dvm start
    // --report-uri -)`) sees its end when pmrun returns, not when the DVM stops.
    std::fflush(stdout);
    ::dup2(2, 1);
    const auto line = problem.empty() ? std::string("ok\n") : problem + "\n";
    (void)!::write(status, line.data(), line.size());
    ::close(status);
    up = true;
  });
  while (!stopped && io.run_one() > 0) {
  }
  signals.cancel();
  std::fprintf(stderr, "pmrun --dvm: %s\n", why_stopped.c_str());
  // The default URI file goes with this DVM, unless another DVM wrote it since.
  if (!uri_file.empty() && read_small_file(uri_file) == uri_text) ::unlink(uri_file.c_str());
  // A DVM stopped as asked leaves no log; one that ended for another reason (every host lost, a
  // signal) keeps it for whoever wonders why.
  if (why_stopped.starts_with("stopped on request") || why_stopped.starts_with("idle")) {
    ::unlink(log.c_str());
  }
  return 0;
}

}  // namespace

std::string default_uri_file(const pm::env_map& env) {
  return pm::tools::status_directory(env) + "/dvm.uri";
}

std::string dvm_uri(const pm::run_options& options, const pm::env_map& env) {
  std::string uri = options.dvm_uri;
  if (uri.empty()) {
    if (auto it = env.find("PM_DVM_URI"); it != env.end()) uri = it->second;
    // Named as the user gave it: the client's own check would blame --dvm-uri.
    if (!uri.empty() && uri != "search" && !uri.starts_with("file:") && !uri.starts_with("unix:")) {
      throw pm::error(pm::errc::usage, "PM_DVM_URI '" + pm::text::untrusted(uri) +
                                           "': a DVM's URI is file:PATH, unix:PATH or search");
    }
  }
  if (uri == "search") uri = "file:" + default_uri_file(env);
  return uri;
}

int start_dvm(const pm::run_options& options, const pm::resolved_job& resolved,
              const pm::env_map& env) {
  if (!options.job.apps.empty()) {
    throw pm::error(pm::errc::usage, "--dvm start runs no program: its jobs come with --dvm-uri");
  }
  // Absolute: the socket's path is the DVM's URI, which a submitter in another directory uses
  // (a relative PM_STATUS_DIR gave a relative unix: URI).
  auto dir =
      std::filesystem::absolute(pm::tools::status_directory(env)).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!pm::tools::private_directory(dir)) {
    throw pm::error(
        pm::errc::system,
        "--dvm start: " + pm::text::printable(dir) +
            " is not a directory of this user closed to others (set PM_STATUS_DIR to one)");
  }
  // The URI files this start would overwrite: never one naming a DVM that still answers. The
  // default one is left to that DVM when --report-uri records the new one elsewhere.
  auto uri_file = default_uri_file(env);
  for (const auto& file : {options.report_uri, uri_file}) {
    const auto uri = live_dvm_named_in(file);
    if (uri.empty()) continue;
    if (file == uri_file && !options.report_uri.empty() && options.report_uri != uri_file) {
      uri_file.clear();
      continue;
    }
    // Said early, before any daemon starts; the claim of the file after the start is what
    // decides between two starts at once (record_uri).
    throw pm::error(pm::errc::launch, "--dvm start: " + already_runs(uri, file));
  }
  pm::dvm_options o;
  o.hosts = resolved.alloc;
  o.agent_path = pm::local::default_agent_path();
  o.remote.rsh_agent = resolved.remote.rsh_agent;
  if (resolved.remote.rsh_args) o.remote.rsh_args = *resolved.remote.rsh_args;
  o.remote.agent_path = pm::ssh::remote_agent_path(resolved.remote.launch_agent,
                                                   resolved.remote.prefix, o.agent_path);
  o.remote.iface = resolved.remote.interfaces;
  if (resolved.remote.launcher == pm::launcher_choice::srun) {
    // Inside Slurm: one srun step starts every daemon, and they dial back (docs/dvm.md).
    o.remote.launcher = pm::agent_launcher::srun;
    if (auto it = env.find("PM_SRUN_ARGS"); it != env.end()) {
      o.remote.srun_args = pm::cli::agent_args("PM_SRUN_ARGS", it->second);
    }
  }
  o.idle_timeout = options.dvm_idle_timeout;
  o.on_message = [](std::string_view line) {
    std::fprintf(stderr, "pmrun --dvm: %.*s\n", static_cast<int>(line.size()), line.data());
    std::fflush(stderr);
  };
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw pm::error(pm::errc::system, std::string("pipe: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) throw pm::error(pm::errc::system, std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    ::close(pipe_fds[0]);
    ::setsid();
    // The server's lines go to a log only this user reads; the terminal is left alone.
    o.socket_path = dir + "/dvm." + std::to_string(::getpid()) + ".sock";
    const auto log = dir + "/dvm." + std::to_string(::getpid()) + ".log";
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    const int out =
        ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (null >= 0) ::dup2(null, 0);
    if (out >= 0) ::dup2(out, 2);
    // stdout stays for `--report-uri -` until the DVM is up, then goes to the log too.
    int code = 0;
    try {
      code = serve(o, pipe_fds[1], uri_file, options.report_uri, log);
    } catch (const std::exception& e) {
      const std::string line = std::string(e.what()) + "\n";
      (void)!::write(pipe_fds[1], line.data(), line.size());
      code = 1;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string said;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  // "note LINE" lines first (hosts left out), then "ok" or the one line of trouble, which names
  // them again.
  while (!said.empty() && said.back() == '\n') said.pop_back();
  std::string notes;
  while (said.starts_with("note ")) {
    const auto end = std::min(said.find('\n'), said.size());
    notes += "pmrun: --dvm start: " + said.substr(5, end - 5) + "\n";
    said.erase(0, std::min(end + 1, said.size()));
  }
  if (said == "ok") {
    std::fputs(notes.c_str(), stderr);
    return 0;
  }
  if (said.empty()) said = "the DVM's server ended before it was up";
  std::fprintf(stderr, "pmrun: --dvm start: %s\n", said.c_str());
  return pm::exit_codes::launch_failed;
}

int stop_dvm(const std::string& uri) {
  if (uri.empty()) {
    throw pm::error(pm::errc::usage, "--dvm stop needs --dvm-uri (or PM_DVM_URI)");
  }
  pm::dvm_client client(uri);
  const auto status = nlohmann::json::parse(client.status_json());
  const auto pid = static_cast<pid_t>(status.value("pid", 0));
  client.stop();
  if (pid > 0 && !wait_gone(pid, stop_wait_ms)) {
    std::fprintf(stderr, "pmrun: --dvm stop: the DVM's server (pid %d) still runs after %d s\n",
                 static_cast<int>(pid), stop_wait_ms / 1000);
    return pm::exit_codes::launch_failed;
  }
  return 0;
}

int show_dvm(const std::vector<std::string>& args, const pm::env_map& env) {
  bool json = false;
  std::string uri;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json") {
      json = true;
    } else if (args[i] == "--dvm-uri" && i + 1 < args.size()) {
      uri = args[++i];
    } else if (args[i].starts_with("--dvm-uri=")) {
      uri = args[i].substr(10);
    }
  }
  pm::run_options o;
  o.dvm_uri = uri;
  uri = dvm_uri(o, env);
  pm::dvm_client client(uri);
  const auto doc = nlohmann::json::parse(client.status_json());
  if (json) {
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::printf("DVM %s (pid %lld)\n", doc.value("uri", "").c_str(),
              static_cast<long long>(doc.value("pid", 0)));
  std::printf("%-20s %6s %6s  %s\n", "HOST", "SLOTS", "USED", "STATE");
  for (const auto& h : doc.value("hosts", nlohmann::json::array())) {
    const std::string state =
        h.value("up", false) ? "up" : "lost: " + h.value("lost", std::string("?"));
    std::printf("%-20s %6u %6u  %s\n", pm::text::printable(h.value("name", "")).c_str(),
                h.value("slots", 0u), h.value("used", 0u), pm::text::printable(state).c_str());
  }
  std::printf("%-6s %8s %6s %9s  %s\n", "JOB", "PID", "SLOTS", "ELAPSED", "COMMAND");
  for (const auto& j : doc.value("jobs", nlohmann::json::array())) {
    unsigned slots = 0;
    // Held here: items() of the temporary value() returns would outlive it (a crash).
    const auto held = j.value("slots", nlohmann::json::object());
    for (const auto& [host, n] : held.items()) {
      if (n.is_number_unsigned()) slots += n.get<unsigned>();
    }
    // Quoted as plain `pmrun --ps` shows a job: `sh -c 'sleep 4'`, not `sh -c sleep 4`.
    std::printf("%-6llu %8lld %6u %8.1fs  %s\n",
                static_cast<unsigned long long>(j.value("id", 0ull)),
                static_cast<long long>(j.value("submitter_pid", 0)), slots,
                j.value("elapsed_s", 0.0), pm::tools::command_line(j).c_str());
  }
  return 0;
}

}  // namespace pmrun
