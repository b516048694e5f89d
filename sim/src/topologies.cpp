// Simulated hosts with shapes: the agent of each answers the job's topology request with its
// summary, as pmd does with hwloc's (libpm/tools/pmd/host_shape.cpp), so that the real launcher
// machine plans the simulated hosts exactly as it plans real ones (launch/host_plans.cpp).
#include "topologies.hpp"

#include <algorithm>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "world_impl.hpp"

namespace pm::sim {

const std::string& scenario::topology_of(std::uint32_t host) const {
  const auto it = std::lower_bound(host_topologies.begin(), host_topologies.end(), host,
                                   [](const auto& e, std::uint32_t h) { return e.first < h; });
  return it != host_topologies.end() && it->first == host ? it->second : topology;
}

void scenario::set_host_topology(std::uint32_t host, std::string text) {
  const auto it = std::lower_bound(host_topologies.begin(), host_topologies.end(), host,
                                   [](const auto& e, std::uint32_t h) { return e.first < h; });
  if (it != host_topologies.end() && it->first == host)
    it->second = std::move(text);
  else
    host_topologies.insert(it, {host, std::move(text)});
}

void check_topologies(const scenario& s, std::uint32_t hosts) {
  const auto readable = [](const std::string& text, const std::string& what) {
    try {
      topo::topology_from_text(text);
    } catch (const pm::error& e) {
      throw pm::error(errc::usage, what + ": " + e.what());
    }
  };
  if (!s.topology.empty()) readable(s.topology, "--topology");
  for (std::size_t i = 0; i < s.host_topologies.size(); ++i) {
    const auto h = s.host_topologies[i].first;
    const auto what = "--host-topology " + std::to_string(h);
    if (h >= hosts)
      throw pm::error(errc::usage, what + ": no such host (the cluster has " +
                                       std::to_string(hosts) + " hosts)");
    if (i > 0 && s.host_topologies[i - 1].first >= h)
      throw pm::error(errc::usage, what + ": hosts must be given once each, in order");
    if (!s.host_topologies[i].second.empty()) readable(s.host_topologies[i].second, what);
  }
}

std::string map_by_arg(const mapping_policy& m) {
  if (!(m.host.map == topo::map_option{})) return topo::to_string(m.host.map);
  if (m.by == map_by::node) return "node";
  if (m.by == map_by::ppr_node) return "ppr:" + std::to_string(m.ppr) + ":node";
  return {};
}

void append_topology_args(const scenario& s, std::vector<std::string>& a) {
  const auto add = [&](std::string flag, std::string value) {
    a.push_back(std::move(flag));
    a.push_back(std::move(value));
  };
  const auto& h = s.mapping.host;
  if (h.rank_by) add("--rank-by", std::string(topo::to_string(*h.rank_by)));
  if (h.bind.to || h.bind.overload_allowed) add("--bind-to", topo::to_string(h.bind));
  if (h.cpus_per_rank != 0) add("--cpus-per-rank", std::to_string(h.cpus_per_rank));
  if (h.gpus.per_rank != 0) add("--gpus-per-rank", topo::to_string(h.gpus));
  if (s.mapping.report_bindings) a.push_back("--report-bindings");
  if (!s.topology.empty()) add("--topology", s.topology);
  for (const auto& [host, text] : s.host_topologies)
    add("--host-topology", std::to_string(host) + "=" + text);
}

// pmd's answer (host_shape.cpp), from the scenario instead of hwloc. A host without a summary
// answers as a pmd without the topology module does: the launcher refuses the job.
agent::options world::agent_options(std::uint32_t host) const {
  agent::options o;
  o.shared_setups = &setups_;
  o.read_topology = [this, host] {
    const auto& text = s_.topology_of(host);
    return text.empty() ? link::host_shape{"", "the simulated host has no topology (--topology)"}
                        : link::host_shape{text, ""};
  };
  return o;
}

}  // namespace pm::sim
