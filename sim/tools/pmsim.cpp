// pmsim: runs one simulated scenario against the real controller (docs/simulator.md).
//
// Prints the seed first, then the replay command, the job's report and the checks' verdict, and
// the trace hash last. Exit codes: 0 every check held, 2 bad usage, 10 crash, 11 liveness,
// 12 correctness (pm::sim::exit_code).
#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/job.hpp"
#include "pm/sim/world.hpp"
#include "pm/topology.hpp"
#ifdef PMSIM_HWLOC
#include "topology/read_hwloc.hpp"
#endif

namespace {

using pm::sim::parse_duration;

struct flags {
  std::vector<std::string> fails, ranks, faults, crashes, partitions, apps, signals;
  std::vector<std::string> host_topologies;
  std::string topology, rank_by, bind_to, cpus_per_rank, gpus_per_rank;
  bool report_bindings = false;
  bool decisions = false;
  std::string host_slots, map_by = "slot", kill_grace, timeout, stall_timeout, trace_file,
                          default_script;
  std::string link, link_jitter, agent_hop, spawn, spawn_jitter, reaction, heartbeat,
      heartbeat_timeout, hello_timeout, run_time, run_jitter;
  std::uint32_t hosts = 4, slots = 2, streams = 2, max_restarts = 0, min_hosts = 0;
  bool scripts_every_incarnation = false, no_spares = false;
  bool enable_recovery = false;
  std::optional<std::uint32_t> fanout, concurrent_starts;
  std::optional<std::uint32_t> np;  // unset: one rank per slot
  std::uint64_t seed = 1;
  std::uint32_t random_faults = 0;
  bool no_abort = false, oversubscribe = false, json = false, twice = false;
  bool connect_back = false, notify_failures = false;
};

std::uint32_t number(const std::string& text, const std::string& what) {
  try {
    std::size_t used = 0;
    const unsigned long v = std::stoul(text, &used);
    if (used != text.size() || v > 0xffffffffUL) throw std::invalid_argument("x");
    return static_cast<std::uint32_t>(v);
  } catch (const std::exception&) {
    throw pm::error(pm::errc::usage, what + ": invalid number '" + text + "'");
  }
}

// A host's summary from a file (an hwloc XML export, read by libpm's reader, or a summary line as
// `pmd --topology` prints it) or given inline (a replay command's "pmtopo1;...").
std::string summary_of(const std::string& arg, const char* what) {
  if (arg.rfind("pmtopo", 0) == 0) return arg;
  std::ifstream in(arg);
  if (!in) throw pm::error(pm::errc::usage, std::string(what) + ": cannot read '" + arg + "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("<topology") != std::string::npos) {
#ifdef PMSIM_HWLOC
    return pm::topo::to_text(pm::topo::read_topology_xml(arg));
#else
    throw pm::error(pm::errc::usage, std::string(what) + ": '" + arg +
                                         "' is hwloc XML and this pmsim was built without hwloc "
                                         "(give `HWLOC_XMLFILE=FILE pmd --topology`'s line)");
#endif
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

pm::sim::scenario build(const flags& f) {
  pm::sim::scenario s;
  s.hosts = f.hosts;
  s.slots = f.slots;
  if (!f.host_slots.empty()) {
    std::size_t from = 0;
    while (from <= f.host_slots.size()) {
      const auto comma = f.host_slots.find(',', from);
      const auto end = comma == std::string::npos ? f.host_slots.size() : comma;
      s.host_slots.push_back(number(f.host_slots.substr(from, end - from), "--host-slots"));
      from = end + 1;
    }
  }
  if (f.np == 0u) throw pm::error(pm::errc::usage, "--np 0: a job needs at least one rank");
  if (f.np) s.np = *f.np;
  for (const auto& text : f.apps) s.apps.push_back(pm::sim::parse_app(text));
  if (!s.apps.empty() && f.np)
    throw pm::error(pm::errc::usage, "--np and --app exclude each other (each app has its np)");
  // As pmrun reads them (pm::set_map_by, set_rank_by, the topo parsers): within-host forms need
  // --topology.
  pm::set_map_by(s.mapping, pm::topo::parse_map_by(f.map_by));
  if (!f.rank_by.empty()) pm::set_rank_by(s.mapping, pm::topo::parse_rank_by(f.rank_by));
  if (!f.bind_to.empty()) s.mapping.host.bind = pm::topo::parse_bind_to(f.bind_to);
  if (!f.cpus_per_rank.empty())
    s.mapping.host.cpus_per_rank = pm::topo::parse_cpus_per_rank(f.cpus_per_rank);
  if (!f.gpus_per_rank.empty())
    s.mapping.host.gpus = pm::topo::parse_gpus_per_rank(f.gpus_per_rank);
  s.mapping.report_bindings = f.report_bindings;
  if (!f.topology.empty()) s.topology = summary_of(f.topology, "--topology");
  for (const auto& text : f.host_topologies) {
    const auto eq = text.find('=');
    if (eq == std::string::npos)
      throw pm::error(pm::errc::usage,
                      "--host-topology '" + text + "': expected HOST=FILE, e.g. 3=dgx2.xml");
    s.set_host_topology(number(text.substr(0, eq), "--host-topology"),
                        summary_of(text.substr(eq + 1), "--host-topology"));
  }
  s.mapping.oversubscribe = f.oversubscribe;
  s.control.abort_on_failure = !f.no_abort;
  s.control.notify_failures = f.notify_failures;
  const auto ms = [](pm::sim::sim_time t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t);
  };
  if (!f.kill_grace.empty())
    s.control.kill_grace = ms(parse_duration(f.kill_grace, "--kill-grace"));
  if (!f.timeout.empty()) s.control.timeout = ms(parse_duration(f.timeout, "--timeout"));
  if (!f.stall_timeout.empty()) {
    s.control.stall_timeout = ms(parse_duration(f.stall_timeout, "--stall-timeout"));
    if (s.control.stall_timeout.count() <= 0)
      throw pm::error(pm::errc::usage, "--stall-timeout: expected a positive duration (e.g. 5s)");
  }
  if (f.streams > 2) throw pm::error(pm::errc::usage, "--streams: 0, 1 or 2");
  s.control.streams_per_rank = static_cast<std::uint8_t>(f.streams);
  s.max_restarts = f.max_restarts;
  s.scripts_every_incarnation = f.scripts_every_incarnation;
  s.spares = !f.no_spares;
  s.min_hosts = f.min_hosts;
  s.enable_recovery = f.enable_recovery;
  auto& l = s.latency;
  const auto set = [](pm::sim::sim_time& field, const std::string& text, const char* what) {
    if (!text.empty()) field = parse_duration(text, what);
  };
  set(l.link, f.link, "--link");
  set(l.link_jitter, f.link_jitter, "--link-jitter");
  set(l.agent_hop, f.agent_hop, "--agent-hop");
  set(l.spawn, f.spawn, "--spawn");
  set(l.spawn_jitter, f.spawn_jitter, "--spawn-jitter");
  set(l.reaction, f.reaction, "--reaction");
  set(l.heartbeat_interval, f.heartbeat, "--heartbeat");
  set(l.heartbeat_timeout, f.heartbeat_timeout, "--heartbeat-timeout");
  set(l.hello_timeout, f.hello_timeout, "--hello-timeout");
  set(l.run_time, f.run_time, "--run-time");
  set(l.run_jitter, f.run_jitter, "--run-jitter");
  if (f.fanout) l.fanout = *f.fanout;
  if (f.concurrent_starts) {
    if (*f.concurrent_starts == 0)
      throw pm::error(pm::errc::usage, "--concurrent-starts: at least 1");
    l.concurrent_starts = *f.concurrent_starts;
  }
  if (!f.default_script.empty()) s.default_script = pm::sim::parse_script(f.default_script);
  for (const auto& text : f.fails) {
    // R:N[@T]: rank R exits N, by default halfway through the run time.
    const auto colon = text.find(':');
    if (colon == std::string::npos)
      throw pm::error(pm::errc::usage, "--fail '" + text + "': expected RANK:CODE, e.g. 3:7");
    auto script = pm::sim::parse_script("exit:" + text.substr(colon + 1));
    if (!script.at) script.at = l.run_time / 2;
    s.set_script(number(text.substr(0, colon), "--fail"), script);
  }
  for (const auto& text : f.ranks) {
    const auto eq = text.find('=');
    if (eq == std::string::npos)
      throw pm::error(pm::errc::usage,
                      "--rank '" + text + "': expected RANK=SCRIPT, e.g. 3=exit:7@1s");
    s.set_script(number(text.substr(0, eq), "--rank"), pm::sim::parse_script(text.substr(eq + 1)));
  }
  s.connect_back = f.connect_back;
  for (const auto& text : f.faults) s.faults.push_back(pm::sim::parse_fault(text));
  for (const auto& text : f.crashes) s.faults.push_back(pm::sim::parse_fault("crash:" + text));
  for (const auto& text : f.partitions)
    s.faults.push_back(pm::sim::parse_fault("partition:" + text));
  for (const auto& text : f.signals)
    s.faults.push_back(pm::sim::parse_fault("launcher-signal:" + text));
  s.seed = f.seed;
  if (f.random_faults != 0) {
    const auto plan = pm::sim::generate_faults(s, f.seed, f.random_faults, l.run_time / 2);
    s.faults.insert(s.faults.end(), plan.begin(), plan.end());
  }
  return s;
}

std::string rank_summary(const pm::job_report& r) {
  std::uint32_t counts[6] = {};
  for (const auto& rr : r.ranks) ++counts[static_cast<int>(rr.state)];
  std::string out;
  for (int i = 0; i < 6; ++i) {
    if (counts[i] == 0) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(counts[i]) + " " +
           pm::to_string(static_cast<pm::rank_state>(i));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB), after which
  // the simulation's large, short-lived buffers (the event queue's buckets, the streams' pieces in
  // flight during the abort) come from the heap and fragment it: a fixed threshold (glibc's
  // default, 128 KiB) gives them back when freed. 100,000 hosts: max RSS -8 %, docs/simulator.md.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  CLI::App app{"pmsim: simulate a parallel job's launch and failures against libpm's controller"};
  flags f;
  app.set_config("--scenario", "", "read options from a file (one 'name = value' a line)");
  app.add_option("--hosts", f.hosts, "hosts in the cluster (node0..)")->capture_default_str();
  app.add_option("--slots", f.slots, "slots per host")->capture_default_str();
  app.add_option("--host-slots", f.host_slots,
                 "slots of each host, e.g. 2,4,1 (overrides --hosts/--slots)");
  app.add_option("--np,-n", f.np, "ranks (default: one per slot)");
  app.add_option("--map-by", f.map_by, "slot, node, ppr:N:OBJ, core, numa, ... (:pe=M), as pmrun's")
      ->capture_default_str();
  app.add_option("--rank-by", f.rank_by, "slot, node, core, numa, ... as pmrun's");
  app.add_option("--bind-to", f.bind_to, "none, hwthread, core, l3cache, numa, package");
  app.add_option("--cpus-per-rank", f.cpus_per_rank, "cores per rank (:pe=M)");
  app.add_option("--gpus-per-rank", f.gpus_per_rank, "N[:shared][:reorder] GPUs per rank");
  app.add_flag("--report-bindings", f.report_bindings, "Open MPI's binding line per rank");
  app.add_option("--topology", f.topology,
                 "every host's shape: an hwloc XML file, or a summary (pmd --topology)");
  app.add_option("--host-topology", f.host_topologies, "H=FILE: host H's shape (repeatable)");
  app.add_flag("--oversubscribe", f.oversubscribe, "allow more ranks than slots");
  app.add_flag("--connect-back", f.connect_back,
               "agents started by one srun step call back with the job's token (docs/slurm.md)");
  app.add_flag("--no-abort,--no-abort-on-failure", f.no_abort,
               "a failed rank does not end the job");
  app.add_flag("--notify-failures", f.notify_failures,
               "with --no-abort: the agents are told of each failure (pmrun's PMIx events)");
  app.add_option("--kill-grace", f.kill_grace, "SIGTERM to SIGKILL (default 3s)");
  app.add_option("--timeout", f.timeout, "end the job after this long");
  app.add_option("--stall-timeout", f.stall_timeout,
                 "end the job when no rank progressed this long (a stall:R@T fault stops one)");
  app.add_option("--streams", f.streams, "output streams per rank (2, 1 merged, 0 none)");
  app.add_option("--max-restarts", f.max_restarts,
                 "restart the job in place up to N times on a failure (docs/resilience.md)");
  app.add_flag("--no-spares", f.no_spares,
               "with restarts: no agent on the hosts the map leaves empty (no spares)");
  app.add_option("--min-hosts", f.min_hosts,
                 "with restarts: a lost host without a spare, go on if K hosts are left");
  app.add_flag("--enable-recovery", f.enable_recovery,
               "restart only a failed rank, within --max-restarts for all ranks together "
               "(docs/resilience.md)");
  app.add_flag("--scripts-every-incarnation", f.scripts_every_incarnation,
               "the ranks' scripts (--fail, --rank, apps) run in every incarnation, not the "
               "first only");
  app.add_option("--fail", f.fails,
                 "R:N[@T]: rank R exits with N (at T, default half the run time)");
  app.add_option("--rank", f.ranks,
                 "R=SCRIPT: rank R's script, e.g. 3=signal:9@2s, 4=hang+ignore-term");
  app.add_option("--default", f.default_script, "every other rank's script (default exit:0)");
  app.add_option("--fault", f.faults,
                 "crash:H@T, partition:H@T1-T2, spawn-fail:R, agent-fail:H, silent:H, "
                 "ssh-fail:H, lost-exit:R, launcher-signal:SIG@T");
  app.add_option("--crash", f.crashes, "H@T: host H crashes at T");
  app.add_option("--partition", f.partitions, "H@T1-T2: host H is cut off from T1 to T2");
  app.add_option("--signal", f.signals,
                 "SIG@T: the launcher receives SIG (INT, TERM, USR1..) at T");
  app.add_option("--app", f.apps, "NP[=SCRIPT]: an MPMD app context (repeat: app 0, 1, ..)");
  app.add_option("--random-faults", f.random_faults,
                 "N faults drawn from the seed (the replay command lists them)");
  app.add_option("--seed", f.seed, "the PRNG seed")->capture_default_str();
  app.add_option("--trace", f.trace_file, "write the readable trace to FILE ('-': stdout)");
  app.add_flag("--decisions", f.decisions,
               "print the launcher's decisions to stderr as they are made (host: decision)");
  app.add_flag("--json", f.json, "print the report as JSON");
  app.add_flag("--check-determinism", f.twice, "run twice and compare the trace hashes");
  app.add_option("--link", f.link, "link latency (100us)");
  app.add_option("--link-jitter", f.link_jitter, "link jitter (50us)");
  app.add_option("--agent-hop", f.agent_hop, "time to start one agent, an ssh hop (20ms)");
  app.add_option("--fanout", f.fanout, "tree launch: agents started by each agent; 0: flat (32)");
  app.add_option("--concurrent-starts", f.concurrent_starts,
                 "agents one launcher or agent starts at once (32)");
  app.add_option("--spawn", f.spawn, "per rank spawn time (500us)");
  app.add_option("--spawn-jitter", f.spawn_jitter, "spawn jitter (250us)");
  app.add_option("--reaction", f.reaction, "SIGTERM to death, at most (1ms)");
  app.add_option("--heartbeat", f.heartbeat, "heartbeat interval (1s)");
  app.add_option("--heartbeat-timeout", f.heartbeat_timeout, "silence that loses a peer (3s)");
  app.add_option("--hello-timeout", f.hello_timeout, "wait for an agent's hello this long (20s)");
  app.add_option("--run-time", f.run_time, "the default script's run time (10s)");
  app.add_option("--run-jitter", f.run_jitter, "run time jitter (1s)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints the help; every other parse error is one line, as pmrun's are.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "pmsim: %s (pmsim --help lists the options)\n", e.what());
    return 2;
  }

  pm::sim::scenario s;
  try {
    s = build(f);
    pm::sim::check(s);
    std::ofstream trace_out;
    pm::sim::run_options opts;
    if (f.decisions) {
      opts.decisions = [](std::uint32_t host, const std::string& d) {
        std::fprintf(stderr, "decision: %u: %s\n", host, d.c_str());
      };
    }
    if (f.trace_file == "-") {
      opts.trace = [](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
      };
    } else if (!f.trace_file.empty()) {
      trace_out.open(f.trace_file);
      if (!trace_out)
        throw pm::error(pm::errc::usage, "--trace: cannot write '" + f.trace_file + "'");
      opts.trace = [&](std::string_view line) { trace_out << line << '\n'; };
    }

    std::printf("seed %llu\n", static_cast<unsigned long long>(s.seed));
    std::printf("replay: %s\n", s.replay_command().c_str());
    std::fflush(stdout);

    const auto wall_start = std::chrono::steady_clock::now();
    auto r = pm::sim::run(s, opts);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    if (f.twice) {
      auto again = pm::sim::run(s);
      if (again.trace_hash != r.trace_hash) {
        r.problems.push_back("not deterministic: a second run gave trace hash " +
                             pm::sim::hash_text(again.trace_hash));
        r.outcome = pm::sim::verdict::correctness;
      }
    }

    const auto& rep = r.report;
    std::printf("exit code %d: %s\n", rep.exit_code,
                rep.summary.empty() ? "every rank succeeded" : rep.summary.c_str());
    if (rep.failed_rank || rep.failed_host) {
      std::printf("first failure: %s", pm::to_string(rep.cause));
      if (rep.failed_rank) std::printf(", rank %u", *rep.failed_rank);
      if (rep.failed_host && *rep.failed_host < rep.host_names.size())
        std::printf(" on %s", rep.host_names[*rep.failed_host].c_str());
      if (rep.failed_status) std::printf(", %s", rep.failed_status->describe().c_str());
      std::printf("\n");
    }
    std::printf("ranks: %s\n", rank_summary(rep).c_str());
    for (const auto& line : r.lines) std::printf("line: %s\n", line.c_str());
    if (f.json) std::printf("%s\n", pm::to_json(rep).c_str());
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "simulated %s (finish at %s); %llu events in %.3f s (%.2f M events/s); max RSS %ld MiB\n",
        pm::sim::format_duration(r.end_time).c_str(),
        pm::sim::format_duration(r.finish_time).c_str(),
        static_cast<unsigned long long>(r.stats.events), wall,
        wall > 0 ? static_cast<double>(r.stats.events) / wall / 1e6 : 0.0, usage.ru_maxrss / 1024);
    std::printf("verdict: %s\n", pm::sim::to_string(r.outcome));
    for (const auto& p : r.problems) std::printf("  %s\n", p.c_str());
    if (r.outcome != pm::sim::verdict::ok) std::printf("replay: %s\n", s.replay_command().c_str());
    std::printf("trace hash %s\n", pm::sim::hash_text(r.trace_hash).c_str());
    return pm::sim::exit_code(r.outcome);
  } catch (const pm::error& e) {
    std::fprintf(stderr, "pmsim: %s\n", e.what());
    return 2;
  }
}
