// The simulator: a scenario built from options, scripts and faults; runs give a verdict, the job's
// report, the trace hash and the replay command.
#include <memory>

#include <utility>

#include "guard.hpp"
#include "handles.hpp"
#include "pm/sim/world.hpp"

struct pm_sim {
  pm::sim::scenario scenario;
};

struct pm_sim_result {
  pm::sim::run_result value;
};

static_assert(PM_SIM_CRASH == static_cast<int>(pm::sim::verdict::crash));
static_assert(PM_SIM_LIVENESS == static_cast<int>(pm::sim::verdict::liveness));

using namespace pm::c;

extern "C" {

int pm_sim_new(pm_sim** out, const pm_sim_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    const pm_sim_options defaults = PM_SIM_OPTIONS_INIT;
    if (options == nullptr) options = &defaults;
    check_version(fn, "pm_sim_options", options->version, PM_SIM_OPTIONS_VERSION);
    auto sim = std::make_unique<pm_sim>();
    auto& s = sim->scenario;
    if (options->hosts == 0) invalid(fn, "the simulated cluster needs at least one host");
    if (options->slots == 0) invalid(fn, "slots must be at least 1");
    s.hosts = options->hosts;
    s.slots = options->slots;
    if (options->np != PM_NP_PER_SLOT) {
      if (options->np <= 0 || options->np > 100'000'000) {
        throw pm::error(pm::errc::usage, std::string(fn) + ": np " + std::to_string(options->np) +
                                             ": must be 1..100000000 (or PM_NP_PER_SLOT)");
      }
      s.np = static_cast<std::uint32_t>(options->np);
    }
    const auto by = raw_value(options->map_by);
    switch (by) {
      case PM_MAP_BY_SLOT:
        s.mapping.by = pm::map_by::slot;
        break;
      case PM_MAP_BY_NODE:
        s.mapping.by = pm::map_by::node;
        break;
      case PM_MAP_BY_PPR_NODE:
        s.mapping.by = pm::map_by::ppr_node;
        if (options->ppr == 0) {
          throw pm::error(pm::errc::usage, std::string(fn) + ": ppr:N:node needs N >= 1");
        }
        break;
      default:
        invalid(fn, "unknown pm_map_by value " + std::to_string(by));
    }
    s.mapping.ppr = options->ppr;
    s.mapping.oversubscribe = options->oversubscribe != 0;
    s.seed = options->seed;
    s.control.abort_on_failure = options->no_abort_on_failure == 0;
    if (options->kill_grace_ms != 0)
      s.control.kill_grace = std::chrono::milliseconds(options->kill_grace_ms);
    s.control.timeout = std::chrono::milliseconds(options->timeout_ms);
    if (options->default_script != nullptr)
      s.default_script = pm::sim::parse_script(options->default_script);
    *out = sim.release();
    return PM_OK;
  });
}

void pm_sim_destroy(pm_sim* sim) {
  delete sim;
}

int pm_sim_set_script(pm_sim* sim, uint32_t rank, const char* script) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "sim", sim);
    require(fn, "script", script);
    sim->scenario.set_script(rank, pm::sim::parse_script(script));
    return PM_OK;
  });
}

int pm_sim_set_stall_timeout(pm_sim* sim, double seconds) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "sim", sim);
    sim->scenario.control.stall_timeout = pm::c::stall_timeout_of(seconds);
    return PM_OK;
  });
}

int pm_sim_add_fault(pm_sim* sim, const char* fault) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "sim", sim);
    require(fn, "fault", fault);
    sim->scenario.faults.push_back(pm::sim::parse_fault(fault));
    return PM_OK;
  });
}

int pm_sim_replay_command(char** out, const pm_sim* sim) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "sim", sim);
    *out = copy_string(sim->scenario.replay_command());
    return PM_OK;
  });
}

int pm_sim_run(pm_sim_result** out, const pm_sim* sim, const pm_sim_run_options* options) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "sim", sim);
    const pm_sim_run_options defaults = PM_SIM_RUN_OPTIONS_INIT;
    if (options == nullptr) options = &defaults;
    check_version(fn, "pm_sim_run_options", options->version, PM_SIM_RUN_OPTIONS_VERSION);
    pm::sim::run_options ro;
    const auto* o = options;
    if (o->trace != nullptr) {
      ro.trace = [o](std::string_view line) {
        const std::string copy(line);  // NUL-terminated for C
        o->trace(copy.c_str(), copy.size(), o->user_data);
      };
    }
    if (o->on_spawn != nullptr) {
      ro.on_spawn = [o](std::uint32_t rank, std::uint32_t host, const std::vector<std::string>&) {
        o->on_spawn(rank, host, o->user_data);
      };
    }
    ro.max_events = o->max_events;
    *out = new pm_sim_result{pm::sim::run(sim->scenario, ro)};
    return PM_OK;
  });
}

void pm_sim_result_destroy(pm_sim_result* result) {
  delete result;
}

int pm_sim_result_read(const pm_sim_result* result, pm_sim_result_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "result", result);
    require(fn, "out", out);
    check_version(fn, "pm_sim_result_info", out->version, PM_SIM_RESULT_INFO_VERSION);
    const auto& r = result->value;
    out->verdict = static_cast<pm_sim_verdict>(r.outcome);
    out->finished = r.finished ? 1 : 0;
    out->trace_hash = r.trace_hash;
    out->finish_time_ns = r.finish_time.count();
    out->events = r.stats.events;
    out->problems = r.problems.size();
    out->lines = r.lines.size();
    out->replay = r.replay.c_str();
    return PM_OK;
  });
}

int pm_sim_result_problem(const pm_sim_result* result, size_t index, const char** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "result", result);
    require(fn, "out", out);
    const auto& v = result->value.problems;
    if (index >= v.size()) {
      invalid(fn, "problem " + std::to_string(index) + " does not exist (" +
                      std::to_string(v.size()) + " problems)");
    }
    *out = v[index].c_str();
    return PM_OK;
  });
}

int pm_sim_result_line(const pm_sim_result* result, size_t index, const char** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "result", result);
    require(fn, "out", out);
    const auto& v = result->value.lines;
    if (index >= v.size()) {
      invalid(fn, "line " + std::to_string(index) + " does not exist (" + std::to_string(v.size()) +
                      " lines)");
    }
    *out = v[index].c_str();
    return PM_OK;
  });
}

int pm_sim_result_report(pm_report** out, const pm_sim_result* result) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "result", result);
    *out = new pm_report{result->value.report};
    return PM_OK;
  });
}

int pm_sim_result_explain(char** out, const pm_sim_result* result) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "result", result);
    *out = copy_string(result->value.explain());
    return PM_OK;
  });
}

const char* pm_sim_verdict_name(pm_sim_verdict verdict) {
  const auto v = raw_value(verdict);
  if (std::cmp_less(v, 0) || std::cmp_greater(v, int{PM_SIM_CRASH})) return "unknown";
  return pm::sim::to_string(static_cast<pm::sim::verdict>(v));
}

}  // extern "C"
