#include "pm/job_map.hpp"

#include <nlohmann/json.hpp>

namespace pm {

std::string format_job_map(const rank_map& map, std::uint32_t jobid) {
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
             " Process rank: " + std::to_string(r) + " Bound: N/A\n";
    }
  }
  out += "\n =============================================================\n";
  return out;
}

std::string job_map_json(const rank_map& map, std::uint32_t jobid) {
  nlohmann::json nodes = nlohmann::json::array();
  for (std::uint32_t node = 0; node < map.num_nodes(); ++node) {
    const auto h = map.host_of_node(node);
    const auto& host = map.allocation().hosts[h];
    nlohmann::json ranks = nlohmann::json::array();
    for (auto r : map.ranks_on_host(h)) {
      const auto p = map.at(r);
      ranks.push_back({{"rank", r}, {"app", p.app}, {"local_rank", p.local_rank}});
    }
    nodes.push_back({{"name", host.name},
                     {"node", node},
                     {"slots", host.slots},
                     {"max_slots", host.max_slots},
                     {"slots_known", host.slots_given || host.local},
                     {"local", host.local},
                     {"num_procs", ranks.size()},
                     {"ranks", std::move(ranks)}});
  }
  nlohmann::json apps = nlohmann::json::array();
  for (std::uint32_t a = 0; a < map.num_apps(); ++a) {
    apps.push_back({{"app", a}, {"first_rank", map.app_first_rank(a)}, {"size", map.app_size(a)}});
  }
  nlohmann::json doc = {{"jobid", jobid},
                        {"size", map.size()},
                        {"total_slots", map.total_slots()},
                        {"allocation_source", to_string(map.allocation().source)},
                        {"apps", std::move(apps)},
                        {"nodes", std::move(nodes)}};
  return doc.dump(2) + "\n";
}

}  // namespace pm
