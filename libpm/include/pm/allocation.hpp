// Allocations: the ordered hosts a job may use, and where they come from.
//
// Every parser here is pure: it takes text (and a name for messages) and returns a value or throws
// pm::error(errc::parse) whose message names the file or option, the line and the token, e.g.
//   hostfile hosts.txt:3: invalid slots value 'two' (expected a positive integer)
// Reading files and the environment happens in the callers (pmrun, the C API), which hand the
// text in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pm/environment.hpp"
#include "pm/export.hpp"

namespace pm {

/// One host of an allocation.
struct host {
  std::string name;         ///< as first spelled by the user; the local host's own hostname
  std::uint32_t slots = 1;  ///< ranks it takes without oversubscription
  std::uint32_t max_slots =
      0;  ///< hard limit, never exceeded; 0 means none (Open MPI's "Max slots: 0")
  bool slots_given = true;  ///< false: a single bare hostfile line; slots = its cores once known
  bool local = false;       ///< names this machine (localhost, its hostnames, its addresses)
  /// How ssh reaches the host: `bob@node1` (-H, hostfile) or hostfile `username=bob`; empty: ssh's
  /// own default (the ssh config, else the local user name).
  std::string user{};
  /// Hostfile `port=2222`; 0: ssh's own default (the ssh config, else 22).
  std::uint16_t port = 0;

  friend bool operator==(const host&, const host&) = default;
};

/// Where an allocation came from; it decides the default oversubscription rule.
enum class allocation_source {
  implicit_local,  ///< nothing given: this machine, one slot per core, oversubscription allowed
  host_list,       ///< -H/--host
  hostfile,        ///< --hostfile/--machinefile
  slurm,           ///< SLURM_JOB_NODELIST / SLURM_STEP_NODELIST
  pbs,             ///< PBS_NODEFILE
  api,             ///< built host by host by an embedding program
};

PM_API const char* to_string(allocation_source source) noexcept;

struct allocation {
  std::vector<host> hosts;
  allocation_source source = allocation_source::api;

  std::uint64_t total_slots() const noexcept;
  /// Index of the host with this name (exact match on host::name), if any.
  std::optional<std::uint32_t> find(std::string_view name) const noexcept;

  friend bool operator==(const allocation&, const allocation&) = default;
};

/// What this machine calls itself; probed once by the impure local_host_info() and passed into
/// the pure functions, so that tests can pretend to be any machine.
struct local_host {
  std::string hostname;  ///< gethostname(), e.g. "node1"
  std::vector<std::string>
      aliases;              ///< other names and addresses: "localhost", FQDN, 127.0.0.1, ...
  std::uint32_t cores = 1;  ///< processor cores available to us

  /// True when `name` is this machine: the hostname, an alias, any 127.x address, or a name
  /// whose short form (up to the first dot) is the hostname's.
  bool is_me(std::string_view name) const;
};

/// Probes this machine (gethostname, getifaddrs, sched_getaffinity).
PM_API local_host local_host_info();

/// -H/--host: "a,b:4,bob@c,10.0.0.2:2". A host without ":n" has one slot; a repeated host adds
/// up (with the same user: another one is an error). `option` names the flag in messages ("-H").
PM_API allocation parse_host_list(std::string_view text, std::string_view option = "-H");

/// What a host discovery command printed (restart_policy::host_discovery): one `host[:slots]`
/// (also `user@host[:slots]`) a line, blank lines and `#` comments skipped; a host named twice
/// adds up. Throws pm::error(errc::parse) naming the first line that is not one.
PM_API std::vector<host> parse_discovered_hosts(std::string_view text);

/// An Open MPI 4.1 hostfile: `[user@]name [slots=N] [max_slots=M] [username=U] [port=P]`, '#'
/// comments, blank lines. Repeated bare lines add a slot each; a repeated name with slots= is an
/// error, and so is one with another user or port; max_slots below slots is an error; a single
/// bare line leaves slots_given false (cores decide).
PM_API allocation parse_hostfile(std::string_view text, std::string_view filename);

/// Slurm hostlist expression: "node[01-04,07],gpu[1-2]", "n[1-2]-ib" (zero padding kept).
PM_API std::vector<std::string> expand_hostlist(std::string_view expr,
                                                std::string_view variable = "SLURM_JOB_NODELIST");

/// SLURM_TASKS_PER_NODE: "2(x3),1" for `nodes` nodes.
PM_API std::vector<std::uint32_t> parse_tasks_per_node(
    std::string_view text, std::size_t nodes, std::string_view variable = "SLURM_TASKS_PER_NODE");

/// The allocation of the Slurm job (or step) this process runs in, if it runs in one.
/// Inside a step (SLURM_STEP_NODELIST set) the SLURM_STEP_* forms are used. Slots per node are
/// divided by SLURM_CPUS_PER_TASK when set, as Open MPI does.
PM_API std::optional<allocation> slurm_allocation(const env_map& env);

/// PBS_NODEFILE contents: one host per line, a host's slots = how often it appears.
PM_API allocation parse_pbs_nodefile(std::string_view text, std::string_view filename);

/// Reads a whole file for the parsers (throws pm::error naming the file when it cannot, or when it
/// holds more than max_text_file_bytes: `--hostfile /dev/zero` would otherwise grow without end).
using file_reader = std::function<std::string(const std::string& path)>;
PM_API std::string read_text_file(const std::string& path);
/// 256 MiB: a hostfile of the parsers' 10,000,000 hosts at about 20 bytes a line fits.
inline constexpr std::size_t max_text_file_bytes = std::size_t{256} << 20;

/// The allocation of the batch system this process runs in (Slurm, then PBS), if any.
PM_API std::optional<allocation> managed_allocation(const env_map& env, const file_reader& read);

/// What the user and the environment gave; resolve_allocation() turns it into one allocation.
struct allocation_inputs {
  std::optional<allocation> managed;    ///< from Slurm/PBS when running inside an allocation
  std::optional<allocation> hostfile;   ///< --hostfile
  std::optional<allocation> host_list;  ///< -H (all -H options merged)
};

/// Open MPI's rules: -H selects from a hostfile, both select from a managed allocation (a host
/// outside it is an error; the result keeps the managed allocation's host order and no host gets
/// more slots than it grants), otherwise the managed allocation, otherwise this machine with one
/// slot per core. Local aliases (localhost, 127.0.0.1, the FQDN) become one host named by the
/// hostname; a bare-line local host gets `me.cores` slots. A host's user and port come from the
/// selecting source, else from the one it selects from; two that differ are an error (errc::parse
/// for two spellings of one host, errc::allocation for a selection). docs/allocation.md has every
/// rule.
PM_API allocation resolve_allocation(const allocation_inputs& inputs, const local_host& me);

}  // namespace pm
