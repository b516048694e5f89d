// Hosts that join at a restart (restart_policy::host_discovery, Horovod's
// --host-discovery-script; docs/resilience.md "Hosts that join"). When an incarnation failed and
// the launch restarts, the driver runs the command while the agents clear what is left; the hosts
// it names that the launch does not have yet join the allocation and their agents start, as
// spares' do; once each is up (or lost), the next incarnation is placed: a lost host's ranks move
// to one of them, a job that shrank grows back. A quarantined host the command names comes back
// (a new agent) only when nothing else can take the ranks.
#include <algorithm>

#include "launch/launcher_impl.hpp"
#include "pm/error.hpp"

namespace pm::launch {

namespace {

std::string names_of(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void launcher::impl::discover() {
  inc.discovering = true;
  decided(job_wide, "discover hosts");
  out->push_back(discover_hosts{req.restarts.host_discovery, req.restarts.discovery_timeout});
}

void launcher::impl::on_discovered(discovery found) {
  if (!inc.discovering || !inc.between || done || finishing) return;
  inc.discovering = false;
  if (!found.failure.empty()) {
    out->push_back(
        say{"host discovery failed: " + found.failure + "; going on with the hosts there are"});
  }
  std::vector<host> more;
  std::vector<std::string> names;
  inc.comeback.clear();
  const auto& alloc = req.map.allocation();
  for (auto& h : found.hosts) {
    if (const auto known = alloc.find(h.name)) {
      const auto& hs = hosts[*known];
      // A lost host (quarantined, or to be): only once its agent is gone for good (its
      // carrier ended) can it get a new one.
      if ((hs.quarantined || hs.lost_told) && hs.closed && !is_relayed(*known) &&
          std::find(inc.comeback.begin(), inc.comeback.end(), *known) == inc.comeback.end()) {
        inc.comeback.push_back(*known);
      }
      continue;
    }
    if (std::find(names.begin(), names.end(), h.name) != names.end()) continue;  // named twice
    names.push_back(h.name);
    more.push_back(std::move(h));
  }
  if (!more.empty()) {
    const auto first = static_cast<std::uint32_t>(hosts.size());
    if (inc.next_map) inc.next_map = with_hosts(*inc.next_map, more);
    req.map = with_hosts(req.map, std::move(more));
    hosts.resize(req.map.allocation().hosts.size());
    out->push_back(say{(names.size() == 1 ? "host " : "hosts ") + names_of(names) +
                       (names.size() == 1 ? " joins" : " join") + " (--host-discovery-script)"});
    for (auto h = first; h < hosts.size(); ++h) {
      hosts[h].spare = true;  // asked for its shape as a spare is
      hosts[h].joining = true;
      ++inc.joining;
      decided(h, "discovered");
      link_to(h);
    }
  }
  if (inc.joining == 0) place_after_discovery();
}

// A joining host is up (with its shape, when hosts are planned), or was lost.
void launcher::impl::host_joined(std::uint32_t h) {
  auto& hs = hosts[h];
  if (!hs.joining) return;
  hs.joining = false;
  --inc.joining;
  // Its agent learns the next incarnation as the others did (it answers `restarted` too).
  if (hs.agent && inc.requested) request_restart(h);
  if (inc.joining == 0 && !inc.discovering) place_after_discovery();
}

// Every host awaited (named by the command, or one of the job's still being set up when the
// failure came) is up or lost: the next incarnation's place, with them.
void launcher::impl::place_after_discovery() {
  if (!inc.between || done || finishing) return;
  auto place = place_next();
  if (!place && !inc.comeback.empty()) {
    const auto back = std::move(inc.comeback);
    inc.comeback.clear();
    std::vector<std::string> names;
    for (const auto h : back) names.push_back(host_info(h).name);
    out->push_back(say{"nothing else is left: lost " +
                       std::string(names.size() == 1 ? "host " : "hosts ") + names_of(names) +
                       (names.size() == 1 ? " is" : " are") +
                       " tried again (--host-discovery-script named " +
                       (names.size() == 1 ? "it" : "them") + ")"});
    for (const auto h : back) readmit(h);
    return;  // placed again once they are up or lost (joined)
  }
  inc.comeback.clear();
  if (!place) {
    auto r = std::move(*inc.failed);
    end_restarts(std::move(r), "cannot restart the job: " + no_place_reason());
    return;
  }
  if (inc.announce) {
    inc.announce = false;
    out->push_back(say{restarting_text()});
  }
  if (place->map) {
    replace_lost(std::move(*place));
    request_restart();
  }
  maybe_start_incarnation();
}

// Why the next incarnation has no place: the lost hosts whose ranks nothing takes.
std::string launcher::impl::no_place_reason() const {
  std::vector<std::string> lost;
  const auto& base = map_of_next();
  for (std::uint32_t n = 0; n < base.num_nodes(); ++n) {
    const auto h = base.host_of_node(n);
    const auto& hs = hosts[h];
    if (hs.quarantined || hs.lost_told || !hs.agent || hs.down) lost.push_back(host_info(h).name);
  }
  std::string why =
      "no spare" + std::string(req.restarts.host_discovery.empty() ? "" : " or discovered host") +
      " takes the ranks of " + (lost.size() == 1 ? "lost host " : "lost hosts ") + names_of(lost);
  if (req.restarts.min_hosts > 0) {
    why += ", and fewer than --min-hosts " + std::to_string(req.restarts.min_hosts) +
           " hosts are left";
  }
  return why;
}

// A quarantined host comes back: a new agent, as a joining host's.
void launcher::impl::readmit(std::uint32_t h) {
  auto& hs = hosts[h];
  hs.ep.reset();
  hs.agent.reset();
  hs.agent_error.clear();
  hs.pmix.reset();
  hs.pending_spawns.clear();
  hs.lost_told = false;
  hs.quarantined = false;
  hs.loss_reported = false;
  hs.lost_with_parent = false;
  hs.retrying = false;
  hs.shutdown_sent = false;
  hs.shutdown_waits = false;
  hs.shutdown_confirmed = false;
  hs.down_greeted = false;
  hs.timed_out = false;
  hs.refused_bytes = false;
  hs.setup_since.reset();
  hs.abandoned = false;
  hs.restart_waited = false;
  hs.spare = true;
  hs.joining = true;
  ++inc.joining;
  loss_reasons.erase(h);
  if (h < shapes.size()) shapes[h].reset();
  decided(h, "back");
  link_to(h);
}

}  // namespace pm::launch
