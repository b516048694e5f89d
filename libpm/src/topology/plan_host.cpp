// plan_host (pm/host_binding.hpp): a host's ranks onto its cores, GPUs and NICs.
//
// Four steps, each a pass over the host's ranks:
//  1. Mapping: every rank gets `pe` units (cores, or hardware threads when hwthread is mapped or
//     bound), Open MPI's way: core after core (slot, node, core, hwthread), round robin over
//     objects (l3cache, numa, package), N per object (ppr:N:OBJ); within an object, the least
//     used units first. With --gpus-per-rank and no object asked, GPUs lead instead: each rank
//     takes the next GPUs in NUMA order and its units come from its GPUs' NUMA node, so that
//     cores and GPUs agree (docs/gpus.md).
//  2. Ranking (--rank-by OBJ): which local rank takes which of those places.
//  3. Binding: a rank's cpuset is its units, or the --bind-to objects that hold them; more demand
//     on an object than it has units is refused unless overload-allowed.
//  4. GPUs (closest free ones first: same NUMA node, same package, any) and the nearest NIC.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"

namespace pm::topo {

namespace {

[[noreturn]] void refuse(std::string_view host, const std::string& what) {
  throw pm::error(errc::mapping, "host '" + std::string(host) + "' " + what);
}

std::string plural(std::uint32_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// The cpus ranks are placed on: cores, or hardware threads (PUs by logical index).
class units {
 public:
  units(const host_topology& t, bool threads) : t_(t), threads_(threads) {
    if (threads) {
      owner_.resize(t.pu_os_index.size());
      for (std::uint32_t c = 0; c < t.cores.size(); ++c) {
        for (std::uint32_t p = 0; p < t.cores[c].pu_count; ++p) owner_[t.cores[c].first_pu + p] = c;
      }
    }
  }
  bool threads() const { return threads_; }
  std::uint32_t count() const {
    return static_cast<std::uint32_t>(threads_ ? owner_.size() : t_.cores.size());
  }
  std::uint32_t core_of(std::uint32_t u) const { return threads_ ? owner_[u] : u; }
  const char* name(std::uint32_t n) const {
    return threads_ ? (n == 1 ? "hardware thread" : "hardware threads")
                    : (n == 1 ? "core" : "cores");
  }
  /// The object of kind `k` holding unit u (none when there is none, e.g. no L3).
  std::uint32_t object_of(std::uint32_t u, object k) const {
    const core& c = t_.cores[core_of(u)];
    switch (k) {
      case object::hwthread:
        return threads_ ? u : c.first_pu;
      case object::core:
        return core_of(u);
      case object::l3cache:
        return c.l3;
      case object::numa:
        return c.numa;
      case object::package:
        return c.package;
      case object::node:
      case object::slot:
        break;
    }
    return 0;
  }
  std::uint32_t objects(object k) const {
    switch (k) {
      case object::hwthread:
        return static_cast<std::uint32_t>(t_.pu_os_index.size());
      case object::core:
        return static_cast<std::uint32_t>(t_.cores.size());
      case object::l3cache:
        return t_.l3caches;
      case object::numa:
        return t_.numa_nodes();
      case object::package:
        return t_.packages;
      case object::node:
      case object::slot:
        break;
    }
    return 1;
  }
  /// Units of each object of kind k, as CSR: first[o]..first[o+1] into list.
  void group(object k, std::vector<std::uint32_t>& first, std::vector<std::uint32_t>& list) const {
    const auto n = objects(k);
    first.assign(n + 1, 0);
    for (std::uint32_t u = 0; u < count(); ++u) {
      const auto o = object_of(u, k);
      if (o != none) ++first[o + 1];
    }
    std::partial_sum(first.begin(), first.end(), first.begin());
    list.assign(first[n], 0);
    std::vector<std::uint32_t> at(first.begin(), first.end() - 1);
    for (std::uint32_t u = 0; u < count(); ++u) {
      const auto o = object_of(u, k);
      if (o != none) list[at[o]++] = u;
    }
  }

 private:
  const host_topology& t_;
  bool threads_;
  std::vector<std::uint32_t> owner_;
};

bool is_object(object k) {
  return k != object::slot && k != object::node;
}

std::string objects_named(std::uint32_t n, object k) {
  const std::string one = k == object::numa ? "NUMA node" : std::string(to_string(k));
  return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
}

/// The GPUs ranks may be given: those of the vendor the host has most of (a stray display GPU of
/// another vendor is never mixed in), ordered NUMA node by NUMA node.
std::vector<std::uint32_t> candidate_gpus(const host_topology& t) {
  std::uint32_t count[4] = {0, 0, 0, 0};
  for (const gpu& g : t.gpus) ++count[static_cast<int>(g.vendor) & 3];
  gpu_vendor best = gpu_vendor::other;
  std::uint32_t most = 0;
  for (auto v : {gpu_vendor::nvidia, gpu_vendor::amd, gpu_vendor::intel}) {
    if (count[static_cast<int>(v)] > most) {
      most = count[static_cast<int>(v)];
      best = v;
    }
  }
  std::vector<std::uint32_t> order;
  for (std::uint32_t g = 0; g < t.gpus.size(); ++g) {
    if (most > 0 && t.gpus[g].vendor == best) order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return t.gpus[a].numa < t.gpus[b].numa;  // none (the largest) last
  });
  return order;
}

/// 0: same NUMA node, 1: same package, 2: elsewhere.
int distance(std::uint32_t numa_a, std::uint32_t package_a, std::uint32_t numa_b,
             std::uint32_t package_b) {
  if (numa_a != none && numa_a == numa_b) return 0;
  if (package_a != none && package_a == package_b) return 1;
  return 2;
}

}  // namespace

std::span<const std::uint32_t> host_plan::cpus(std::uint32_t r) const {
  return std::span<const std::uint32_t>(cpus_).subspan(cpu_first_.at(r),
                                                       cpu_first_.at(r + 1) - cpu_first_[r]);
}

std::span<const std::uint32_t> host_plan::gpus(std::uint32_t r) const {
  return std::span<const std::uint32_t>(gpus_).subspan(gpu_first_.at(r),
                                                       gpu_first_.at(r + 1) - gpu_first_[r]);
}

std::uint32_t ppr_ranks(const host_topology& t, std::string_view host, const map_option& map) {
  if (map.ppr == 0) return 0;
  if (!is_object(map.by)) return map.ppr;
  const units u(t, map.by == object::hwthread);
  std::vector<std::uint32_t> first, list;
  u.group(map.by, first, list);
  std::uint32_t used = 0;
  for (std::size_t o = 0; o + 1 < first.size(); ++o) used += first[o + 1] > first[o] ? 1 : 0;
  if (used == 0) refuse(host, "has no " + std::string(to_string(map.by)) + " (--map-by ppr)");
  return map.ppr * used;
}

host_plan plan_host(const host_topology& t, std::string_view host, std::uint32_t n,
                    const binding_policy& policy) {
  check_cpus_per_rank(policy);
  const map_option& map = policy.map;
  const bool pe_given = map.pe > 0 || policy.cpus_per_rank > 0;
  const std::uint32_t pe = std::max({map.pe, policy.cpus_per_rank, 1u});
  // pe=M reserves cores for each rank: it binds to them unless told where (Open MPI does too).
  std::optional<object> bind = policy.bind.to;
  if (!bind && pe_given) bind = map.by == object::hwthread ? object::hwthread : object::core;
  const bool threads = map.by == object::hwthread || bind == object::hwthread;
  const units u(t, threads);
  const std::uint32_t unit_count = u.count();
  if (unit_count == 0) refuse(host, "has no cpus");
  if (pe > unit_count) {
    refuse(host, "has " + plural(unit_count, u.name(1), u.name(2)) + "; pe=" + std::to_string(pe) +
                     " asks " + std::to_string(pe) + " for each rank");
  }

  // Every object the policy names must exist on this host (have units).
  std::vector<std::uint32_t> first, list;
  const auto require = [&](object k, const char* option) {
    if (!is_object(k)) return;
    bool any = false;
    for (std::uint32_t unit = 0; unit < unit_count && !any; ++unit) {
      any = u.object_of(unit, k) != none;
    }
    if (!any) refuse(host, "has no " + std::string(to_string(k)) + " (" + option + ")");
  };
  require(map.by, "--map-by");
  if (bind) require(*bind, "--bind-to");
  if (policy.rank_by) require(*policy.rank_by, "--rank-by");

  const std::uint32_t gpus_per_rank = policy.gpus.per_rank;
  std::vector<std::uint32_t> gpu_order;
  if (gpus_per_rank > 0) {
    gpu_order = candidate_gpus(t);
    const auto g = static_cast<std::uint32_t>(gpu_order.size());
    const std::string asked = "--gpus-per-rank " + std::to_string(gpus_per_rank);
    if (g == 0) refuse(host, "has no GPUs (" + asked + ")");
    if (gpus_per_rank > g) {
      refuse(host, "has " + plural(g, "GPU", "GPUs") + "; " + asked + " asks " +
                       std::to_string(gpus_per_rank) + " for each rank");
    }
    if (!policy.gpus.shared && std::uint64_t{n} * gpus_per_rank > g) {
      refuse(host, "has " + plural(g, "GPU", "GPUs") + "; " + std::to_string(n) + " ranks x " +
                       plural(gpus_per_rank, "GPU", "GPUs") + " asked (" + asked +
                       "; add :shared to share GPUs)");
    }
  }

  // 1. Mapping: each place (slot) gets pe units; gpu-led places also get their GPUs now.
  std::vector<std::uint32_t> load(unit_count, 0);
  std::vector<std::uint32_t> slot_units(std::size_t{n} * pe);
  std::vector<std::vector<std::uint32_t>> slot_gpus;
  const bool gpu_led = gpus_per_rank > 0 && !is_object(map.by);
  // `near_first`: an unused unit first (bindings stay disjoint wherever they can), then the
  // nearest, then the least used; so overloaded ranks share the cores of their GPU's NUMA node
  // rather than spread to less used ones far from it. Otherwise the least used, then the nearest.
  const auto least_used = [&](auto&& candidates, auto&& tier, std::uint32_t* out,
                              bool near_first = false) {
    const auto better = [&](std::uint32_t c, std::uint32_t best) {
      if (near_first) {
        if ((load[c] == 0) != (load[best] == 0)) return load[c] == 0;
        if (tier(c) != tier(best)) return tier(c) < tier(best);
        return load[c] < load[best];
      }
      return load[c] < load[best] || (load[c] == load[best] && tier(c) < tier(best));
    };
    for (std::uint32_t k = 0; k < pe; ++k) {
      std::uint32_t best = none;
      for (std::uint32_t c : candidates) {
        if (k > 0 && std::find(out, out + k, c) != out + k) continue;
        if (best == none || better(c, best)) best = c;
      }
      if (best == none) best = out[k - 1];  // fewer candidates than pe: checked by callers
      out[k] = best;
      ++load[best];
    }
  };
  if (gpu_led) {
    std::vector<std::uint32_t> all(unit_count);
    std::iota(all.begin(), all.end(), 0u);
    slot_gpus.resize(n);
    std::vector<int> tiers(unit_count);
    std::uint32_t tiers_numa = none, tiers_package = none;
    // GPUs go where cores are left: a rank's first GPU is the next free one whose NUMA node still
    // has `pe` unused units (else the next free one), its others the free ones nearest to it; so
    // a NUMA node with more GPUs than cores does not push ranks' cores away from their GPUs.
    // Unbound ranks (no cores to agree with) and shared GPUs (more ranks than GPUs): in order.
    const auto numa_of_unit = [&](std::uint32_t unit) { return t.cores[u.core_of(unit)].numa; };
    std::map<std::uint32_t, std::uint32_t> unused_in_numa;
    for (std::uint32_t unit = 0; unit < unit_count; ++unit) ++unused_in_numa[numa_of_unit(unit)];
    std::vector<bool> gpu_taken(t.gpus.size(), false);
    std::size_t taken = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!bind || taken + gpus_per_rank > gpu_order.size()) {
        for (std::uint32_t j = 0; j < gpus_per_rank; ++j) {
          slot_gpus[i].push_back(
              gpu_order[(std::size_t{i} * gpus_per_rank + j) % gpu_order.size()]);
        }
      } else {
        std::uint32_t lead = none;
        for (const std::uint32_t g : gpu_order) {
          if (gpu_taken[g]) continue;
          if (lead == none) lead = g;
          if (unused_in_numa[t.gpus[g].numa] >= pe) {
            lead = g;
            break;
          }
        }
        slot_gpus[i].push_back(lead);
        gpu_taken[lead] = true;
        for (std::uint32_t j = 1; j < gpus_per_rank; ++j) {
          std::uint32_t next = none;
          for (const std::uint32_t g : gpu_order) {
            if (gpu_taken[g]) continue;
            if (next == none ||
                distance(t.gpus[lead].numa, t.gpus[lead].package, t.gpus[g].numa,
                         t.gpus[g].package) < distance(t.gpus[lead].numa, t.gpus[lead].package,
                                                       t.gpus[next].numa, t.gpus[next].package))
              next = g;
          }
          slot_gpus[i].push_back(next);
          gpu_taken[next] = true;
        }
        taken += gpus_per_rank;
      }
      const gpu& home = t.gpus[slot_gpus[i][0]];
      if (i == 0 || home.numa != tiers_numa || home.package != tiers_package) {
        // Each unit's distance to this GPU, computed once per NUMA node the GPUs lead to.
        tiers_numa = home.numa;
        tiers_package = home.package;
        for (std::uint32_t unit = 0; unit < unit_count; ++unit) {
          const core& c = t.cores[u.core_of(unit)];
          tiers[unit] = distance(home.numa, home.package, c.numa, c.package);
        }
      }
      least_used(
          all, [&](std::uint32_t unit) { return tiers[unit]; }, &slot_units[std::size_t{i} * pe],
          bind.has_value());
      for (std::uint32_t k = 0; k < pe; ++k) {
        const auto unit = slot_units[std::size_t{i} * pe + k];
        if (load[unit] == 1) --unused_in_numa[numa_of_unit(unit)];
      }
    }
  } else if (!is_object(map.by) ||
             (map.ppr == 0 && (map.by == object::core || map.by == object::hwthread))) {
    // Core after core (or thread after thread), wrapping round when there are more ranks.
    for (std::size_t k = 0; k < slot_units.size(); ++k) {
      slot_units[k] = static_cast<std::uint32_t>(k % unit_count);
      ++load[slot_units[k]];
    }
  } else {
    u.group(map.by, first, list);
    std::vector<std::uint32_t> used;  // the objects that have units
    for (std::uint32_t o = 0; o + 1 < first.size(); ++o) {
      if (first[o + 1] > first[o]) used.push_back(o);
    }
    const auto objs = static_cast<std::uint32_t>(used.size());
    if (map.ppr > 0 && std::uint64_t{n} > std::uint64_t{map.ppr} * objs) {
      refuse(host, "has " + objects_named(objs, map.by) + "; ppr:" + std::to_string(map.ppr) + ":" +
                       std::string(to_string(map.by)) + " places at most " +
                       std::to_string(map.ppr * objs) +
                       (map.ppr * objs == 1 ? " rank there, " : " ranks there, ") +
                       std::to_string(n) + " mapped");
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t o = used[map.ppr > 0 ? i / map.ppr : i % objs];
      const auto inside =
          std::span<const std::uint32_t>(list).subspan(first[o], first[o + 1] - first[o]);
      if (inside.size() < pe) {
        refuse(host,
               "has " + plural(static_cast<std::uint32_t>(inside.size()), u.name(1), u.name(2)) +
                   " in " + std::string(to_string(map.by)) + " " + std::to_string(o) +
                   "; pe=" + std::to_string(pe) + " asks " + std::to_string(pe) + " for each rank");
      }
      least_used(
          inside, [](std::uint32_t) { return 0; }, &slot_units[std::size_t{i} * pe]);
    }
  }

  // 2. Ranking within the host: which local rank takes which place.
  std::vector<std::uint32_t> slot_of(n);
  std::iota(slot_of.begin(), slot_of.end(), 0u);
  if (policy.rank_by && is_object(*policy.rank_by)) {
    const object k = *policy.rank_by;
    const auto first_unit = [&](std::uint32_t s) { return slot_units[std::size_t{s} * pe]; };
    std::stable_sort(slot_of.begin(), slot_of.end(), [&](std::uint32_t a, std::uint32_t b) {
      return first_unit(a) < first_unit(b);
    });
    if (k == object::l3cache || k == object::numa || k == object::package) {
      // Round robin over the objects: the first place of each, then the second of each, ...
      std::vector<std::uint32_t> seen(u.objects(k) + 1, 0);
      std::vector<std::pair<std::uint32_t, std::uint32_t>> key(n);  // (round, object)
      for (std::uint32_t s : slot_of) {
        auto o = u.object_of(first_unit(s), k);
        if (o == none) o = u.objects(k);
        key[s] = {seen[o]++, o};
      }
      std::stable_sort(slot_of.begin(), slot_of.end(),
                       [&](std::uint32_t a, std::uint32_t b) { return key[a] < key[b]; });
    }
  }

  // 3. Binding: the cpusets, and the overload check.
  host_plan plan;
  plan.nic_.assign(n, none);
  plan.numa_.resize(n);
  plan.cpus_.reserve(bind ? std::size_t{n} * pe * 2 : 0);
  std::vector<std::uint32_t> bind_first, bind_list, demand;
  if (bind) {
    u.group(*bind, bind_first, bind_list);
    demand.assign(bind_first.size() - 1, 0);
  }
  std::vector<std::uint32_t> objs, cpus;
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::uint32_t* mine = &slot_units[std::size_t{slot_of[r]} * pe];
    plan.numa_[r] = t.cores[u.core_of(mine[0])].numa;
    if (bind) {
      objs.clear();
      for (std::uint32_t k = 0; k < pe; ++k) {
        const auto o = u.object_of(mine[k], *bind);
        if (o == none) continue;
        ++demand[o];
        if (std::find(objs.begin(), objs.end(), o) == objs.end()) objs.push_back(o);
      }
      if (objs.empty()) {
        // The rank's cores lie outside every object of that kind while other cores have one
        // (a summary with cores in no NUMA node): bound to nothing would be silently unbound.
        const std::string obj = *bind == object::numa ? "NUMA node" : std::string(to_string(*bind));
        refuse(host, "has no " + obj + " holding its " + std::string(u.name(1)) + " " +
                         std::to_string(mine[0]) + " (--bind-to " + std::string(to_string(*bind)) +
                         ")");
      }
      cpus.clear();
      for (auto o : objs) {
        for (auto i = bind_first[o]; i < bind_first[o + 1]; ++i) {
          const auto unit = bind_list[i];
          if (u.threads()) {
            cpus.push_back(t.pu_os_index[unit]);
          } else {
            const core& c = t.cores[unit];
            for (std::uint32_t p = 0; p < c.pu_count; ++p)
              cpus.push_back(t.pu_os_index[c.first_pu + p]);
          }
        }
      }
      std::sort(cpus.begin(), cpus.end());
      cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
      plan.cpus_.insert(plan.cpus_.end(), cpus.begin(), cpus.end());
    }
    plan.cpu_first_.push_back(static_cast<std::uint32_t>(plan.cpus_.size()));
  }
  if (bind && !policy.bind.overload_allowed) {
    for (std::uint32_t o = 0; o < demand.size(); ++o) {
      const auto have = bind_first[o + 1] - bind_first[o];
      if (demand[o] <= have) continue;
      const std::string obj(to_string(*bind));
      const std::string how = "(--bind-to " + obj + "; add :overload-allowed to bind more)";
      if (have == 1 && std::uint64_t{n} * pe > unit_count) {  // the units themselves
        refuse(host, "has " + plural(unit_count, u.name(1), u.name(2)) + "; " + std::to_string(n) +
                         " ranks x " + plural(pe, u.name(1), u.name(2)) + " asked " + how);
      }
      refuse(host, "has " + plural(have, u.name(1), u.name(2)) + " in " + obj + " " +
                       std::to_string(o) + "; the mapping puts " + std::to_string(demand[o]) +
                       " ranks' cpus there " + how);
    }
  }

  // 4. GPUs: gpu-led places have theirs; otherwise the closest free ones, tier by tier.
  if (gpus_per_rank > 0) {
    std::vector<std::vector<std::uint32_t>> mine(n);
    if (gpu_led) {
      for (std::uint32_t r = 0; r < n; ++r) mine[r] = slot_gpus[slot_of[r]];
    } else {
      std::vector<std::uint32_t> used(t.gpus.size(), 0);
      const auto tier = [&](std::uint32_t r, std::uint32_t g) {
        const auto numa = plan.numa_[r];
        const core& c = t.cores[u.core_of(slot_units[std::size_t{slot_of[r]} * pe])];
        return distance(numa, c.package, t.gpus[g].numa, t.gpus[g].package);
      };
      for (int pass = 0; pass <= 2; ++pass) {
        for (std::uint32_t r = 0; r < n; ++r) {
          for (std::uint32_t g : gpu_order) {
            if (mine[r].size() == gpus_per_rank) break;
            if (used[g] == 0 && tier(r, g) <= pass) {
              mine[r].push_back(g);
              ++used[g];
            }
          }
        }
      }
      for (std::uint32_t r = 0; r < n; ++r) {  // only with :shared: the least used, closest
        while (mine[r].size() < gpus_per_rank) {
          std::uint32_t best = none;
          for (std::uint32_t g : gpu_order) {
            if (std::find(mine[r].begin(), mine[r].end(), g) != mine[r].end()) continue;
            if (best == none || used[g] < used[best] ||
                (used[g] == used[best] && tier(r, g) < tier(r, best))) {
              best = g;
            }
          }
          mine[r].push_back(best);
          ++used[best];
        }
      }
    }
    for (std::uint32_t r = 0; r < n; ++r) {
      plan.gpus_.insert(plan.gpus_.end(), mine[r].begin(), mine[r].end());
      plan.gpu_first_.push_back(static_cast<std::uint32_t>(plan.gpus_.size()));
    }
  } else {
    plan.gpu_first_.assign(std::size_t{n} + 1, 0);
  }

  // The nearest NIC: RDMA-capable ones when the host has any; closest to the rank's first GPU
  // (GPUDirect RDMA), else to its cores; the least used among equals.
  if (!t.nics.empty()) {
    const bool rdma =
        std::any_of(t.nics.begin(), t.nics.end(), [](const nic& x) { return !x.rdma.empty(); });
    std::vector<std::uint32_t> used(t.nics.size(), 0);
    for (std::uint32_t r = 0; r < n; ++r) {
      std::uint32_t numa = plan.numa_[r];
      std::uint32_t package = t.cores[u.core_of(slot_units[std::size_t{slot_of[r]} * pe])].package;
      const auto g = plan.gpus(r);
      if (!g.empty()) {
        numa = t.gpus[g[0]].numa;
        package = t.gpus[g[0]].package;
      }
      std::uint32_t best = none;
      int best_tier = 3;
      for (std::uint32_t i = 0; i < t.nics.size(); ++i) {
        if (rdma && t.nics[i].rdma.empty()) continue;
        const int d = distance(numa, package, t.nics[i].numa, t.nics[i].package);
        if (best == none || d < best_tier || (d == best_tier && used[i] < used[best])) {
          best = i;
          best_tier = d;
        }
      }
      plan.nic_[r] = best;
      ++used[best];
    }
  }
  return plan;
}

}  // namespace pm::topo
