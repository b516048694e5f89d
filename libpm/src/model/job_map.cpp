#include "pm/job_map.hpp"

#include <optional>
#include <string_view>

#include "text/json_writer.hpp"

namespace pm {

namespace {

// The rank's planned resources, when the job was planned (pm/job_map.hpp).
const rank_resources* planned_of(const job_plan* plan, std::uint32_t rank) {
  return plan && rank < plan->resources.size() ? &plan->resources[rank] : nullptr;
}
const std::string& bound_of(const job_plan& plan, std::uint32_t rank) {
  static const std::string none;
  return rank < plan.bound.size() ? plan.bound[rank] : none;
}

}  // namespace

std::string format_job_map(const rank_map& map, std::uint32_t jobid, const job_plan* plan) {
  const std::string job = "[" + std::to_string(jobid) + ",1]";
  std::string out;
  out.reserve(128 + std::size_t{map.size()} * 64);
  out += " Data for JOB " + job + " offset 0 Total slots allocated " +
         std::to_string(map.total_slots()) + "\n\n";
  out += " ========================   JOB MAP   ========================\n";
  for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
    const auto h = map.host_of_node(node);
    const auto& host = map.allocation().hosts[h];
    const auto ranks = map.ranks_on_host(h);
    out += "\n Data for node: " + host.name + "\tNum slots: " + std::to_string(host.slots) +
           "\tMax slots: " + std::to_string(host.max_slots) +
           "\tNum procs: " + std::to_string(ranks.size()) + "\n";
    for (auto r : ranks) {
      out += " \tProcess OMPI jobid: " + job + " App: " + std::to_string(map.at(r).app) +
             " Process rank: " + std::to_string(r) + " Bound: ";
      const auto* got = planned_of(plan, r);
      out += got && !bound_of(*plan, r).empty() ? bound_of(*plan, r) : std::string("N/A");
      // Open MPI has no GPU column: after Bound:, so that its fields keep their places.
      if (got && !got->gpus.empty()) {
        out += " GPUs: ";
        for (std::size_t i = 0; i < got->gpus.size(); ++i)
          out += (i ? "," : "") + std::to_string(got->gpus[i]);
      }
      if (got && !got->nic.empty()) out += " NIC: " + got->nic;
      out += "\n";
    }
  }
  out += "\n =============================================================\n";
  return out;
}

std::string format_allocation(const allocation& alloc) {
  std::string out = "\n======================   ALLOCATED NODES   ======================\n";
  for (const auto& h : alloc.hosts) {
    out += "\t" + h.name + ": flags=" + (h.local ? "0x11" : "0x10") +
           " slots=" + std::to_string(h.slots) + " max_slots=" + std::to_string(h.max_slots) +
           " slots_inuse=0 state=" + (h.local ? "UP" : "UNKNOWN") + "\n";
  }
  out += "=================================================================\n";
  return out;
}

std::string job_map_json(const rank_map& map, std::uint32_t jobid, const job_plan* plan) {
  // json_writer, not a DOM: see io/json_writer.hpp (out of memory is a plain std::bad_alloc).
  json_writer w(2);
  // Keys in alphabetical order, as the documented output has always had them.
  w.begin_object();
  w.member("allocation_source", to_string(map.allocation().source));
  w.key("apps").begin_array();
  for (std::uint32_t a = 0; a < map.num_apps(); ++a) {
    w.begin_object();
    w.member("app", a);
    w.member("first_rank", map.app_first_rank(a));
    w.member("size", map.app_size(a));
    w.end_object();
  }
  w.end_array();
  w.member("jobid", jobid);
  w.key("nodes").begin_array();
  for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
    const auto h = map.host_of_node(node);
    const auto& host = map.allocation().hosts[h];
    const auto ranks = map.ranks_on_host(h);
    w.begin_object();
    w.member("local", host.local);
    w.member("max_slots", host.max_slots);
    w.member("name", host.name);
    w.member("node", node);
    w.member("num_procs", ranks.size());
    // How ssh reaches the host, only when the hostfile or -H said (keys in nlohmann's order).
    if (host.port != 0) w.member("port", host.port);
    w.key("ranks").begin_array();
    for (auto r : ranks) {
      const auto p = map.at(r);
      w.begin_object();
      const auto* got = planned_of(plan, r);
      const auto or_null = [](const std::string& s) {
        return s.empty() ? std::nullopt : std::optional<std::string_view>(s);
      };
      w.member("app", p.app);
      // Only for a planned job, so that a plain map keeps its schema.
      if (got) {
        w.member("bound", or_null(bound_of(*plan, r)));
        w.member("cpus", or_null(got->cpus));
        w.key("gpus").begin_array();
        for (const auto g : got->gpus) w.value(g);
        w.end_array();
      }
      w.member("local_rank", p.local_rank);
      if (got) w.member("nic", or_null(got->nic));
      w.member("rank", r);
      w.end_object();
    }
    w.end_array();
    w.member("slots", host.slots);
    w.member("slots_known", host.slots_given || host.local);
    if (!host.user.empty()) w.member("user", host.user);
    w.end_object();
  }
  w.end_array();
  w.member("size", map.size());
  w.member("total_slots", map.total_slots());
  w.end_object();
  return w.take() + "\n";
}

}  // namespace pm
