// pmrun's option table and parser. mpirun's syntax (single-dash long options, `-mca k v` with two
// values, MPMD segments split by `:`) does not fit a general CLI library, so the table is ours;
// it is also the source of `pmrun --help`.
#include <algorithm>
#include <charconv>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include "cli/messages.hpp"
#include "cli/remote_options.hpp"
#include "pm/command_line.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
namespace {

struct parse_state {
  run_options opts;
  app_context* app = nullptr;                   // the segment being parsed
  std::optional<std::string> default_hostfile;  // --default-hostfile: when no --hostfile comes
  bool recovery_disabled = false;               // --disable-recovery
};

using handler =
    std::function<void(parse_state&, std::string_view name, std::span<const std::string>)>;

enum class scope { global, per_app };

struct option_spec {
  std::vector<std::string_view> names;  // first is the canonical one, shown in help
  std::string_view metavar;             // empty: a flag
  int arity;                            // values it takes
  std::string_view help;
  handler apply;
  scope where = scope::global;
};

template <class T>
T parse_number(std::string_view name, std::string_view value, T min, T max) {
  T out{};
  const auto* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (value.empty() || ec == std::errc::invalid_argument || ptr != end) {
    throw error(errc::usage, cli::not_a_number(name, value));
  }
  if (ec == std::errc::result_out_of_range || out < min || out > max) {
    throw error(errc::usage,
                cli::out_of_range(name, value, std::to_string(min), std::to_string(max)));
  }
  return out;
}

// A count of restarts or hosts: "-1" says what is wrong with it, not only "not a number".
std::uint32_t parse_count(std::string_view name, std::string_view value, std::uint32_t min) {
  if (value.starts_with('-')) {
    throw error(errc::usage,
                std::string(name) + " '" + std::string(value) + "': a count cannot be negative");
  }
  return parse_number<std::uint32_t>(name, value, min, 1'000'000);
}

// `zero_is_never`: 0 turns the option off (--dvm-idle-timeout), and a bad value's line says so.
std::chrono::milliseconds parse_seconds(std::string_view name, std::string_view value,
                                        bool zero_is_never = false) {
  // Seconds, possibly fractional ("2.5"), at most a year.
  double seconds = 0;
  const auto* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, seconds);
  if (value.empty() || ec != std::errc() || ptr != end || !(seconds >= 0)) {
    throw error(errc::usage, zero_is_never ? cli::bad_seconds_or_zero(name, value)
                                           : cli::bad_seconds(name, value));
  }
  if (seconds > 366.0 * 24 * 3600) {
    throw error(errc::usage, std::string(name) + " '" + text::printable(value) +
                                 "': at most 366 days (31622400 seconds)");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

// A value parsed by pm/host_binding.hpp's parsers, its message kept on one line (the value may
// hold anything).
template <class F>
auto topology_option(F&& parse) {
  try {
    return parse();
  } catch (const error& e) {
    throw error(errc::usage, text::printable(e.what()));
  }
}

// slot | node | ppr:N:OBJ | core | hwthread | l3cache | numa | package (socket), each with
// Open MPI's modifiers (:pe=M, :OVERSUBSCRIBE, :NOOVERSUBSCRIBE). Across hosts, the object forms
// place ranks as slot does; within each host plan_host follows them (docs/gpus.md).
void apply_map_by(parse_state& st, std::string_view name, std::string_view value) {
  if (value.empty()) throw error(errc::usage, cli::empty_value(name));
  // ":OVERSUBSCRIBE" alone, or "slot:" as mpirun takes it: slot.
  const std::string spec = value.front() == ':' ? "slot" + std::string(value) : std::string(value);
  set_map_by(st.opts.job.mapping, topology_option([&] { return topo::parse_map_by(spec); }));
}

// DIR, or DIR:MODS with MODS a comma list of nocopy and nojobid (Open MPI 4.1's
// "--output-filename out:nojobid,nocopy"). A last ':' followed by anything else is part of DIR.
void apply_output_filename(parse_state& st, std::string_view name, std::string_view value) {
  std::string dir(value);
  bool nocopy = false, nojobid = false;
  if (const auto colon = dir.rfind(':'); colon != std::string::npos && colon > 0) {
    bool known = true;
    bool n_copy = false, n_jobid = false;
    std::string_view mods(dir);
    mods.remove_prefix(colon + 1);
    while (known) {
      const auto comma = mods.find(',');
      const auto mod = mods.substr(0, comma);
      if (mod == "nocopy")
        n_copy = true;
      else if (mod == "nojobid")
        n_jobid = true;
      else
        known = false;
      if (comma == std::string_view::npos) break;
      mods.remove_prefix(comma + 1);
    }
    if (known) {
      nocopy = n_copy;
      nojobid = n_jobid;
      dir.resize(colon);
    }
  }
  if (dir.empty()) throw error(errc::usage, cli::empty_value(name));
  st.opts.output_dir = dir;
  st.opts.output_nocopy = st.opts.output_nocopy || nocopy;
  st.opts.output_nojobid = nojobid;
}

// Open MPI 5: --output tag,timestamp,merge-stderr-to-stdout,dir=DIR[:nocopy]
void apply_output(parse_state& st, std::string_view name, std::string_view value) {
  std::size_t pos = 0;
  std::string_view v = value;
  while (pos <= v.size()) {
    auto comma = v.find(',', pos);
    auto item =
        v.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item == "tag")
      st.opts.tag_output = true;
    else if (item == "timestamp")
      st.opts.timestamp_output = true;
    else if (item == "merge-stderr-to-stdout" || item == "merge")
      st.opts.merge_stderr = true;
    else if (item == "json-lines")
      st.opts.json_lines = true;
    else if (item.starts_with("dir="))
      apply_output_filename(st, name, item.substr(4));
    else if (item.starts_with("file="))
      apply_output_filename(st, name, item.substr(5));
    else
      throw error(errc::usage, cli::unknown_output_mode(name, item));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
}

void apply_interfaces(parse_state& st, std::string_view name, std::string_view value) {
  // "eth0,10.0.0.0/24": Open MPI's oob_tcp_if_include syntax; repeated options add up.
  if (value.empty()) throw error(errc::usage, cli::empty_value(name));
  std::size_t pos = 0;
  while (pos <= value.size()) {
    const auto comma = value.find(',', pos);
    const auto item =
        value.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (!cli::valid_interface_spec(item)) {
      throw error(errc::usage, cli::bad_interface(name, value, item));
    }
    st.opts.remote.interfaces.emplace_back(item);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
}

}  // namespace

bool parse_mca_boolean(std::string_view value, bool& out) {
  // Open MPI's boolean MCA values (4.1 takes these, any case; "on"/"off" it refuses too).
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "true" || v == "yes") {
    out = true;
  } else if (v == "0" || v == "false" || v == "no") {
    out = false;
  } else {
    return false;
  }
  return true;
}

namespace {

bool mca_boolean(std::string_view name, std::string_view key, std::string_view value) {
  bool out = false;
  if (!parse_mca_boolean(value, out)) throw error(errc::usage, cli::bad_boolean(name, key, value));
  return out;
}

void apply_mca(parse_state& st, std::string_view name, std::string_view key,
               std::string_view value) {
  if (key.empty()) throw error(errc::usage, cli::empty_mca_key(name, value));
  const std::string option = std::string(name) + " " + std::string(key);
  // Keys that steer pmrun itself; every key, those too, reaches the ranks as OMPI_MCA_key, as
  // mpirun passes each -mca on (checked with mpirun 4.1: plm_rsh_agent, oob_tcp_if_include and
  // orte_abort_on_non_zero_status all appear in the ranks' environment).
  if (key == "orte_abort_on_non_zero_status" || key == "prte_abort_on_non_zero_status") {
    st.opts.abort_on_failure = mca_boolean(name, key, value);
    st.opts.abort_policy_given = true;
  } else if (key.starts_with("plm_rsh_") || key.starts_with("plm_ssh_")) {
    // Open MPI 4 (rsh) and 5 (ssh) spellings name the same launcher settings.
    const std::string canonical = "plm_ssh_" + std::string(key.substr(8));
    st.opts.launcher_mca.emplace_back(canonical, std::string(value));
    if (canonical == "plm_ssh_agent") {
      st.opts.remote.rsh_agent = cli::agent_words(option, value);
    } else if (canonical == "plm_ssh_args") {
      st.opts.remote.rsh_args = cli::ssh_args(option, value);
    } else if (canonical == "plm_ssh_num_concurrent") {
      st.opts.remote.max_ssh = parse_number<std::uint32_t>(option, value, 1, 4096);
    } else if (canonical == "plm_ssh_no_tree_spawn") {
      if (mca_boolean(name, key, value)) st.opts.remote.launch = launch_shape::flat;
    }
  } else if (key == "orte_rsh_agent") {  // Open MPI 4's older name of plm_rsh_agent
    st.opts.remote.rsh_agent = cli::agent_words(option, value);
  } else if (key == "oob_tcp_if_include") {
    apply_interfaces(st, option, value);
  }
  st.opts.exports.mca.emplace_back(std::string(key), std::string(value));
}

const std::vector<option_spec>& option_table() {
  static const std::vector<option_spec> table = {
      // --- what and where
      {{"-np", "-n", "-c", "--np", "--n"},
       "N",
       1,
       "number of ranks to start (default: every slot)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         const auto np = parse_number<std::uint32_t>(n, v[0], 0, 100'000'000);
         if (np == 0) throw error(errc::usage, cli::np_zero(n));
         st.app->np = np;
       },
       scope::per_app},
      {{"--host", "-H"},
       "LIST",
       1,
       "hosts to use: a,b:4,c (a host without :N has one slot)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.host_lists.push_back(v[0]);
         st.opts.host_list_options.emplace_back(n);
         st.app->hosts.push_back(v[0]);  // names resolved against the allocation later
       },
       scope::per_app},
      {{"--hostfile", "--machinefile"},
       "FILE",
       1,
       "hosts from an Open MPI hostfile (name slots=N max_slots=M)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         if (st.opts.hostfile && *st.opts.hostfile != v[0]) {
           throw error(errc::usage, cli::second_hostfile(n, *st.opts.hostfile, v[0]));
         }
         st.opts.hostfile = v[0];
       }},
      {{"--default-hostfile"},
       "FILE",
       1,
       "the hostfile used when no --hostfile is given (as mpirun)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.default_hostfile = v[0];
       }},
      {{"--wdir", "--wd", "--cwd", "-wdir"},
       "DIR",
       1,
       "working directory of the ranks",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.app->wdir = v[0];
       },
       scope::per_app},
      // --- mapping
      {{"--map-by"},
       "POLICY",
       1,
       "slot (default), node, core, hwthread, l3cache, numa, package, ppr:N:OBJ; :pe=M, "
       ":OVERSUBSCRIBE",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         apply_map_by(st, n, v[0]);
       }},
      {{"--rank-by"},
       "OBJ",
       1,
       "rank numbering: slot|node across hosts, core|numa|... within one (default: as mapped)",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         set_rank_by(st.opts.job.mapping,
                     topology_option([&] { return topo::parse_rank_by(v[0]); }));
       }},
      {{"--npernode", "-N"},
       "N",
       1,
       "N ranks on every host (ppr:N:node)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.job.mapping.ppr = parse_number<std::uint32_t>(n, v[0], 1, 1u << 20);
         st.opts.job.mapping.by = map_by::ppr_node;
         st.opts.job.mapping.host.map =
             topo::map_option{topo::object::node, st.opts.job.mapping.ppr, 0, {}};
       }},
      {{"--bind-to"},
       "OBJ",
       1,
       "none (default), hwthread, core, l3cache, numa, package; :overload-allowed",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         st.opts.job.mapping.host.bind = topology_option([&] { return topo::parse_bind_to(v[0]); });
       }},
      {{"--cpus-per-rank", "--cpus-per-proc"},
       "M",
       1,
       "M cores per rank (as :pe=M)",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         st.opts.job.mapping.host.cpus_per_rank =
             topology_option([&] { return topo::parse_cpus_per_rank(v[0]); });
       }},
      {{"--gpus-per-rank", "-gpus-per-proc", "--gpus-per-proc"},
       "N[:shared][:reorder]",
       1,
       "N GPUs per rank, the nearest first (docs/gpus.md)",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         st.opts.job.mapping.host.gpus =
             topology_option([&] { return topo::parse_gpus_per_rank(v[0]); });
       }},
      {{"--report-bindings"},
       "",
       0,
       "print each rank's binding on stderr, as mpirun does",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.job.mapping.report_bindings = true;
       }},
      {{"--oversubscribe"},
       "",
       0,
       "allow more ranks than slots on a host",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.job.mapping.oversubscribe = true;
       }},
      {{"--nooversubscribe"},
       "",
       0,
       "never place more ranks than slots (also on this machine)",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.job.mapping.oversubscribe = false;
       }},
      {{"--display-map"},
       "",
       0,
       "print the job map (Open MPI 4 format) before launching",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.display_map = true;
       }},
      {{"--display-map-json"},
       "FILE",
       1,
       "write the job map as JSON to FILE (- for stdout)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.display_map_json = v[0];
       }},
      {{"--display-allocation"},
       "",
       0,
       "print the allocated hosts (Open MPI 4 format) before launching",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.display_allocation = true;
       }},
      {{"--do-not-launch"},
       "",
       0,
       "map the job (and display it) but start nothing",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.do_not_launch = true;
       }},
      {{"--topology-file"},
       "FILE",
       1,
       "with --do-not-launch: plan every host from this summary (`pmd --topology` prints one)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.topology_file = v[0];
       }},
      // --- environment
      {{"-x"},
       "VAR[=VALUE]",
       1,
       "export VAR (from pmrun's environment, or with VALUE) to the ranks",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         st.opts.exports.x.push_back(v[0]);
       }},
      {{"--mca", "-mca", "--gmca", "-gmca"},
       "KEY VALUE",
       2,
       "set an MCA parameter: reaches the ranks as OMPI_MCA_KEY=VALUE",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         apply_mca(st, n, v[0], v[1]);
       }},
      {{"--env-profiles"},
       "LIST",
       1,
       "variable families to set: ompi,torch,tf,azureml,slurm,hydra, all, none, default",
       [](parse_state& st, std::string_view, std::span<const std::string> v) {
         st.opts.profiles = parse_env_profiles(v[0]);
       }},
      {{"--master-port"},
       "PORT",
       1,
       "MASTER_PORT for the ranks (default: a free port)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.master_port = parse_number<std::uint16_t>(n, v[0], 1, 65535);
       }},
      // --- other hosts
      {{"--launch-agent"},
       "PATH",
       1,
       "pmd on the other hosts (default: the same path as here)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.remote.launch_agent = v[0];
       }},
      {{"--prefix"},
       "DIR",
       1,
       "pmd on the other hosts is DIR/bin/pmd",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         if (v[0][0] != '/') throw error(errc::usage, cli::not_absolute(n, v[0]));
         st.opts.remote.prefix = v[0];
       }},
      {{"--iface"},
       "LIST",
       1,
       "interfaces or networks for the launcher's address: eth0,10.0.0.0/24",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         apply_interfaces(st, n, v[0]);
       }},
      {{"--launcher"},
       "auto|ssh|srun|local",
       1,
       "what starts the other hosts' agents (default auto: srun inside Slurm, else ssh)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0] == "auto")
           st.opts.remote.launcher = launcher_choice::automatic;
         else if (v[0] == "ssh")
           st.opts.remote.launcher = launcher_choice::ssh;
         else if (v[0] == "srun")
           st.opts.remote.launcher = launcher_choice::srun;
         else if (v[0] == "local")
           st.opts.remote.launcher = launcher_choice::local;
         else
           throw error(errc::usage,
                       std::string(n) + " '" + v[0] + "': expected auto, ssh, srun or local");
       }},
      {{"--launch"},
       "auto|flat|tree",
       1,
       "flat: one ssh per host; tree: agents start agents (default auto)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0] == "auto")
           st.opts.remote.launch = launch_shape::automatic;
         else if (v[0] == "flat")
           st.opts.remote.launch = launch_shape::flat;
         else if (v[0] == "tree")
           st.opts.remote.launch = launch_shape::tree;
         else
           throw error(errc::usage, cli::bad_launch_shape(n, v[0]));
       }},
      {{"--tree-fanout"},
       "K",
       1,
       "hosts each node of the launch tree starts (default 32)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.remote.tree_fanout = parse_number<std::uint32_t>(n, v[0], 2, 4096);
       }},
      {{"--max-ssh"},
       "N",
       1,
       "ssh clients running at once (default 32)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.remote.max_ssh = parse_number<std::uint32_t>(n, v[0], 1, 4096);
       }},
      {{"--heartbeat-interval"},
       "SECONDS",
       1,
       "time between agent heartbeats (default 0.5)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         const auto interval = parse_seconds(n, v[0]);
         if (interval.count() == 0) throw error(errc::usage, cli::bad_seconds(n, v[0]));
         if (interval > std::chrono::hours(1))
           throw error(errc::usage, cli::out_of_range(n, v[0], "0.001", "3600"));
         st.opts.remote.heartbeat_interval = interval;
       }},
      {{"--heartbeat-misses"},
       "N",
       1,
       "heartbeats missed before a host is lost (default 4: lost after 2 s)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.remote.heartbeat_misses = parse_number<std::uint32_t>(n, v[0], 1, 1000);
       }},
      // --- output
      {{"--tag-output"},
       "",
       0,
       "prefix each line with [1,RANK]<stdout>: as Open MPI does",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.tag_output = true;
       }},
      {{"--timestamp-output"},
       "",
       0,
       "prefix each line with the time it was received",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.timestamp_output = true;
       }},
      {{"--output-filename"},
       "DIR[:nojobid,nocopy]",
       1,
       "also write each rank's output to DIR/1/rank.R/stdout|stderr (nojobid: DIR/rank.R; "
       "nocopy: only there)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         apply_output_filename(st, n, v[0]);
       }},
      {{"--merge-stderr-to-stdout"},
       "",
       0,
       "send the ranks' stderr to stdout",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.merge_stderr = true;
       }},
      {{"--output"},
       "LIST",
       1,
       "Open MPI 5 spelling: tag,timestamp,merge-stderr-to-stdout,dir=DIR",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         apply_output(st, n, v[0]);
       }},
      {{"--json-lines"},
       "",
       0,
       "print output as JSON lines: {rank, stream, time, line}",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.json_lines = true;
       }},
      {{"--stdin"},
       "RANK|all|none",
       1,
       "where pmrun's stdin goes (default: rank 0)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0] == "all")
           st.opts.input = {stdin_target::all, 0};
         else if (v[0] == "none")
           st.opts.input = {stdin_target::none, 0};
         else
           st.opts.input = {stdin_target::rank,
                            parse_number<std::uint32_t>(n, v[0], 0, 100'000'000)};
       }},
      {{"--no-pmix"},
       "",
       0,
       "give the ranks no PMIx server (MPI programs then run as singletons)",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.pmix = false;
       }},
      // --- failures
      {{"--no-abort-on-failure"},
       "",
       0,
       "let the other ranks run on when one fails",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.abort_on_failure = false;
         st.opts.abort_policy_given = true;
       }},
      {{"--timeout"},
       "SECONDS",
       1,
       "abort the job after SECONDS (exit code 124)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.timeout = parse_seconds(n, v[0]);
         if (st.opts.timeout.count() == 0) throw error(errc::usage, cli::bad_seconds(n, v[0]));
       }},
      {{"--dvm"},
       "start|stop",
       1,
       "start a DVM on the hosts (agents kept for many jobs) or stop one (docs/dvm.md)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0] != "start" && v[0] != "stop") {
           throw error(errc::usage,
                       std::string(n) + " '" + text::untrusted(v[0]) + "': start or stop");
         }
         st.opts.dvm_action = v[0];
       }},
      {{"--report-uri"},
       "FILE",
       1,
       "with --dvm start: write the DVM's URI to FILE (- for stdout)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.report_uri = v[0];
       }},
      {{"--dvm-uri"},
       "URI",
       1,
       "run on the DVM at file:PATH or unix:PATH (search: this user's; or $PM_DVM_URI)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.dvm_uri = v[0];
       }},
      {{"--dvm-idle-timeout"},
       "SECONDS",
       1,
       "with --dvm start: the DVM stops after SECONDS without a job (0: never, the default)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.dvm_idle_timeout = parse_seconds(n, v[0], true);
       }},
      {{"--dvm-no-wait"},
       "",
       0,
       "on a DVM: refuse the job when its slots are taken, instead of waiting",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.dvm_no_wait = true;
       }},
      {{"--max-restarts", "--max_restarts"},
       "N",
       1,
       "on a failure, restart the whole job in place, up to N times (docs/resilience.md)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.max_restarts = parse_count(n, v[0], 0);
       }},
      {{"--min-hosts"},
       "K",
       1,
       "with --max-restarts: no spare for a lost host, go on if K hosts are left",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.min_hosts = parse_count(n, v[0], 1);
       }},
      {{"--host-discovery-script"},
       "CMD",
       1,
       "with --max-restarts: at each restart, hosts CMD prints (host:slots a line) join",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].find_first_not_of(" \t") == std::string::npos)
           throw error(errc::usage, std::string(n) + ": the command is empty");
         st.opts.host_discovery = v[0];
       }},
      {{"--no-spares"},
       "",
       0,
       "with --max-restarts: no agent on the hosts the map leaves empty",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.spares = false;
       }},
      {{"--enable-recovery"},
       "",
       0,
       "restart only the failed rank (with --max-restarts N: N for all ranks together)",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         if (st.recovery_disabled) throw error(errc::usage, cli::recovery_both());
         st.opts.enable_recovery = true;
       }},
      {{"--disable-recovery"},
       "",
       0,
       "no rank is restarted alone (the default; PRRTE's spelling)",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         if (st.opts.enable_recovery) throw error(errc::usage, cli::recovery_both());
         st.recovery_disabled = true;
       }},
      {{"--stall-timeout"},
       "SECONDS",
       1,
       "when no rank used CPU or wrote for SECONDS: name each rank's state, abort (214)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.stall_timeout = parse_seconds(n, v[0]);
         if (st.opts.stall_timeout.count() == 0) {
           throw error(errc::usage, cli::bad_seconds(n, v[0]));
         }
       }},
      {{"--kill-grace"},
       "SECONDS",
       1,
       "time between SIGTERM and SIGKILL when aborting (default 3)",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         st.opts.kill_grace = parse_seconds(n, v[0]);
       }},
      {{"--report"},
       "FILE",
       1,
       "write a JSON report of the job (every rank's status) to FILE",
       [](parse_state& st, std::string_view n, std::span<const std::string> v) {
         if (v[0].empty()) throw error(errc::usage, cli::empty_value(n));
         st.opts.report_file = v[0];
       }},
      // --- misc
      {{"--allow-run-as-root"},
       "",
       0,
       "allow running as root (or OMPI_ALLOW_RUN_AS_ROOT=1 and _CONFIRM=1)",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.allow_run_as_root = true;
       }},
      {{"--app"},
       "FILE",
       1,
       "run the app contexts of FILE, one per line (\"-np 2 ./a x\"; # comments)",
       [](parse_state&, std::string_view n, std::span<const std::string> v) {
         // pmrun reads the file first (expand_app_file); here it is only misplaced.
         throw error(errc::usage, cli::misplaced_app_file(n, v[0]));
       }},
      {{"--quiet", "-q"},
       "",
       0,
       "accepted for mpirun compatibility",
       [](parse_state&, std::string_view, std::span<const std::string>) {}},
      {{"--verbose", "-v"},
       "",
       0,
       "accepted for mpirun compatibility (prints nothing more)",
       [](parse_state&, std::string_view, std::span<const std::string>) {}},
      {{"--help", "-h"},
       "",
       0,
       "print this help",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.help = true;
       }},
      {{"--version", "-V"},
       "",
       0,
       "print the version",
       [](parse_state& st, std::string_view, std::span<const std::string>) {
         st.opts.version = true;
       }},
  };
  return table;
}

// Finds the option an argument names: exact names, "-long" for "--long", and "--long=value".
const option_spec* find_option(std::string_view arg, std::optional<std::string>& inline_value) {
  inline_value.reset();
  std::string_view name = arg;
  if (arg.starts_with("--")) {
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      inline_value = std::string(arg.substr(eq + 1));
    }
  }
  for (const auto& spec : option_table()) {
    for (auto n : spec.names) {
      if (n == name) return &spec;
      // Open MPI accepts every long option with one dash: -map-by, -tag-output, ...
      if (n.starts_with("--") && name.size() > 2 && name[0] == '-' && name[1] != '-' &&
          n.substr(1) == name) {
        return &spec;
      }
    }
  }
  return nullptr;
}

}  // namespace

run_options parse_command_line(std::span<const std::string> args) {
  parse_state st;
  std::size_t i = 0;
  while (true) {
    st.opts.job.apps.emplace_back();
    st.app = &st.opts.job.apps.back();
    const auto segment = st.opts.job.apps.size() - 1;
    // Options, up to the program.
    while (i < args.size() && args[i] != ":" && !args[i].empty() && args[i][0] == '-' &&
           args[i] != "-") {
      if (args[i] == "--") {  // "--" ends pmrun's options: the program follows
        ++i;
        break;
      }
      std::optional<std::string> inline_value;
      const auto* spec = find_option(args[i], inline_value);
      if (spec == nullptr) throw error(errc::usage, cli::unknown_option(args[i]));
      const std::string name = args[i].substr(0, args[i].find('='));
      std::vector<std::string> values;
      if (inline_value) {
        if (spec->arity != 1) throw error(errc::usage, cli::unexpected_value(name));
        values.push_back(*inline_value);
      } else {
        for (int k = 0; k < spec->arity; ++k) {
          if (i + 1 + static_cast<std::size_t>(k) >= args.size() ||
              args[i + 1 + static_cast<std::size_t>(k)] == ":") {
            throw error(errc::usage, cli::missing_value(name, spec->metavar));
          }
          values.push_back(args[i + 1 + static_cast<std::size_t>(k)]);
        }
      }
      spec->apply(st, name, values);
      i += 1 + (inline_value ? 0 : static_cast<std::size_t>(spec->arity));
    }
    // The program and its arguments, up to the next ':'.
    while (i < args.size() && args[i] != ":") st.app->argv.push_back(args[i++]);
    if (st.app->argv.empty() && !(st.opts.help || st.opts.version || !st.opts.dvm_action.empty())) {
      throw error(errc::usage,
                  segment == 0 ? cli::no_program() : cli::no_program_in_segment(segment));
    }
    if (i >= args.size()) break;
    ++i;  // ':'
    if (i >= args.size()) throw error(errc::usage, cli::no_program_in_segment(segment + 1));
  }
  if (!st.opts.hostfile) st.opts.hostfile = st.default_hostfile;
  topo::check_cpus_per_rank(st.opts.job.mapping.host);  // at once, not when hosts answer
  if (!st.opts.spares && (st.opts.max_restarts == 0 || st.opts.enable_recovery)) {
    // Said where it would change nothing, it is a misunderstanding: named, as --min-hosts is.
    throw error(errc::usage, st.opts.max_restarts == 0
                                 ? "--no-spares needs --max-restarts: hosts the map leaves empty "
                                   "get an agent only when the whole job may restart"
                                 : "--no-spares goes with whole-job restarts; --enable-recovery "
                                   "restarts single ranks where they ran, never on a spare");
  }
  if (st.opts.enable_recovery && st.opts.max_restarts == 0 && !st.opts.abort_policy_given) {
    // PRRTE's meaning: recovery without restarts lets the job run on past a failed rank (unless
    // -mca orte_abort_on_non_zero_status said otherwise on the command line).
    st.opts.abort_on_failure = false;
    st.opts.abort_policy_given = true;
  }
  if (st.opts.help || st.opts.version || !st.opts.dvm_action.empty()) {
    if (st.opts.job.apps.size() == 1 && st.opts.job.apps[0].argv.empty()) st.opts.job.apps.clear();
  }
  return st.opts;
}

std::vector<std::string> expand_app_file(std::span<const std::string> args,
                                         const file_reader& read) {
  // The options before the first program (or the first ':'); --app among them names the file.
  std::vector<std::string> out;
  std::optional<std::string> file;
  std::string file_option;
  std::size_t i = 0;
  while (i < args.size() && args[i] != ":" && !args[i].empty() && args[i][0] == '-' &&
         args[i] != "-" && args[i] != "--") {
    std::optional<std::string> inline_value;
    const auto* spec = find_option(args[i], inline_value);
    const std::size_t values =
        spec == nullptr || inline_value ? 0 : static_cast<std::size_t>(spec->arity);
    if (spec != nullptr && spec->names.front() == "--app") {
      // One file names the whole job: a second would silently replace the first.
      if (file) throw error(errc::usage, cli::second_app_file(file_option, *file));
      file_option = args[i].substr(0, args[i].find('='));
      if (inline_value) {
        file = *inline_value;
      } else if (i + 1 < args.size()) {
        file = args[i + 1];
      } else {
        throw error(errc::usage, cli::missing_value(file_option, spec->metavar));
      }
      i += 1 + values;
      continue;
    }
    for (std::size_t k = 0; k <= values && i + k < args.size(); ++k) out.push_back(args[i + k]);
    i += 1 + values;
  }
  if (!file) return {args.begin(), args.end()};
  if (i < args.size())
    throw error(errc::usage, cli::app_file_and_program(file_option, *file, args[i]));
  const std::string text = read(*file);
  bool first = true;
  std::size_t line_number = 0, pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto words =
        cli::agent_args(file_option + " '" + *file + "' line " + std::to_string(line_number), line);
    if (words.empty()) continue;
    if (!first) out.emplace_back(":");
    out.insert(out.end(), words.begin(), words.end());
    first = false;
  }
  if (first) throw error(errc::usage, cli::empty_app_file(file_option, *file));
  return out;
}

void apply_environment_options(run_options& options, const env_map& env) {
  if (!options.abort_policy_given) {
    const std::string name = "OMPI_MCA_orte_abort_on_non_zero_status";
    if (const auto it = env.find(name); it != env.end()) {
      bool abort = true;
      if (!parse_mca_boolean(it->second, abort)) {
        throw error(errc::usage, cli::bad_variable_boolean(name, it->second));
      }
      options.abort_on_failure = abort;
    }
  }
  if (options.timeout.count() == 0) {
    // Empty or 0: no limit (mpirun 4.1 reads 0, and anything not a number, as "abort now").
    if (const auto it = env.find("MPIEXEC_TIMEOUT"); it != env.end() && !it->second.empty()) {
      options.timeout = parse_seconds("MPIEXEC_TIMEOUT", it->second);
    }
  }
}

std::string help_text() {
  std::string out =
      "Usage: pmrun [OPTIONS] PROGRAM [ARGS...] [: [OPTIONS] PROGRAM [ARGS...]]...\n"
      "Launch and supervise the ranks of a parallel job (mpirun-compatible spelling).\n"
      "Long options also work with one dash (-np, -map-by, -x, -mca, -wdir, ...), and a\n"
      "long option's one value may follow '=' (--timeout=3, --np=4, --map-by=node).\n"
      "Options marked * apply to their MPMD segment; the others to the whole job.\n\n";
  for (const auto& spec : option_table()) {
    std::string names;
    for (auto n : spec.names) {
      if (n == "-gmca") continue;  // one-dash spellings of long options go without saying
      if (!names.empty()) names += ", ";
      names += n;
    }
    if (!spec.metavar.empty()) names += " " + std::string(spec.metavar);
    std::string line = "  " + names;
    line += spec.where == scope::per_app ? " *" : "";
    if (line.size() < 34)
      line.resize(34, ' ');
    else
      line += "\n" + std::string(34, ' ');
    out += line + std::string(spec.help) + "\n";
  }
  out +=
      "\nOther hosts are reached with ssh: -mca plm_rsh_agent \"ssh ARGS\" (or PM_RSH_AGENT) and\n"
      "-mca plm_rsh_args ARGS change the command; docs/multihost.md has the details.\n"
      "\npmrun --ps [PID] [--json] shows the running pmrun jobs of this user, or one job's ranks\n"
      "with their hosts, pids and states.\n"
      "\nExit status: the first failing rank's code (128+N for signal N), 124 timeout,\n"
      "125 launcher failure, 126/127 program not executable/not found, 2 bad usage,\n"
      "213 host lost, 214 stalled. docs/exit-codes.md has the full table.\n";
  return out;
}

}  // namespace pm
