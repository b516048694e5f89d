// One line per controller action, for tests that compare action lists exactly, replay a run to
// check that it is deterministic, or print what went wrong. Written once for every test.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "pm/controller.hpp"
#include "pm/exit_status.hpp"
#include "pm/report.hpp"

namespace pm::test {

inline std::string ranks_text(const std::vector<std::uint32_t>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? " " : "") + std::to_string(ranks[i]);
  return s + "]";
}

/// How much of a finish action's report the line carries.
enum class report_detail {
  summary,  ///< "finish 7 rank_failed"
  full,     ///< "finish {the report as JSON}": any difference in the report shows
};

/// "spawn 0 [0 1]", "signal 1 [2] SIGTERM", "start_timer 3 500ms", "cancel_timer 3",
/// "emit LINE", "clear_leftovers", "notify 2 rank_exited [1] 7" (host, kind, affected ranks,
/// code), "restart_rank 3 on 1 #2 (its 1)" (rank, host, the job's count, the rank's),
/// "finish ..." (see report_detail).
inline std::string describe(const pm::action& a, report_detail detail = report_detail::summary) {
  std::ostringstream o;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, pm::spawn>)
          o << "spawn " << x.host << " " << ranks_text(x.ranks);
        else if constexpr (std::is_same_v<T, pm::signal_ranks>)
          o << "signal " << x.host << " " << ranks_text(x.ranks) << " " << pm::signal_name(x.signo);
        else if constexpr (std::is_same_v<T, pm::start_timer>)
          o << "start_timer " << x.timer << " " << x.after.count() << "ms";
        else if constexpr (std::is_same_v<T, pm::cancel_timer>)
          o << "cancel_timer " << x.timer;
        else if constexpr (std::is_same_v<T, pm::emit>)
          o << "emit " << x.line;
        else if constexpr (std::is_same_v<T, pm::clear_leftovers>)
          o << "clear_leftovers";
        else if constexpr (std::is_same_v<T, pm::notify_ranks>)
          o << "notify " << x.host << " " << pm::to_string(x.kind) << " " << ranks_text(x.ranks)
            << " " << x.code;
        else if constexpr (std::is_same_v<T, pm::rank_restarting>)
          o << "restart_rank " << x.restart.rank << " on " << x.restart.host << " #"
            << x.restart.number << " (its " << x.restart.count << ")";
        else if (detail == report_detail::full)
          o << "finish " << pm::to_json(x.report);
        else
          o << "finish " << x.report.exit_code << " " << pm::to_string(x.report.cause);
      },
      a);
  return o.str();
}

}  // namespace pm::test
