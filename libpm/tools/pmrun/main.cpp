// pmrun: the command-line front end. Parse, validate, map, then hand the job to libpm's job_runner
// on one Asio event loop; forward the signals pmrun receives; end as the job ended.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/messages.hpp"
#include "cli/remote_options.hpp"
#include "driver/stdin_forwarder.hpp"
#include "dvm_commands.hpp"
#include "io/safe_path.hpp"
#include "job_status.hpp"
#include "pm/command_line.hpp"
#include "pm/dvm.hpp"
#include "pm/error.hpp"
#include "pm/job.hpp"
#include "pm/job_map.hpp"
#include "pm/launch_facts.hpp"
#include "pm/launcher.hpp"
#include "pm/rank_map.hpp"
#include "pm/report.hpp"
#include "pm/standard_descriptors.hpp"
#include "pm/version.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/local/nofile_limit.hpp"
#include "transport/ssh/ssh_command.hpp"
#include "unlaunched_plan.hpp"

namespace {

namespace asio = boost::asio;

// stdio, not iostreams: <iostream>'s static initialisation (the standard streams and the global
// locale) ran on every launch, for text that only --help, --version and --display-* print.
bool print(const std::string& text, std::FILE* to = stdout) {
  return std::fwrite(text.data(), 1, text.size(), to) == text.size() && std::fflush(to) == 0;
}

bool root_allowed(const pm::run_options& options, const pm::env_map& env) {
  if (geteuid() != 0 || options.allow_run_as_root) return true;
  auto is_one = [&](const char* name) {
    auto it = env.find(name);
    return it != env.end() && it->second == "1";
  };
  return is_one("OMPI_ALLOW_RUN_AS_ROOT") && is_one("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
}

// A file the user named for pmrun to write (--report, --display-map-json), opened so that no
// other user's link or directory can send it elsewhere (io/safe_path.hpp, docs/output.md): one
// line naming the path and why, or a stdio stream.
std::FILE* open_for_writing(const std::string& path, const char* option) {
  pm::io::path_problem problem;
  const int fd = pm::io::open_file(path, 0666, problem);
  if (fd < 0) throw pm::error(pm::errc::system, std::string(option) + ": " + problem.message());
  std::FILE* out = fdopen(fd, "w");
  if (out == nullptr) {
    const int e = errno;
    close(fd);
    throw pm::error(pm::errc::system,
                    std::string(option) + ": cannot write '" + path + "': " + std::strerror(e));
  }
  return out;
}

void write_text(const std::string& target, const std::string& text, const char* option) {
  if (target == "-") {
    print(text);
    return;
  }
  std::FILE* out = open_for_writing(target, option);
  bool written = print(text, out);
  if (std::fclose(out) != 0) written = false;
  if (!written) {
    throw pm::error(pm::errc::system, std::string(option) + ": cannot write '" + target + "'");
  }
}

// --report FILE: opened before anything starts (an unwritable path is found before the job runs,
// as --display-map-json's is), written once however the job ended.
class report_file {
 public:
  explicit report_file(const std::string& path) : path_(path) {
    if (path_.empty() || path_ == "-") return;
    out_ = open_for_writing(path_, "--report");
  }
  ~report_file() {
    if (out_ != nullptr) std::fclose(out_);
  }
  report_file(const report_file&) = delete;
  report_file& operator=(const report_file&) = delete;
  void write(const pm::job_report& report) {
    if (path_.empty() || written_) return;
    written_ = true;
    const auto text = pm::to_json(report) + "\n";
    if (path_ == "-") {
      print(text);
      return;
    }
    if (!print(text, out_)) {
      throw pm::error(pm::errc::system, "--report: cannot write '" + path_ + "'");
    }
  }

 private:
  std::string path_;
  std::FILE* out_ = nullptr;
  bool written_ = false;
};

// Whether a rank of the job's map runs on this machine (where the local agent would serve it).
bool has_rank_here(const pm::rank_map& map, const pm::local_host& me) {
  const auto& hosts = map.allocation().hosts;
  for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
    const auto& h = hosts[map.host_of_node(node)];
    if (h.local || me.is_me(h.name)) return true;
  }
  return false;
}

// The report of a job that never started: every rank pending, with what stopped it.
pm::job_report unstarted_report(const pm::rank_map& map, int exit_code, pm::cause_kind cause,
                                std::string summary) {
  pm::job_report r;
  r.exit_code = exit_code;
  r.cause = cause;
  r.summary = std::move(summary);
  for (const auto& h : map.allocation().hosts) r.host_names.push_back(h.name);
  r.ranks.reserve(map.size());
  for (std::uint32_t i = 0; i < map.size(); ++i) {
    pm::rank_report rank;
    rank.rank = i;
    rank.host = map.at(i).host;
    r.ranks.push_back(std::move(rank));
  }
  return r;
}

struct prepared_stdin {
  int fd_for_ranks = -1;  // what the transport hands to the reading rank
  std::int64_t rank = -1;
  std::vector<int> per_rank;         // --stdin all: each rank's pipe read end
  std::vector<int> forward_targets;  // pipe write ends the forwarder fills
  prepared_stdin() = default;
  prepared_stdin(const prepared_stdin&) = delete;
  prepared_stdin& operator=(const prepared_stdin&) = delete;
  ~prepared_stdin() { close_rank_ends(); }
  void close_rank_ends() {
    if (fd_for_ranks >= 0) close(fd_for_ranks);
    fd_for_ranks = -1;
    for (int fd : per_rank) close(fd);
    per_rank.clear();
  }
};

// Where stdin goes: a regular file or pipe is handed straight to the one reading rank; a terminal
// (or --stdin all) is read by pmrun and copied into pipes.
void prepare_stdin(const pm::stdin_target& target, std::uint32_t size, prepared_stdin& p) {
  if (target.kind == pm::stdin_target::none) return;  // fd 0 is open: main saw to it
  if (target.kind == pm::stdin_target::rank) {
    if (target.rank_index >= size) {
      throw pm::error(pm::errc::usage, pm::cli::stdin_rank_outside(target.rank_index, size));
    }
    p.rank = target.rank_index;
    if (isatty(0) != 1) {
      p.fd_for_ranks = fcntl(0, F_DUPFD_CLOEXEC, 3);
      return;
    }
  }
  // Forwarded through pipes: one for the reading rank, or one per rank for --stdin all.
  const std::uint32_t pipes = target.kind == pm::stdin_target::all ? size : 1;
  for (std::uint32_t i = 0; i < pipes; ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw pm::error(pm::errc::system, "cannot create a pipe for stdin");
    if (target.kind == pm::stdin_target::all)
      p.per_rank.push_back(fds[0]);
    else
      p.fd_for_ranks = fds[0];
    p.forward_targets.push_back(fds[1]);
  }
}

// How other hosts are reached, from what the command line and the environment said.
pm::remote_launch remote_launch_of(const pm::remote_options& o, const std::string& local_pmd,
                                   const pm::env_map& env, const pm::rank_map& map) {
  pm::remote_launch r;
  // ssh only: srun starts every agent with one step of its own.
  std::size_t remote_hosts = 0;
  for (std::uint32_t n = 0; n < map.num_nodes(); ++n) {
    if (!map.allocation().hosts.at(map.host_of_node(n)).local) ++remote_hosts;
  }
  r.tree = o.launcher != pm::launcher_choice::srun &&
           pm::choose_launch_shape(o, remote_hosts) == pm::launch_shape::tree;
  r.tree_fanout = o.tree_fanout;
  r.rsh_agent = o.rsh_agent;
  if (o.rsh_args) r.rsh_args = *o.rsh_args;
  r.agent_path = pm::ssh::remote_agent_path(o.launch_agent, o.prefix, local_pmd);
  r.heartbeat_interval = o.heartbeat_interval;
  r.heartbeat_misses = o.heartbeat_misses;
  r.iface = o.interfaces;
  r.max_concurrent = o.max_ssh;
  if (o.launcher == pm::launcher_choice::srun) {
    r.launcher = pm::agent_launcher::srun;
    if (auto it = env.find("PM_SRUN_ARGS"); it != env.end()) {
      r.srun_args = pm::cli::agent_args("PM_SRUN_ARGS", it->second);
    }
  }
  return r;
}

int exit_code_for(const pm::error& e) {
  switch (e.code()) {
    case pm::errc::not_found:
      return pm::exit_codes::not_found;
    case pm::errc::not_executable:
      return pm::exit_codes::not_executable;
    case pm::errc::launch:
    case pm::errc::system:
    case pm::errc::internal:
      return pm::exit_codes::launch_failed;
    default:
      return pm::exit_codes::usage;
  }
}

int launch(const pm::run_options& options, const pm::resolved_job& resolved, pm::rank_map map,
           pm::job_env job_env, const pm::local_host& me, const pm::env_map& env,
           report_file& report_out, const std::vector<std::string>& command,
           std::shared_ptr<pm::early_agent> early,
           std::function<void(const pm::job_plan&)> on_planned, pm::dvm_client* dvm) {
  // Hundreds of ranks need more descriptors than the usual 1024; the ranks get the original back.
  pm::local::raise_nofile_limit();
  job_env.facts = pm::decide_launch_facts(map, me, options.master_port, options.profiles);

  pm::job_request request;
  request.apps = resolved.job.apps;
  request.mapping = resolved.job.mapping;
  request.env = std::move(job_env);
  request.control.abort_on_failure = options.abort_on_failure;
  request.pmix = options.pmix;
  request.control.timeout = options.timeout;
  request.control.stall_timeout = options.stall_timeout;
  request.control.kill_grace = options.kill_grace;
  request.restarts.max_restarts = options.max_restarts;
  request.restarts.min_hosts = options.min_hosts;
  request.restarts.spares = options.spares;
  request.restarts.host_discovery = options.host_discovery;
  request.restarts.per_rank = options.enable_recovery;
  // The parser already turned the policy off for --enable-recovery alone unless it was given.
  request.restarts.keep_abort = options.abort_on_failure;
  request.output.tag = options.tag_output;
  request.output.timestamp = options.timestamp_output;
  request.output.merge_stderr = options.merge_stderr;
  request.output.json_lines = options.json_lines;
  request.output.output_dir = options.output_dir;
  request.output.output_dir_nocopy = options.output_nocopy;
  request.output.output_dir_nojobid = options.output_nojobid;
  request.output.on_error = [](std::string_view message) {
    std::fprintf(stderr, "pmrun: %.*s\n", static_cast<int>(message.size()), message.data());
  };
  prepared_stdin input;
  prepare_stdin(options.input, map.size(), input);
  request.master_port_fixed = options.master_port.has_value();
  request.agent_path = pm::local::default_agent_path();
  request.remote = remote_launch_of(resolved.remote, request.agent_path, env, map);
  request.stdin_fd = input.fd_for_ranks;
  request.stdin_rank = input.rank;
  request.per_rank_stdin = input.per_rank;
  request.map = std::move(map);
  request.prestarted = std::move(early);

  asio::io_context io(1);
  if (dvm != nullptr) {
    // On a DVM: every host's agent comes from its daemon (dvm_client::make_transport); no tree
    // relay then (the launcher's rule for any transport an embedder brings).
    request.remote.notice = [](std::string_view line) {
      std::fprintf(stderr, "pmrun: %.*s\n", static_cast<int>(line.size()), line.data());
    };
    request.remote_transport = dvm->make_transport(io, request.remote);
  }
  int ending_signal = 0;
  std::optional<pm::job_report> report;
  auto runner = std::make_unique<pm::job_runner>(
      io, std::move(request),
      pm::job_callbacks{
          [](std::string_view line) {
            std::fprintf(stderr, "pmrun: %.*s\n", static_cast<int>(line.size()), line.data());
          },
          [&](const pm::job_report& r) { report = r; },
          {},
          [](std::string_view line) {
            // Open MPI's lines, unprefixed, on stderr (as mpirun's daemons write).
            std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
          },
          std::move(on_planned)});
  // The runner holds its own copies of the ranks' stdin now; ours would keep a pipe open for a
  // rank that is gone, and the forwarder below would wait on it forever (`--stdin all`).
  input.close_rank_ends();
  std::shared_ptr<pm::driver::stdin_forwarder> forwarder;
  if (!input.forward_targets.empty())
    forwarder = pm::driver::stdin_forwarder::start(io, 0, input.forward_targets);

  // Signals pmrun forwards to the job (docs/failure-semantics.md). SIGTSTP: the ranks stop, then
  // pmrun stops itself; SIGCONT wakes both.
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  signals.add(SIGUSR1);
  signals.add(SIGUSR2);
  signals.add(SIGTSTP);
  signals.add(SIGCONT);
  signals.add(SIGPIPE);  // our stdout closing is reported by the output layer, not fatal
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        if (signo != SIGPIPE) runner->signal(signo);
        if (signo == SIGTSTP) {
          // Stop ourselves the default way once the ranks were told.
          asio::post(io, [] { kill(getpid(), SIGSTOP); });
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  // `pmrun --ps` from another shell sees this job (job_status.hpp).
  const auto started = std::chrono::steady_clock::now();
  std::optional<pm::tools::job_status_server> status;
  status.emplace(io, pm::tools::status_directory(env), [&] {
    const auto now = runner->report();
    nlohmann::json doc;
    doc["pmrun_pid"] = static_cast<std::int64_t>(getpid());
    doc["command"] = command;
    doc["hosts"] = now.host_names;
    // Each host's agent: its pid there, and where a PMIx tool reaches its server (docs/pmix.md).
    nlohmann::json agents = nlohmann::json::array();
    for (const auto& a : runner->agents()) {
      nlohmann::json one;
      one["host"] =
          a.host < now.host_names.size() ? now.host_names[a.host] : std::to_string(a.host);
      one["pid"] = a.pid;
      if (!a.pmix_uri.empty()) {
        one["pmix_uri"] = a.pmix_uri;
        one["pmix_tmpdir"] = a.pmix_tmpdir;
      }
      agents.push_back(std::move(one));
    }
    doc["agents"] = std::move(agents);
    doc["elapsed_s"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    doc["running"] = !runner->finished();
    doc["report"] = nlohmann::json::parse(pm::to_json(now));
    // An argument or host name that is not UTF-8 is shown with U+FFFD, never thrown.
    return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });

  runner->start();
  while (!report && io.run_one() > 0) {
  }
  status.reset();
  signals.cancel();
  if (forwarder) forwarder->stop();
  if (!report) throw pm::error(pm::errc::internal, "the event loop ended before the job");

  try {
    report_out.write(*report);
  } catch (const pm::error& e) {
    // The job ran: its exit code stands; the lost report is said once.
    std::fprintf(stderr, "pmrun: %s\n", e.what());
  }
  ending_signal = report->cause == pm::cause_kind::signal ? report->signal : 0;
  if (ending_signal != 0) {
    // End by the signal we received, so that shell loops and callers see it.
    std::fflush(nullptr);
    signal(ending_signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, ending_signal);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(ending_signal);
  }
  return report->exit_code;
}

int run(int argc, char** argv) {
  const std::vector<std::string> given(argv + 1, argv + argc);
  if (!given.empty() && given.front() == "--ps") {
    const std::vector<std::string> rest(given.begin() + 1, given.end());
    const auto env = pm::current_environment();
    // On a DVM: its hosts and jobs (docs/dvm.md); else this user's pmrun jobs.
    for (const auto& word : rest) {
      if (word == "--dvm-uri" || word.starts_with("--dvm-uri=")) return pmrun::show_dvm(rest, env);
    }
    return pm::tools::show_jobs(rest, env);
  }
  const auto args = pm::expand_app_file(given, pm::read_text_file);
  auto options = pm::parse_command_line(args);
  if (options.help) {
    print(pm::help_text());
    return 0;
  }
  if (options.version) {
    print("pmrun (libpm) " + std::string(pm::version_string()) + "\n");
    return 0;
  }
  const auto env = pm::current_environment();
  pm::apply_environment_options(options, env);
  const auto uri = pmrun::dvm_uri(options, env);
  // Stopping a DVM runs no program (as --ps): root needs no --allow-run-as-root for it.
  if (options.dvm_action == "stop") return pmrun::stop_dvm(uri);
  if (!root_allowed(options, env)) throw pm::error(pm::errc::usage, pm::cli::refuse_root());
  if (options.dvm_action == "start") {
    return pmrun::start_dvm(
        options, pm::resolve_job(options, env, pm::local_host_info(), pm::read_text_file), env);
  }
  if (!options.report_uri.empty() || options.dvm_idle_timeout.count() > 0) {
    throw pm::error(pm::errc::usage, "--report-uri and --dvm-idle-timeout go with --dvm start");
  }
  // A job on a DVM: its hosts and free slots are the DVM's (docs/dvm.md).
  std::optional<pm::dvm_client> dvm;
  if (!uri.empty() && !options.do_not_launch) {
    if (!options.host_lists.empty() || options.hostfile) {
      throw pm::error(pm::errc::usage,
                      "a job on a DVM runs on the DVM's hosts; -H and "
                      "--hostfile go with --dvm start");
    }
    dvm.emplace(uri);
  }
  // This machine's pmd starts now, so that its exec overlaps the work below (the allocation, the
  // map, the environment); the job adopts it. One nobody adopts (the job runs on other hosts
  // only, or is refused below) is killed and reaped when `early` goes.
  // Null when there is no pmd to be found: the launch says so, with the places it looked.
  auto early = options.do_not_launch || dvm ? nullptr : pm::early_agent::start();

  const auto me = pm::local_host_info();
  auto resolved = pm::resolve_job(options, env, me, pm::read_text_file);
  std::vector<std::string> command{"pmrun"};
  command.insert(command.end(), given.begin(), given.end());
  if (dvm) resolved.alloc = dvm->hosts();
  auto map = dvm ? dvm->claim(resolved.job, !options.dvm_no_wait, command,
                              [](std::string_view line) {
                                std::fprintf(stderr, "pmrun: %.*s\n", static_cast<int>(line.size()),
                                             line.data());
                              })
                 : pm::map_job(resolved.job, resolved.alloc);
  // Exports are checked before anything is shown or started.
  auto job_env = pm::make_job_env(env, options.exports, options.profiles, {});
  const auto jobid = static_cast<std::uint32_t>(getpid() % 65535 + 1);
  report_file report_out(options.report_file);
  if (options.display_allocation) print(pm::format_allocation(resolved.alloc));
  if (!options.topology_file.empty() && !options.do_not_launch) {
    throw pm::error(pm::errc::usage,
                    "--topology-file is for --do-not-launch (a launch plans each host from its "
                    "own agent's answer)");
  }
  const auto show_map = [&options, jobid](const pm::rank_map& m, const pm::job_plan* got) {
    if (options.display_map) print(pm::format_job_map(m, jobid, got));
    if (!options.display_map_json.empty())
      write_text(options.display_map_json, pm::job_map_json(m, jobid, got), "--display-map-json");
  };
  // A job that plans its hosts shows its map once they are planned, with each rank's cores and
  // GPUs, before any rank starts (as mpirun prints it once its daemons reported; docs/mapping.md).
  const bool planned = pm::needs_topology(resolved.job.mapping);
  const bool shown = options.display_map || !options.display_map_json.empty();
  if (options.do_not_launch) {
    std::optional<pm::job_plan> got;
    // A --topology-file is read even when nothing needs it: a wrong path is said, not ignored.
    if (planned || !options.topology_file.empty())
      got = pmrun::plan_unlaunched(options, map, resolved.job.mapping);
    show_map(map, got ? &*got : nullptr);
    if (options.report_file.empty()) return 0;  // about 100 bytes a rank: built only when asked
    auto unlaunched =
        unstarted_report(map, 0, pm::cause_kind::none, "not launched (--do-not-launch)");
    if (got) unlaunched.resources = std::move(got->resources);
    report_out.write(unlaunched);
    return 0;
  }
  std::function<void(const pm::job_plan&)> on_planned;
  if (!planned) {
    show_map(map, nullptr);
  } else if (shown) {
    on_planned = [show_map, kept = std::make_shared<const pm::rank_map>(map)](
                     const pm::job_plan& got) { show_map(*kept, &got); };
  }
  // What the report says if the launch fails before anything starts (built only when asked for).
  std::optional<pm::job_report> unstarted;
  if (!options.report_file.empty()) unstarted = unstarted_report(map, 0, pm::cause_kind::none, {});
  // A job with no rank on this machine adopts no early agent: it goes now, not at the end (an
  // interrupted job's exit left it to say that its link broke).
  if (early && !has_rank_here(map, me)) early.reset();
  try {
    return launch(options, resolved, std::move(map), std::move(job_env), me, env, report_out,
                  command, early, std::move(on_planned), dvm ? &*dvm : nullptr);
  } catch (const pm::error& e) {
    // Nothing started (a program not found or not executable, the agent could not start): the
    // report says so, so that a 127 here is told from a rank that exited 127. A usage error
    // (2) is no launch and gets no report, as before mapping.
    const auto code = exit_code_for(e);
    if (unstarted && code != pm::exit_codes::usage) {
      unstarted->exit_code = code;
      unstarted->cause = pm::cause_kind::spawn_failed;
      unstarted->summary = e.what();
      try {
        report_out.write(*unstarted);
      } catch (const pm::error& lost) {
        std::fprintf(stderr, "pmrun: %s\n", lost.what());
      }
    }
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything makes a descriptor: the agent's link would take a missing 1.
  pm::open_missing_standard_descriptors();
  try {
    return run(argc, argv);
  } catch (const pm::error& e) {
    std::fprintf(stderr, "pmrun: %s\n", e.what());
    return exit_code_for(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmrun: internal error: %s\n", e.what());
    return pm::exit_codes::launch_failed;
  }
}
