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

nlohmann::json status_fields(const std::optional<exit_status>& status) {
  nlohmann::json j = {{"exit_code", nullptr}, {"signal", nullptr}};
  if (status) {
    if (status->is_signal())
      j["signal"] = signal_name(status->signal());
    else
      j["exit_code"] = status->code();
  }
  return j;
}

std::string host_name(const job_report& r, std::uint32_t host) {
  return host < r.host_names.size() ? r.host_names[host] : std::to_string(host);
}

}  // namespace

std::string to_json(const job_report& report) {
  nlohmann::json doc;
  doc["exit_code"] = report.exit_code;
  doc["cause"] = to_string(report.cause);
  doc["summary"] = report.summary;
  if (report.signal != 0) doc["signal"] = signal_name(report.signal);
  if (report.cause != cause_kind::none) {
    nlohmann::json failed = status_fields(report.failed_status);
    failed["rank"] = report.failed_rank ? nlohmann::json(*report.failed_rank) : nlohmann::json();
    failed["host"] = report.failed_host ? nlohmann::json(host_name(report, *report.failed_host))
                                        : nlohmann::json();
    doc["failed"] = std::move(failed);
  } else {
    doc["failed"] = nullptr;
  }
  doc["ranks_failed"] = report.ranks_failed;
  doc["ranks_killed"] = report.ranks_killed;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : report.ranks) {
    nlohmann::json j = status_fields(r.status);
    j["rank"] = r.rank;
    j["host"] = host_name(report, r.host);
    j["state"] = to_string(r.state);
    j["pid"] = r.pid;
    if (r.started_at && r.ended_at) {
      j["duration_ms"] =
          std::chrono::duration<double, std::milli>(*r.ended_at - *r.started_at).count();
    } else {
      j["duration_ms"] = nullptr;
    }
    if (!r.reason.empty()) j["reason"] = r.reason;
    ranks.push_back(std::move(j));
  }
  doc["ranks"] = std::move(ranks);
  return doc.dump(2);
}

}  // namespace pm
