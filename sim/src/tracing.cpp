// The run's trace: every controller event and action goes into the trace hash (a streamed
// FNV-1a), and into readable lines when the run asked for them.
#include <signal.h>

#include "world_impl.hpp"

namespace pm::sim {

namespace {

std::string rank_list(const std::vector<std::uint32_t>& ranks) {
  if (ranks.empty()) return "[]";
  if (ranks.size() == 1) return "[" + std::to_string(ranks[0]) + "]";
  return "[" + std::to_string(ranks.front()) + ".." + std::to_string(ranks.back()) + "] (" +
         std::to_string(ranks.size()) + ")";
}

}  // namespace

void world::line(const std::string& text) {
  if (tracing()) o_.trace(trace_time(now_) + " " + text);
}

void world::trace_event(const event& e) {
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x100 + e.index());
  std::visit(
      overloaded{
          [&](const job_start&) { line("<- job_start"); },
          [&](const rank_started& x) {
            hash_.add(x.rank);
            if (tracing())
              line("<- rank_started rank=" + std::to_string(x.rank) +
                   " pid=" + std::to_string(x.pid));
          },
          [&](const rank_spawn_failed& x) {
            hash_.add(x.rank);
            hash_.add(static_cast<std::uint64_t>(x.code));
            if (tracing())
              line("<- rank_spawn_failed rank=" + std::to_string(x.rank) +
                   " code=" + std::to_string(x.code) + " " + x.reason);
          },
          [&](const stream_closed& x) {
            hash_.add(x.rank);
            hash_.add(static_cast<std::uint64_t>(x.stream));
            hash_.add(x.bytes);
            if (tracing())
              line("<- stream_closed rank=" + std::to_string(x.rank) + " " +
                   std::string(pm::to_string(x.stream)) + " bytes=" + std::to_string(x.bytes));
          },
          [&](const rank_exited& x) {
            hash_.add(x.rank);
            hash_.add(encode(x.status));
            if (tracing())
              line("<- rank_exited rank=" + std::to_string(x.rank) + " " + x.status.describe());
          },
          [&](const host_lost& x) {
            hash_.add(x.host);
            if (x.before_hello) hash_.add(0x1e110);
            if (tracing())
              line("<- host_lost host=" + std::to_string(x.host) + " (" + host_name(x.host) + ")" +
                   (x.before_hello ? " before its hello " : " ") + x.reason);
          },
          [&](const timer_fired& x) {
            hash_.add(x.timer);
            if (tracing()) line("<- timer_fired timer=" + std::to_string(x.timer));
          },
          [&](const signal_received& x) {
            hash_.add(static_cast<std::uint64_t>(x.signo));
            if (tracing()) line("<- signal_received " + signal_name(x.signo));
          },
          [&](const abort_requested& x) {
            hash_.add(x.rank.value_or(0xffffffffu));
            hash_.add(static_cast<std::uint64_t>(x.status));
            if (tracing())
              line("<- abort_requested rank=" +
                   (x.rank ? std::to_string(*x.rank) : std::string("none")) +
                   " status=" + std::to_string(x.status));
          },
          [&](const rank_unfinalized& x) {
            hash_.add(x.rank);
            hash_.add(encode(x.status));
            if (tracing())
              line("<- rank_unfinalized rank=" + std::to_string(x.rank) + " " +
                   x.status.describe());
          },
          // The simulator's driver does not spawn jobs; traced for a driver that would.
          [&](const job_spawned& x) {
            hash_.add(x.hosts.size());
            if (!x.hosts.empty()) hash_.add(x.hosts.front());
            if (tracing()) line("<- job_spawned hosts=" + rank_list(x.hosts));
          },
          [&](const spawn_withdrawn& x) {
            hash_.add(x.ranks.size());
            if (!x.ranks.empty()) hash_.add(x.ranks.front());
            if (tracing()) line("<- spawn_withdrawn ranks=" + rank_list(x.ranks));
          },
          [&](const job_stalled&) { line("<- job_stalled"); },
      },
      e);
}

void world::trace_action(const action& a) {
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x200 + a.index());
  std::visit(
      overloaded{
          [&](const spawn& x) {
            hash_.add(x.host);
            hash_.add(x.ranks.size());
            if (!x.ranks.empty()) hash_.add(x.ranks.front());
            if (tracing())
              line("-> spawn host=" + std::to_string(x.host) + " ranks=" + rank_list(x.ranks));
          },
          [&](const signal_ranks& x) {
            hash_.add(x.host);
            hash_.add(static_cast<std::uint64_t>(x.signo));
            hash_.add(x.ranks.size());
            if (!x.ranks.empty()) hash_.add(x.ranks.front());
            if (tracing())
              line("-> signal_ranks host=" + std::to_string(x.host) + " " + signal_name(x.signo) +
                   " ranks=" + rank_list(x.ranks));
          },
          [&](const pm::start_timer& x) {
            hash_.add(x.timer);
            hash_.add(static_cast<std::uint64_t>(x.after.count()));
            if (tracing())
              line("-> start_timer timer=" + std::to_string(x.timer) +
                   " after=" + format_duration(x.after));
          },
          [&](const pm::cancel_timer& x) {
            hash_.add(x.timer);
            if (tracing()) line("-> cancel_timer timer=" + std::to_string(x.timer));
          },
          [&](const emit& x) {
            hash_.add(x.line);
            line("-> emit " + x.line);
          },
          [&](const clear_leftovers&) { line("-> clear_leftovers"); },
          [&](const notify_ranks& x) {
            hash_.add(x.host);
            hash_.add(static_cast<std::uint64_t>(x.kind));
            hash_.add(static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.code)));
            for (const auto r : x.ranks) hash_.add(r);
            if (tracing())
              line("-> notify_ranks host=" + std::to_string(x.host) + " " +
                   std::string(to_string(x.kind)) + " ranks=" + rank_list(x.ranks) +
                   " code=" + std::to_string(x.code));
          },
          [&](const rank_restarting& x) {
            hash_.add(x.restart.rank);
            hash_.add(x.restart.number);
            if (tracing())
              line("-> rank_restarting rank=" + std::to_string(x.restart.rank) +
                   " number=" + std::to_string(x.restart.number));
          },
          [&](const finish& x) {
            hash_.add(static_cast<std::uint64_t>(x.report.exit_code));
            hash_.add(static_cast<std::uint64_t>(x.report.cause));
            if (tracing())
              line("-> finish exit_code=" + std::to_string(x.report.exit_code) +
                   " cause=" + pm::to_string(x.report.cause) + " " + x.report.summary);
          },
      },
      a);
}

}  // namespace pm::sim
