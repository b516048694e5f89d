// Jobs: app contexts (MPMD), the mapping policy and the env settings.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/host_binding.hpp"

namespace pm::c {

std::chrono::milliseconds stall_timeout_of(double seconds) {
  if (!(seconds >= 0) || seconds > 366.0 * 24 * 3600) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", seconds);
    throw pm::error(pm::errc::usage, std::string("--stall-timeout '") + text +
                                         "': expected a positive number of seconds");
  }
  const auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
  if (seconds > 0 && ms.count() == 0) {
    // Below half a millisecond it would round to 0, which turns the watch off: pmrun refuses it.
    char text[64];
    std::snprintf(text, sizeof text, "%g", seconds);
    throw pm::error(pm::errc::usage, std::string("--stall-timeout '") + text +
                                         "': expected a positive number of seconds (at least "
                                         "0.001; 0 turns it off)");
  }
  return ms;
}

namespace {

std::vector<pm::env_var> app_variables(const char* function, const char* const* env) {
  std::vector<pm::env_var> out;
  for (const auto& entry : to_strings(env)) {
    const auto eq = entry.find('=');
    const auto name = entry.substr(0, eq);
    if (eq == std::string::npos) {
      throw pm::error(pm::errc::env,
                      std::string(function) + ": app env entry '" + entry + "' is not NAME=value");
    }
    if (!pm::is_valid_env_name(name)) {
      throw pm::error(pm::errc::env, std::string(function) + ": app env entry '" + entry +
                                         "': invalid variable name '" + name + "'");
    }
    out.push_back({name, entry.substr(eq + 1)});
  }
  return out;
}

// One pmrun option value, parsed by pm/host_binding.hpp's parsers: their pm::error(usage) names
// the option and the value. A control character would break that message's one line, so such a
// value is refused before it is quoted.
template <class Apply>
int set_binding_option(const char* fn, pm_job* job, const char* value, Apply&& apply) {
  require(fn, "job", job);
  require(fn, "value", value);
  const std::string_view v(value);
  if (std::any_of(v.begin(), v.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    throw pm::error(pm::errc::usage, std::string(fn) + ": the value holds a control character");
  }
  apply(job->spec.mapping, v);
  return PM_OK;
}

}  // namespace
}  // namespace pm::c

using namespace pm::c;

extern "C" {

int pm_job_new(pm_job** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    *out = new pm_job{};
    return PM_OK;
  });
}

void pm_job_destroy(pm_job* job) {
  delete job;
}

int pm_job_add_app(pm_job* job, const pm_app_options* app) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    require(fn, "app", app);
    check_version(fn, "pm_app_options", app->version, PM_APP_OPTIONS_VERSION);
    if (app->argv == nullptr || app->argv[0] == nullptr || app->argv[0][0] == '\0')
      invalid(fn, "the app has no program (argv is NULL or empty)");
    pm::app_context ctx;
    ctx.argv = to_strings(app->argv);
    if (app->np != PM_NP_PER_SLOT) {
      if (app->np <= 0 || app->np > std::numeric_limits<std::uint32_t>::max()) {
        throw pm::error(pm::errc::usage, std::string(fn) + ": np " + std::to_string(app->np) +
                                             ": must be at least 1 (or PM_NP_PER_SLOT)");
      }
      ctx.np = static_cast<std::uint32_t>(app->np);
    }
    if (app->hosts != nullptr) {
      // Checked at once (a malformed list is this call's error); matched by pm_map_job.
      for (const auto& h : pm::parse_host_list(app->hosts, "-H").hosts) ctx.hosts.push_back(h.name);
    }
    if (app->wdir != nullptr) ctx.wdir = app->wdir;
    auto env = app_variables(fn, app->env);
    job->app_env.reserve(job->spec.apps.size() + 1);
    job->spec.apps.push_back(std::move(ctx));
    job->app_env.push_back(std::move(env));
    return PM_OK;
  });
}

int pm_job_app_count(const pm_job* job, size_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    require(fn, "out", out);
    *out = job->spec.apps.size();
    return PM_OK;
  });
}

int pm_job_set_mapping(pm_job* job, const pm_mapping_options* mapping) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    const pm_mapping_options defaults = PM_MAPPING_OPTIONS_INIT;
    if (mapping == nullptr) mapping = &defaults;
    check_version(fn, "pm_mapping_options", mapping->version, PM_MAPPING_OPTIONS_VERSION);
    // As --map-by slot|node|ppr:N:node: what the binding setters chose within hosts (rank-by,
    // bind-to, cpus and GPUs per rank, report-bindings) stays.
    pm::mapping_policy policy = job->spec.mapping;
    policy.oversubscribe.reset();
    pm::topo::map_option across;
    const auto by = raw_value(mapping->by);
    switch (by) {
      case PM_MAP_BY_SLOT:
        across.by = pm::topo::object::slot;
        break;
      case PM_MAP_BY_NODE:
        across.by = pm::topo::object::node;
        break;
      case PM_MAP_BY_PPR_NODE:
        across.by = pm::topo::object::node;
        across.ppr = mapping->ppr;
        if (mapping->ppr == 0) {
          throw pm::error(pm::errc::usage, std::string(fn) + ": ppr:N:node needs N of at least 1");
        }
        break;
      default:
        invalid(fn, "unknown pm_map_by value " + std::to_string(by));
    }
    pm::set_map_by(policy, across);
    policy.ppr = mapping->ppr;
    if (mapping->oversubscribe == 0 || mapping->oversubscribe == 1) {
      policy.oversubscribe = mapping->oversubscribe == 1;
    } else if (mapping->oversubscribe != -1) {
      invalid(fn, "oversubscribe must be -1, 0 or 1");
    }
    job->spec.mapping = policy;
    return PM_OK;
  });
}

int pm_job_set_map_by(pm_job* job, const char* value) {
  return guard(__func__, [&](const char* fn) {
    return set_binding_option(fn, job, value, [](pm::mapping_policy& m, std::string_view v) {
      if (v.empty()) throw pm::error(pm::errc::usage, "--map-by: empty value");  // as pmrun
      // ":OVERSUBSCRIBE" alone means slot, as pmrun reads it.
      const std::string spec = v.front() == ':' ? "slot" + std::string(v) : std::string(v);
      pm::set_map_by(m, pm::topo::parse_map_by(spec));
    });
  });
}

int pm_job_set_rank_by(pm_job* job, const char* value) {
  return guard(__func__, [&](const char* fn) {
    return set_binding_option(fn, job, value, [](pm::mapping_policy& m, std::string_view v) {
      pm::set_rank_by(m, pm::topo::parse_rank_by(v));
    });
  });
}

int pm_job_set_bind_to(pm_job* job, const char* value) {
  return guard(__func__, [&](const char* fn) {
    return set_binding_option(fn, job, value, [](pm::mapping_policy& m, std::string_view v) {
      m.host.bind = pm::topo::parse_bind_to(v);
    });
  });
}

int pm_job_set_cpus_per_rank(pm_job* job, const char* value) {
  return guard(__func__, [&](const char* fn) {
    return set_binding_option(fn, job, value, [](pm::mapping_policy& m, std::string_view v) {
      m.host.cpus_per_rank = pm::topo::parse_cpus_per_rank(v);
    });
  });
}

int pm_job_set_gpus_per_rank(pm_job* job, const char* value) {
  return guard(__func__, [&](const char* fn) {
    return set_binding_option(fn, job, value, [](pm::mapping_policy& m, std::string_view v) {
      m.host.gpus = pm::topo::parse_gpus_per_rank(v);
    });
  });
}

int pm_job_set_stall_timeout(pm_job* job, double seconds) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    job->stall_timeout = pm::c::stall_timeout_of(seconds);
    return PM_OK;
  });
}

int pm_job_set_report_bindings(pm_job* job, int on) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    if (on != 0 && on != 1) invalid(fn, "on must be 0 or 1");
    job->spec.mapping.report_bindings = on == 1;
    return PM_OK;
  });
}

int pm_job_set_env(pm_job* job, const pm_env_options* env) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "job", job);
    const pm_env_options defaults = PM_ENV_OPTIONS_INIT;
    if (env == nullptr) env = &defaults;
    check_version(fn, "pm_env_options", env->version, PM_ENV_OPTIONS_VERSION);
    pm_env_settings s;
    if (env->profiles != nullptr) s.profiles = pm::parse_env_profiles(env->profiles);
    s.exports.x = to_strings(env->exports);
    const auto mca = to_strings(env->mca);
    if (mca.size() % 2 != 0) invalid(fn, "mca holds a key without a value");
    for (std::size_t i = 0; i < mca.size(); i += 2) s.exports.mca.emplace_back(mca[i], mca[i + 1]);
    if (env->inherited != nullptr) s.inherited = to_env_map(env->inherited);
    if (env->master_port != 0) s.master_port = env->master_port;
    job->env = std::move(s);
    return PM_OK;
  });
}

}  // extern "C"
