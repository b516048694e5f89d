// job_report rendering: names for states and causes, and the JSON report
// (schema: docs/failure-semantics.md, "The report").
#include "pm/report.hpp"

#include <nlohmann/json.hpp>

namespace pm {

const char* to_string(rank_state s) noexcept {
  switch (s) {
    case rank_state::pending:
      return "pending";
    case rank_state::running:
      return "running";
    case rank_state::exited:
      return "exited";
    case rank_state::killed:
      return "killed";
    case rank_state::spawn_failed:
      return "spawn_failed";
    case rank_state::lost:
      return "lost";
  }
  return "unknown";
}

const char* to_string(cause_kind k) noexcept {
  switch (k) {
    case cause_kind::none:
      return "none";
    case cause_kind::rank_failed:
      return "rank_failed";
    case cause_kind::spawn_failed:
      return "spawn_failed";
    case cause_kind::abort_requested:
      return "abort_requested";
    case cause_kind::host_lost:
      return "host_lost";
    case cause_kind::signal:
      return "signal";
    case cause_kind::timeout:
      return "timeout";
  }
  return "unknown";
}

namespace {

// Keys in the documented order, so that a human reading the file finds the cause first.
using json = nlohmann::ordered_json;

json optional_number(const auto& v) {
  return v ? json(*v) : json();
}

// "exit_code" and "signal" (by name), null when absent, as the schema promises.
void put_status(json& j, const std::optional<exit_status>& status) {
  j["exit_code"] = status && !status->is_signal() ? json(status->code()) : json();
  j["signal"] = status && status->is_signal() ? json(signal_name(status->signal())) : json();
}

std::string host_name(const job_report& r, std::uint32_t host) {
  return host < r.host_names.size() ? r.host_names[host] : std::to_string(host);
}

}  // namespace

std::string to_json(const job_report& report) {
  json doc;
  doc["exit_code"] = report.exit_code;
  doc["cause"] = to_string(report.cause);
  doc["signal"] = report.signal != 0 ? json(signal_name(report.signal)) : json();
  doc["summary"] = report.summary;
  if (report.cause != cause_kind::none) {
    json failed;
    failed["rank"] = optional_number(report.failed_rank);
    failed["host"] = report.failed_host ? json(host_name(report, *report.failed_host)) : json();
    put_status(failed, report.failed_status);
    // The reason the failed rank carries: why it could not start, its abort message, why its
    // host was lost.
    json reason;
    if (report.failed_rank && *report.failed_rank < report.ranks.size() &&
        !report.ranks[*report.failed_rank].reason.empty())
      reason = report.ranks[*report.failed_rank].reason;
    failed["reason"] = std::move(reason);
    doc["failed"] = std::move(failed);
  } else {
    doc["failed"] = nullptr;
  }
  doc["ranks_failed"] = report.ranks_failed;
  doc["ranks_killed"] = report.ranks_killed;
  json ranks = json::array();
  for (const auto& r : report.ranks) {
    json j;
    j["rank"] = r.rank;
    j["host"] = host_name(report, r.host);
    j["state"] = to_string(r.state);
    put_status(j, r.status);
    j["pid"] = r.pid != 0 ? json(r.pid) : json();
    j["duration_ms"] =
        r.started_at && r.ended_at
            ? json(std::chrono::duration<double, std::milli>(*r.ended_at - *r.started_at).count())
            : json();
    j["reason"] = r.reason.empty() ? json() : json(r.reason);
    ranks.push_back(std::move(j));
  }
  doc["ranks"] = std::move(ranks);
  return doc.dump(2);
}

}  // namespace pm
