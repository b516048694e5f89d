// The rank map: placing a job on an allocation and reading each rank's place.
#include <memory>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/job_map.hpp"

namespace pm::c {
namespace {

// -H of an MPMD app names hosts as the user spelled them; the map needs the allocation's names
// (localhost and the FQDN are the hostname there), as pmrun's resolve_job does.
std::string allocation_name(const pm::allocation& alloc, const std::string& name) {
  for (const auto& h : alloc.hosts) {
    if (h.name == name) return h.name;
  }
  for (const auto& h : alloc.hosts) {
    if (h.local && me().is_me(name)) return h.name;
  }
  throw pm::error(pm::errc::allocation, "-H: host '" + name + "' is not in the allocation");
}

}  // namespace
}  // namespace pm::c

using namespace pm::c;

namespace pm::c {

std::unique_ptr<pm_map> map_of(const pm_job& job, const pm::job_spec& spec, pm::rank_map placed) {
  auto m = std::make_unique<pm_map>();
  m->map = std::move(placed);
  // Exports are checked now, before anything is shown or started (as pmrun does); the launch
  // facts are decided at the first rank env or launch.
  const auto& s = job.env;
  m->env = pm::make_job_env(s.inherited ? *s.inherited : pm::current_environment(), s.exports,
                            s.profiles, {});
  m->master_port = s.master_port;
  m->stall_timeout = job.stall_timeout;
  m->env.app_overrides = job.app_env;
  m->mapping = spec.mapping;
  m->apps = spec.apps;
  return m;
}

}  // namespace pm::c

extern "C" {

int pm_map_job(pm_map** out, const pm_job* job, const pm_allocation* allocation) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "job", job);
    require(fn, "allocation", allocation);
    if (job->spec.apps.empty()) invalid(fn, "the job has no app (pm_job_add_app)");
    pm::job_spec spec = job->spec;
    for (auto& app : spec.apps) {
      for (auto& name : app.hosts) name = allocation_name(allocation->value, name);
    }
    auto m = pm::c::map_of(*job, spec, pm::map_job(spec, allocation->value));
    *out = m.release();
    return PM_OK;
  });
}

void pm_map_destroy(pm_map* map) {
  delete map;
}

int pm_map_size(const pm_map* map, uint32_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "map", map);
    require(fn, "out", out);
    *out = map->map.size();
    return PM_OK;
  });
}

int pm_map_node_count(const pm_map* map, uint32_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "map", map);
    require(fn, "out", out);
    *out = map->map.num_nodes();
    return PM_OK;
  });
}

int pm_map_app_ranks(const pm_map* map, uint32_t app, uint32_t* first, uint32_t* count) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "map", map);
    require(fn, "first", first);
    require(fn, "count", count);
    if (app >= map->map.num_apps()) {
      invalid(fn, "app " + std::to_string(app) + " is outside the job (" +
                      std::to_string(map->map.num_apps()) + " apps)");
    }
    *first = map->map.app_first_rank(app);
    *count = map->map.app_size(app);
    return PM_OK;
  });
}

int pm_map_placement(const pm_map* map, uint32_t rank, pm_placement* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "map", map);
    require(fn, "out", out);
    check_version(fn, "pm_placement", out->version, PM_PLACEMENT_VERSION);
    check_rank(fn, rank, map->map.size());
    const auto p = map->map.at(rank);
    out->rank = p.rank;
    out->app = p.app;
    out->host = p.host;
    out->local_rank = p.local_rank;
    out->local_size = p.local_size;
    out->node = p.node;
    out->host_name = map->map.allocation().hosts[p.host].name.c_str();
    return PM_OK;
  });
}

int pm_map_ranks_on_host(const pm_map* map, uint32_t host, const uint32_t** ranks, size_t* count) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "map", map);
    require(fn, "ranks", ranks);
    require(fn, "count", count);
    const auto hosts = map->map.allocation().hosts.size();
    if (host >= hosts) {
      invalid(fn, "host " + std::to_string(host) + " is outside the allocation (" +
                      std::to_string(hosts) + " hosts)");
    }
    const auto span = map->map.ranks_on_host(host);
    *ranks = span.empty() ? nullptr : span.data();
    *count = span.size();
    return PM_OK;
  });
}

int pm_map_text(char** out, const pm_map* map, uint32_t jobid) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    *out = copy_string(pm::format_job_map(map->map, jobid));
    return PM_OK;
  });
}

int pm_map_json(char** out, const pm_map* map, uint32_t jobid) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "map", map);
    *out = copy_string(pm::job_map_json(map->map, jobid));
    return PM_OK;
  });
}

}  // extern "C"
