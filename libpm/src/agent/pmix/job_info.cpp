// A job as one node's PMIx server describes it (pmix_host.hpp): built from libpm's rank map or
// from the agent link's job facts, and checked. Pure: pmd uses it without loading libpmix.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "agent/pmix/pmix_host.hpp"
#include "link/messages.hpp"
#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace pm::agent::pmix {

namespace {

bool valid_nspace(const std::string& ns) {
  if (ns.empty() || ns.size() > 200 || ns == "." || ns == "..") return false;
  return std::all_of(ns.begin(), ns.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace

void check_job_info(const job_info& job) {
  auto bad = [&](const std::string& what) {
    throw pm::error(pm::errc::usage, "PMIx job '" + job.nspace + "': " + what);
  };
  if (!valid_nspace(job.nspace)) {
    throw pm::error(pm::errc::usage,
                    "PMIx namespace '" + job.nspace +
                        "' is not 1-200 characters of letters, digits, '.', '_' and '-'");
  }
  if (job.parent && !valid_nspace(job.parent->nspace)) {
    bad("parent namespace '" + job.parent->nspace + "' is not a valid namespace");
  }
  if (job.node_names.empty()) bad("no nodes");
  if (job.ranks.empty()) bad("no ranks");
  if (job.node_index >= job.node_names.size() && job.node_index != no_node) {
    bad("this node's index " + std::to_string(job.node_index) + " is not below the " +
        std::to_string(job.node_names.size()) + " nodes");
  }
  for (const auto& n : job.node_names) {
    if (n.empty() || n.find_first_of(",; \t\n") != std::string::npos) {
      bad("node name '" + n + "' is empty or has a separator in it");
    }
  }
  std::uint32_t num_apps = 0;
  for (const auto& r : job.ranks) num_apps = std::max(num_apps, r.app + 1);
  std::vector<bool> app_used(num_apps);
  std::vector<std::vector<bool>> local_seen(job.node_names.size());
  for (std::size_t rank = 0; rank < job.ranks.size(); ++rank) {
    const rank_info& r = job.ranks[rank];
    if (r.node >= job.node_names.size()) {
      bad("rank " + std::to_string(rank) + " is on node " + std::to_string(r.node) +
          ", not one of the " + std::to_string(job.node_names.size()) + " nodes");
    }
    app_used[r.app] = true;
    auto& seen = local_seen[r.node];
    if (seen.size() <= r.local_rank) seen.resize(r.local_rank + 1u);
    if (seen[r.local_rank]) {
      bad("two ranks have local rank " + std::to_string(r.local_rank) + " on node " +
          job.node_names[r.node]);
    }
    seen[r.local_rank] = true;
  }
  for (std::uint32_t a = 0; a < num_apps; ++a) {
    if (!app_used[a]) bad("app " + std::to_string(a) + " has no ranks");
  }
  // PMIx 4.2.2 refuses a proc map with an empty node (BAD-PARAM from register_nspace).
  for (std::size_t n = 0; n < job.node_names.size(); ++n) {
    if (local_seen[n].empty()) bad("node " + job.node_names[n] + " has no ranks");
  }
}

job_info make_job_info(const pm::rank_map& map, std::string nspace, std::uint32_t node_index) {
  job_info job;
  job.nspace = std::move(nspace);
  job.node_index = node_index;
  const std::uint64_t slots = map.total_slots();
  job.universe_size = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(slots, std::numeric_limits<std::uint32_t>::max()));
  job.node_names.reserve(map.num_nodes());
  for (std::uint32_t n = 0; n < map.num_nodes(); ++n) {
    job.node_names.push_back(map.allocation().hosts.at(map.host_of_node(n)).name);
  }
  job.ranks.reserve(map.size());
  for (std::uint32_t rank = 0; rank < map.size(); ++rank) {
    const placement p = map.at(rank);
    if (p.local_rank > std::numeric_limits<std::uint16_t>::max()) {
      throw pm::error(pm::errc::usage, "PMIx: more than 65536 ranks on node " +
                                           job.node_names.at(p.node) + " (local ranks are 16-bit)");
    }
    rank_info r;
    r.app = p.app;
    r.node = p.node;
    r.local_rank = static_cast<std::uint16_t>(p.local_rank);
    r.node_rank = r.local_rank;  // one job per node: Open MPI's node rank is the local rank
    job.ranks.push_back(r);
  }
  return job;
}

job_info job_info_of(const pm::link::pmix_job& facts) {
  job_info job;
  job.nspace = facts.nspace;
  job.universe_size = facts.universe;
  job.node_index = facts.node;
  job.node_names = facts.nodes;
  job.ranks.reserve(facts.rank_node.size());
  for (std::size_t r = 0; r < facts.rank_node.size(); ++r) {
    rank_info info;
    info.app = facts.rank_app.at(r);
    info.node = facts.rank_node.at(r);
    info.local_rank = static_cast<std::uint16_t>(facts.rank_local.at(r));
    info.node_rank = info.local_rank;  // one job per node
    job.ranks.push_back(info);
  }
  return job;  // spawned and parent: not on the link yet
}

pm::link::pmix_job pmix_job_of(const job_info& job) {
  pm::link::pmix_job facts;
  facts.nspace = job.nspace;
  facts.universe = job.universe_size;
  facts.node = job.node_index;
  facts.nodes = job.node_names;
  facts.rank_node.reserve(job.ranks.size());
  facts.rank_app.reserve(job.ranks.size());
  facts.rank_local.reserve(job.ranks.size());
  for (const auto& r : job.ranks) {
    facts.rank_node.push_back(r.node);
    facts.rank_app.push_back(r.app);
    facts.rank_local.push_back(r.local_rank);
  }
  return facts;
}

}  // namespace pm::agent::pmix
