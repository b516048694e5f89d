// Within one host: which cores, GPUs and NIC each of its ranks gets (docs/gpus.md,
// docs/mapping.md).
//
// pm::map_job decides which host each rank goes to; plan_host decides, for the ranks mapped to one
// host, their cpusets, GPUs and nearest NIC from that host's summary (pm/topology.hpp). It is a
// pure function: no hwloc, no I/O, the same answer for the same input. Options are Open MPI's:
//   --map-by ppr:N:OBJ[:pe=M] | core|l3cache|numa|package|node|slot|hwthread[:pe=M]
//   --rank-by hwthread|core|l3cache|numa|package (slot and node number ranks across hosts)
//   --bind-to none|hwthread|core|l3cache|numa|package[:overload-allowed]
//   --cpus-per-rank M, --gpus-per-rank N[:shared][:reorder]
// A request a host cannot meet throws pm::error(errc::mapping) with one line naming the host, the
// object and the counts, e.g.
//   host 'a' has 4 GPUs; 8 ranks x 1 GPU asked (--gpus-per-rank 1; add :shared to share GPUs)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/export.hpp"
#include "pm/topology.hpp"

namespace pm::topo {

/// The objects Open MPI maps, ranks and binds by, finest first. slot and node mean "no object":
/// within a host they place ranks core after core.
enum class object : std::uint8_t { hwthread, core, l3cache, numa, package, node, slot };

PM_API std::string_view to_string(object o) noexcept;

/// --map-by. `ppr` > 0 is ppr:ppr:by.
struct map_option {
  object by = object::slot;
  std::uint32_t ppr = 0;
  std::uint32_t pe = 0;               ///< :pe=M, cpus per rank (0: not given)
  std::optional<bool> oversubscribe;  ///< :oversubscribe / :nooversubscribe (for map_job)
  friend bool operator==(const map_option&, const map_option&) = default;
};

/// --bind-to. `to` empty: none.
struct bind_option {
  std::optional<object> to;
  bool overload_allowed = false;
  friend bool operator==(const bind_option&, const bind_option&) = default;
};

/// --gpus-per-rank N[:shared][:reorder].
struct gpu_option {
  std::uint32_t per_rank = 0;
  bool shared = false;   ///< ranks may share a GPU when the host has too few
  bool reorder = false;  ///< show every GPU, the rank's own first, instead of hiding the others
  friend bool operator==(const gpu_option&, const gpu_option&) = default;
};

/// Everything plan_host needs to know about the job.
struct binding_policy {
  map_option map;
  std::optional<object> rank_by;  ///< within the host; nullopt: as mapped
  bind_option bind;
  std::uint32_t cpus_per_rank = 0;  ///< --cpus-per-rank (same as :pe=M; 0: not given)
  gpu_option gpus;
};

// Parsers of the option values; each throws pm::error(errc::usage) naming the option and the
// value, e.g. "--bind-to corez: unknown object 'corez' (none, hwthread, core, ...)".
PM_API map_option parse_map_by(std::string_view value);
PM_API bind_option parse_bind_to(std::string_view value);
PM_API object parse_rank_by(std::string_view value);
PM_API gpu_option parse_gpus_per_rank(std::string_view value);
PM_API std::uint32_t parse_cpus_per_rank(std::string_view value);
/// Throws pm::error(errc::usage) when --cpus-per-rank and :pe=M both say how many cpus a rank
/// gets, differently (the planner would otherwise take the larger without a word). plan_host
/// checks it too, for every embedder; pmrun checks it as it reads its command line.
PM_API void check_cpus_per_rank(const binding_policy& policy);

// The option values back, as the parsers read them ("ppr:2:numa:pe=4", "core:overload-allowed",
// "1:shared"): what a replay command or a report prints. The parser reads each back to the same
// value (oversubscribe included).
PM_API std::string to_string(const map_option& m);
PM_API std::string to_string(const bind_option& b);
PM_API std::string to_string(const gpu_option& g);

/// The ranks of one host and what each got, by local rank (index among the job's ranks on the
/// host in global-rank order, as pm::placement::local_rank). Stored flat: a few vectors per host
/// whatever its rank count.
class PM_API host_plan {
 public:
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(nic_.size()); }
  /// OS indexes of the PUs the rank is bound to, ascending; empty when it is not bound.
  std::span<const std::uint32_t> cpus(std::uint32_t local_rank) const;
  /// Its GPUs (indexes into host_topology::gpus), the closest first.
  std::span<const std::uint32_t> gpus(std::uint32_t local_rank) const;
  /// Its nearest NIC (index into host_topology::nics), or none when the host has none.
  std::uint32_t nic(std::uint32_t local_rank) const { return nic_.at(local_rank); }
  /// The NUMA node its cores (or, unbound, its mapped place) belong to; none when not one.
  std::uint32_t numa(std::uint32_t local_rank) const { return numa_.at(local_rank); }

 private:
  friend PM_API host_plan plan_host(const host_topology&, std::string_view, std::uint32_t,
                                    const binding_policy&);
  std::vector<std::uint32_t> cpu_first_{0}, cpus_, gpu_first_{0}, gpus_, nic_, numa_;
};

/// Places `ranks` ranks on one host (named `host` in messages). Throws pm::error(errc::mapping)
/// when the host cannot meet the policy.
PM_API host_plan plan_host(const host_topology& topology, std::string_view host,
                           std::uint32_t ranks, const binding_policy& policy);

/// How many ranks ppr:N:OBJ puts on this host (N x its OBJ objects that have cores; N for node):
/// what map_job needs as the host's count once summaries are known. Throws like plan_host when
/// the host lacks the object.
PM_API std::uint32_t ppr_ranks(const host_topology& topology, std::string_view host,
                               const map_option& map);

/// The variables one rank needs for its GPUs and NIC: CUDA_VISIBLE_DEVICES (+ CUDA_DEVICE_ORDER),
/// ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK (+ ZE_ENABLE_PCI_ID_DEVICE_ORDER); NCCL_IB_HCA and
/// UCX_NET_DEVICES where the host has several NICs and the rank's is RDMA-capable.
PM_API std::vector<std::pair<std::string, std::string>> rank_environment(
    const host_topology& topology, const host_plan& plan, std::uint32_t local_rank,
    const gpu_option& gpus);

/// The cpus in Linux's cpu list form ("0-3,8"; ascending input), as /proc/<pid>/status's
/// Cpus_allowed_list and `taskset -c` spell them; empty for none.
PM_API std::string cpu_list(std::span<const std::uint32_t> cpus);
/// Reads cpu_list's form back (ascending, no repeats, each below 65,536). Throws
/// pm::error(errc::parse) for anything else: it may come from another host.
PM_API std::vector<std::uint32_t> parse_cpu_list(std::string_view text);

/// Where cpus lie on the host in Open MPI 4's words, the part of --report-bindings after "bound
/// to " without its space: "socket 0[core 1[hwt 0-1]]:[../BB/../..][../../../..]" (what
/// --display-map's Bound: column says); empty when the rank is not bound (no cpus, or all of them).
PM_API std::string binding_text(const host_topology& topology, std::span<const std::uint32_t> cpus);

/// Open MPI 4's --report-bindings line for one rank, e.g.
///   [a:4242] MCW rank 3 bound to socket 0[core 1[hwt 0-1]]: [../BB/../..][../../../..]
///   [a:4242] MCW rank 0 is not bound (or bound to all available processors)
PM_API std::string report_bindings(const host_topology& topology, std::string_view host,
                                   std::uint32_t pid, std::uint32_t rank,
                                   std::span<const std::uint32_t> cpus);

}  // namespace pm::topo
