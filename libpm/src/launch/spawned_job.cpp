#include "launch/spawned_job.hpp"

#include <algorithm>

#include "pm/error.hpp"

namespace pm::launch {

std::optional<std::uint32_t> spawned_job::node_on(std::uint32_t host) const {
  const auto it = std::find(hosts.begin(), hosts.end(), host);
  if (it == hosts.end()) return std::nullopt;
  return map.node_of_host(static_cast<std::uint32_t>(it - hosts.begin()));
}

link::job_add spawned_job::add_for(std::uint32_t host) const {
  link::job_add add{job, first, first_app, apps, facts};
  if (add.pmix) add.pmix->node = node_on(host).value_or(link::no_node);
  return add;
}

spawned_job map_spawn(const link::pmix_spawn& request, const allocation& alloc,
                      const std::vector<std::uint32_t>& live, const std::vector<bool>& usable,
                      const mapping_policy& policy) {
  spawned_job job;
  allocation room = alloc;
  room.hosts.clear();
  for (std::uint32_t h = 0; h < alloc.hosts.size(); ++h) {
    host each = alloc.hosts[h];
    const std::uint32_t used = h < live.size() ? live[h] : 0;
    const bool lost = h < usable.size() && !usable[h];
    if (lost || (each.max_slots != 0 && used >= each.max_slots)) {
      continue;
    }
    each.slots = each.slots > used ? each.slots - used : 0;
    if (each.max_slots != 0) each.max_slots -= used;
    room.hosts.push_back(std::move(each));
    job.hosts.push_back(h);
  }
  job_spec spec;
  spec.mapping = policy;
  // A bound on what one request may make this launcher hold (a rank's maxprocs is an int).
  constexpr std::uint64_t most = std::uint64_t{1} << 20;
  std::uint64_t asked = 0;
  for (const auto& a : request.apps) asked += a.np;
  if (asked > most) {
    throw error(errc::mapping, std::to_string(asked) + " ranks requested; a spawn may ask for " +
                                   std::to_string(most) + " at most");
  }
  for (const auto& a : request.apps) {
    for (const auto& name : a.hosts) {
      const bool has_room = room.find(name).has_value();
      if (!has_room && alloc.find(name)) {
        throw error(errc::mapping, "host '" + name + "' has no room: it was lost, or its " +
                                       "max_slots are taken by the processes running there");
      }
    }
    if (room.hosts.empty()) {
      throw error(errc::mapping, "no host has room: every one was lost or is at its max_slots");
    }
    app_context app;
    app.argv = a.argv;
    app.np = a.np;
    app.hosts = a.hosts;
    app.wdir = a.wdir;
    spec.apps.push_back(std::move(app));
    job.apps.push_back(link::app_spec{a.argv, a.wdir, a.env});
  }
  job.map = map_job(spec, room);
  return job;
}

}  // namespace pm::launch
