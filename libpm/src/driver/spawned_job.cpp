#include "driver/spawned_job.hpp"

#include <algorithm>

#include "pm/error.hpp"

namespace pm::driver {

spawned_job map_spawn(const link::pmix_spawn& request, const allocation& alloc,
                      const std::vector<std::uint32_t>& live, const mapping_policy& policy) {
  allocation free = alloc;
  for (std::size_t h = 0; h < free.hosts.size(); ++h) {
    auto& host = free.hosts[h];
    const std::uint32_t used = h < live.size() ? live[h] : 0;
    host.slots = host.slots > used ? host.slots - used : 0;
    // max_slots 0 means "no limit": a host whose hard limit is used up keeps one slot of room
    // less than asked for cannot be expressed, so it is left at the smallest limit, 1, and its
    // free slots at 0 (it takes a rank only where the policy oversubscribes; documented).
    if (host.max_slots != 0)
      host.max_slots = std::max<std::uint32_t>(1, host.max_slots - std::min(host.max_slots, used));
  }
  job_spec spec;
  spec.mapping = policy;
  spawned_job job;
  for (const auto& a : request.apps) {
    app_context app;
    app.argv = a.argv;
    app.np = a.np;
    app.hosts = a.hosts;
    app.wdir = a.wdir;
    spec.apps.push_back(std::move(app));
    job.apps.push_back(link::app_spec{a.argv, a.wdir, a.env});
  }
  job.map = map_job(spec, free);
  return job;
}

}  // namespace pm::driver
