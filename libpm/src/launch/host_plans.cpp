// Within hosts (docs/gpus.md): each agent answers the job's topology request with its host's
// summary; once every host of the job has answered, each is planned (pm::topo::plan_host, once per
// distinct shape and rank count), --report-bindings is said, and only then do spawn requests go
// out, each rank with its cpus and its device variables. A host that cannot meet the job refuses
// it here, in one line, before any rank of any host started.
#include <map>

#include "launch/launcher_impl.hpp"
#include "pm/error.hpp"
#include "pm/job_plan.hpp"

namespace pm::launch {

void launcher::impl::on_shape(std::uint32_t h, const link::host_shape& s) {
  // After the plans too: a spare's or a joining host's shape decides whether it can take ranks.
  if (!wants_shapes || refused || h >= hosts.size()) return;
  const auto& name = host_info(h).name;
  if (!s.error.empty()) {
    refuse("host '" + name + "' cannot tell its topology: " + s.error);
    return;
  }
  try {
    if (shapes.size() < hosts.size()) shapes.resize(hosts.size());
    if (!shapes[h] && req.map.node_of_host(h)) ++shaped_nodes;
    // A summary seen before is not parsed again: one hash of the text per host.
    if (const auto known = shape_by_text.find(s.text); known != shape_by_text.end()) {
      shapes[h] = known->second;
    } else {
      auto got = std::make_shared<shaped>();
      got->topology = topo::topology_from_text(s.text);
      got->text = s.text;
      shape_by_text.emplace(got->text, got);
      shapes[h] = std::move(got);
    }
  } catch (const pm::error& e) {
    refuse("host '" + name + "' sent a topology pmrun cannot read: " + e.what());
    return;
  }
  decided(h, "topology");
  if (!facts_ready) decide_facts();
  if (hosts[h].joining) host_joined(h);
}

// True once every host of the job is planned; false while one has not answered, or refused.
bool launcher::impl::plan_hosts() {
  if (plans_done) return true;
  if (refused) return false;
  const auto nodes = req.map.num_nodes();
  // Called once per answer: a count, not a walk over every host (100,000 answers).
  if (shaped_nodes < nodes) return false;
  for (std::uint32_t n = 0; n < nodes; ++n) {
    const auto h = req.map.host_of_node(n);
    if (h >= shapes.size() || !shapes[h]) return false;
  }
  plans.assign(hosts.size(), nullptr);
  // Identical hosts share one plan: a cluster has few shapes (docs/gpus.md, "Tests and cost").
  // Equal texts are one shaped object (on_shape), so the pointer is the shape's identity.
  std::map<std::pair<const shaped*, std::uint32_t>, std::shared_ptr<const planned>> seen;
  try {
    for (std::uint32_t n = 0; n < nodes; ++n) {
      const auto h = req.map.host_of_node(n);
      const auto count = static_cast<std::uint32_t>(req.map.ranks_on_host(h).size());
      auto& shared = seen[{shapes[h].get(), count}];
      if (!shared) {
        const auto& t = shapes[h]->topology;
        auto p = std::make_shared<planned>(
            planned{shapes[h], topo::plan_host(t, host_info(h).name, count, req.mapping.host)});
        for (std::uint32_t local = 0; local < count; ++local) {
          p->ranks.push_back(resources_of(t, p->plan, local));
          if (cfg.planned) p->bound.push_back(topo::binding_text(t, p->plan.cpus(local)));
          auto& env = p->env.emplace_back();
          for (auto& [name, value] :
               topo::rank_environment(t, p->plan, local, req.mapping.host.gpus))
            env.push_back(name + "=" + value);
        }
        shared = std::move(p);
      }
      plans[h] = shared;
    }
  } catch (const pm::error& e) {
    refuse(e.what());
    return false;
  }
  plans_done = true;
  if (req.mapping.report_bindings && cfg.report_binding) {
    for (std::uint32_t n = 0; n < nodes; ++n) {
      const auto h = req.map.host_of_node(n);
      const auto& p = *plans[h];
      const auto pid = hosts[h].agent ? static_cast<std::uint32_t>(hosts[h].agent->pid) : 0u;
      for (const auto rank : req.map.ranks_on_host(h)) {
        cfg.report_binding(topo::report_bindings(p.shape->topology, host_info(h).name, pid, rank,
                                                 p.plan.cpus(req.map.at(rank).local_rank)));
      }
    }
  }
  if (cfg.planned) {
    job_plan facts;
    job_report report;
    fill_resources(report);
    facts.resources = std::move(report.resources);
    facts.bound.resize(req.map.size());
    for (std::uint32_t rank = 0; rank < req.map.size(); ++rank)
      facts.bound[rank] = plans[req.map.at(rank).host]->bound.at(req.map.at(rank).local_rank);
    cfg.planned(facts);
  }
  return true;
}

// The job cannot run as asked: one line, nothing started (the controller ends the job as an
// abort before any start; the spawns held here are withdrawn).
void launcher::impl::refuse(const std::string& line) {
  if (refused) return;
  refused = true;
  decided(job_wide, "refused");
  queue.push_back(abort_requested{std::nullopt, exit_codes::usage, line, true});
}

void launcher::impl::add_binding(std::uint32_t rank, link::rank_spec& s) const {
  if (!plans_done || rank >= req.map.size()) return;  // a spawned job's ranks are not planned
  const auto h = req.map.at(rank).host;
  if (h >= plans.size() || !plans[h]) return;
  const auto& p = *plans[h];
  const auto local = req.map.at(rank).local_rank;
  s.binding = link::rank_binding{p.ranks.at(local).cpus};
  s.env.insert(s.env.end(), p.env.at(local).begin(), p.env.at(local).end());
}

void launcher::impl::fill_resources(job_report& report) const {
  if (!plans_done) return;
  report.resources.resize(req.map.size());
  for (std::uint32_t rank = 0; rank < req.map.size(); ++rank) {
    const auto h = req.map.at(rank).host;
    if (h >= plans.size() || !plans[h]) continue;
    report.resources[rank] = plans[h]->ranks.at(req.map.at(rank).local_rank);
  }
}

}  // namespace pm::launch
