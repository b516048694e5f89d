// job_report rendering: names for states and causes, and the JSON report
// (schema: docs/failure-semantics.md, "The report").
#include "pm/report.hpp"

#include "text/json_writer.hpp"

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
    case rank_state::not_started:
      return "not_started";
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
    case cause_kind::stalled:
      return "stalled";
  }
  return "unknown";
}

namespace {

// "exit_code" and "signal" (by name), null when absent, as the schema promises.
void put_status(json_writer& w, const std::optional<exit_status>& status) {
  w.member("exit_code",
           status && !status->is_signal() ? std::optional(status->code()) : std::nullopt);
  w.member("signal", status && status->is_signal() ? std::optional(signal_name(status->signal()))
                                                   : std::nullopt);
}

std::string host_name(const job_report& r, std::uint32_t host) {
  return host < r.host_names.size() ? r.host_names[host] : std::to_string(host);
}

// A text, or null when empty.
std::optional<std::string_view> text_or_null(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string_view>(s);
}

// The milliseconds between two driver time stamps, or null when either is missing.
std::optional<double> duration_ms(const std::optional<std::chrono::nanoseconds>& started,
                                  const std::optional<std::chrono::nanoseconds>& ended) {
  if (!started || !ended) return std::nullopt;
  return std::chrono::duration<double, std::milli>(*ended - *started).count();
}

}  // namespace

// Keys in the documented order, so that a human reading the file finds the cause first. Written
// by json_writer: no DOM to destroy, so running out of memory here is a plain std::bad_alloc.
std::string to_json(const job_report& report) {
  json_writer w(2);
  w.begin_object();
  w.member("exit_code", report.exit_code);
  w.member("cause", to_string(report.cause));
  w.member("signal", report.signal != 0 ? std::optional(signal_name(report.signal)) : std::nullopt);
  w.member("summary", report.summary);
  w.key("failed");
  if (report.cause != cause_kind::none) {
    w.begin_object();
    w.member("rank", report.failed_rank);
    w.member("host", report.failed_host ? std::optional(host_name(report, *report.failed_host))
                                        : std::nullopt);
    put_status(w, report.failed_status);
    // The reason the failed rank carries: why it could not start, its abort message, why its
    // host was lost.
    const bool known = report.failed_rank && *report.failed_rank < report.ranks.size();
    w.member("reason",
             known ? text_or_null(report.ranks[*report.failed_rank].reason) : std::nullopt);
    w.end_object();
  } else {
    w.null();
  }
  w.member("ranks_failed", report.ranks_failed);
  w.member("ranks_killed", report.ranks_killed);
  w.key("ranks").begin_array();
  for (const auto& r : report.ranks) {
    w.begin_object();
    w.member("rank", r.rank);
    // Only for ranks of spawned jobs, so that a report without spawns keeps its schema.
    if (r.job != 0) {
      w.member("job", r.job);
      w.member("job_rank", r.job_rank);
    }
    w.member("host", host_name(report, r.host));
    w.member("state", to_string(r.state));
    put_status(w, r.status);
    w.member("pid", r.pid != 0 ? std::optional(r.pid) : std::nullopt);
    w.member("duration_ms", duration_ms(r.started_at, r.ended_at));
    w.member("reason", text_or_null(r.reason));
    // Only for a job that planned its hosts, so that a plain report keeps its schema.
    if (r.job == 0 && r.rank < report.resources.size()) {
      const auto& got = report.resources[r.rank];
      w.member("cpus", text_or_null(got.cpus));
      w.key("gpus").begin_array();
      for (const auto g : got.gpus) w.value(g);
      w.end_array();
      w.member("nic", text_or_null(got.nic));
    }
    w.end_object();
  }
  w.end_array();
  // Only for a launch that may restart, so that a plain report keeps its schema.
  if (!report.incarnations.empty()) {
    w.member("restarts", static_cast<std::uint32_t>(report.incarnations.size() - 1));
    w.key("incarnations").begin_array();
    for (const auto& i : report.incarnations) {
      w.begin_object();
      w.member("incarnation", i.number);
      w.member("exit_code", i.exit_code);
      w.member("cause", to_string(i.cause));
      w.member("summary", text_or_null(i.summary));
      w.member("failed_rank", i.failed_rank);
      w.member("failed_host",
               i.failed_host ? std::optional(host_name(report, *i.failed_host)) : std::nullopt);
      w.member("ranks_failed", i.ranks_failed);
      w.member("ranks_killed", i.ranks_killed);
      w.member("size", i.size);
      w.member("hosts", i.hosts);
      w.member("duration_ms", duration_ms(i.started_at, i.ended_at));
      w.end_object();
    }
    w.end_array();
    w.key("quarantined").begin_array();
    for (const auto& q : report.quarantined) {
      w.begin_object();
      w.member("host", q.name.empty() ? host_name(report, q.host) : q.name);
      w.member("reason", q.reason);
      w.member("incarnation", q.incarnation);
      w.end_object();
    }
    w.end_array();
  }
  // Only with --enable-recovery: every rank started again alone, in order.
  if (report.recovery) {
    w.member("restarts", static_cast<std::uint32_t>(report.rank_restarts.size()));
    w.key("rank_restarts").begin_array();
    for (const auto& x : report.rank_restarts) {
      w.begin_object();
      w.member("restart", x.number);
      w.member("rank", x.rank);
      w.member("host", host_name(report, x.host));
      w.member("count", x.count);
      put_status(w, x.status);
      w.member("summary", x.summary);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return w.take();
}

}  // namespace pm
