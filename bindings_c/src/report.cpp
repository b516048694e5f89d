// Reports: how a job ended, read field by field or as JSON.
#include <utility>

#include "guard.hpp"
#include "handles.hpp"

namespace pm::c {

void fill_rank_info(const pm::rank_report& r, pm_rank_info& out) {
  out.rank = r.rank;
  out.host = r.host;
  out.state = static_cast<pm_rank_state>(r.state);
  out.ended = r.status ? 1 : 0;
  out.exit_code = r.status && !r.status->is_signal() ? r.status->code() : 0;
  out.signal = r.status ? r.status->signal() : 0;
  out.pid = r.pid;
  out.reason = r.reason.c_str();
}

}  // namespace pm::c

// The C enums name the C++ ones in the same order.
static_assert(PM_RANK_LOST == static_cast<int>(pm::rank_state::lost));
static_assert(PM_RANK_NOT_STARTED == static_cast<int>(pm::rank_state::not_started));
static_assert(PM_RANK_SPAWN_FAILED == static_cast<int>(pm::rank_state::spawn_failed));
static_assert(PM_RANK_KILLED == static_cast<int>(pm::rank_state::killed));
static_assert(PM_CAUSE_TIMEOUT == static_cast<int>(pm::cause_kind::timeout));
static_assert(PM_CAUSE_STALLED == static_cast<int>(pm::cause_kind::stalled));
static_assert(PM_CAUSE_SIGNAL == static_cast<int>(pm::cause_kind::signal));
static_assert(PM_CAUSE_HOST_LOST == static_cast<int>(pm::cause_kind::host_lost));
static_assert(PM_CAUSE_ABORT_REQUESTED == static_cast<int>(pm::cause_kind::abort_requested));

using namespace pm::c;

extern "C" {

void pm_report_destroy(pm_report* report) {
  delete report;
}

int pm_report_restarts(const pm_report* report, uint32_t* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "report", report);
    require(fn, "out", out);
    const auto& i = report->value.incarnations;
    *out = report->value.recovery ? static_cast<uint32_t>(report->value.rank_restarts.size())
           : i.empty()            ? 0
                                  : static_cast<uint32_t>(i.size() - 1);
    return PM_OK;
  });
}

int pm_report_read(const pm_report* report, pm_report_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "report", report);
    require(fn, "out", out);
    check_version(fn, "pm_report_info", out->version, PM_REPORT_INFO_VERSION);
    const auto& r = report->value;
    out->exit_code = r.exit_code;
    out->cause = static_cast<pm_cause>(r.cause);
    out->failed_rank = r.failed_rank ? static_cast<int64_t>(*r.failed_rank) : -1;
    out->failed_host = r.failed_host ? static_cast<int64_t>(*r.failed_host) : -1;
    out->failed_host_name = r.failed_host && *r.failed_host < r.host_names.size()
                                ? r.host_names[*r.failed_host].c_str()
                                : nullptr;
    out->failed_code =
        r.failed_status && !r.failed_status->is_signal() ? r.failed_status->code() : 0;
    out->failed_signal = r.failed_status ? r.failed_status->signal() : 0;
    out->signal = r.signal;
    out->summary = r.summary.c_str();
    out->ranks = static_cast<uint32_t>(r.ranks.size());
    out->ranks_failed = r.ranks_failed;
    out->ranks_killed = r.ranks_killed;
    return PM_OK;
  });
}

int pm_report_rank(const pm_report* report, uint32_t rank, pm_rank_info* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "report", report);
    require(fn, "out", out);
    check_version(fn, "pm_rank_info", out->version, PM_RANK_INFO_VERSION);
    const auto& ranks = report->value.ranks;
    check_rank(fn, rank, ranks.size());
    fill_rank_info(ranks[rank], *out);
    return PM_OK;
  });
}

int pm_report_resources(const pm_report* report, uint32_t rank, pm_rank_resources* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "report", report);
    require(fn, "out", out);
    check_version(fn, "pm_rank_resources", out->version, PM_RANK_RESOURCES_VERSION);
    const auto& r = report->value;
    check_rank(fn, rank, r.ranks.size());
    // A job that planned nothing, and the ranks of jobs its ranks spawned, have no entry.
    static const pm::rank_resources none;
    const auto& res = rank < r.resources.size() ? r.resources[rank] : none;
    out->cpus = res.cpus.c_str();
    out->gpu_count = res.gpus.size();
    out->gpus = res.gpus.empty() ? nullptr : res.gpus.data();
    out->nic = res.nic.c_str();
    return PM_OK;
  });
}

int pm_report_json(char** out, const pm_report* report) {
  return guard(__func__, [&](const char* fn) {
    require(fn, "out", out);
    require(fn, "report", report);
    *out = copy_string(pm::to_json(report->value));
    return PM_OK;
  });
}

const char* pm_cause_name(pm_cause cause) {
  const auto v = raw_value(cause);
  if (std::cmp_less(v, 0) || std::cmp_greater(v, int{PM_CAUSE_STALLED})) return "unknown";
  return pm::to_string(static_cast<pm::cause_kind>(v));
}

const char* pm_rank_state_name(pm_rank_state state) {
  const auto v = raw_value(state);
  if (std::cmp_less(v, 0) || std::cmp_greater(v, int{PM_RANK_NOT_STARTED})) return "unknown";
  return pm::to_string(static_cast<pm::rank_state>(v));
}

}  // extern "C"
