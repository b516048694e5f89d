// What the ranks still alive are told about other ranks' failures and about the job's end, when
// the abort policy is off (docs/failure-semantics.md, "Telling the survivors"): the controller
// decides (notify_ranks actions), the agent link carries it, and each host's PMIx server turns
// it into a PMIx event for its ranks (docs/pmix.md, "Events").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "pm/export.hpp"

namespace pm {

enum class notice_kind : std::uint8_t {
  rank_exited,        ///< the rank exited with a non-zero code (code: the exit code)
  rank_signaled,      ///< the rank was killed by a signal (code: the signal)
  rank_spawn_failed,  ///< the rank could not start (code: 127 not found, 126 not executable)
  host_lost,          ///< the ranks a lost host took with it (code: 0)
  rank_aborted,       ///< the rank called abort (code: its status): the job is being ended
  job_ending,         ///< the launcher ends the job: timeout, signal, cancel (code: its exit code)
  /// the rank ended without PMIx_Finalize (code: its exit code, or 128 + signal): the job ends
  rank_unfinalized,
};

/// "rank_exited", "rank_signaled", "rank_spawn_failed", "host_lost", "rank_aborted",
/// "job_ending", "rank_unfinalized": the agent link's and the traces' spelling.
PM_API std::string_view to_string(notice_kind k) noexcept;
/// The kind spelled as to_string spells it; nullopt for anything else.
PM_API std::optional<notice_kind> notice_kind_from(std::string_view name) noexcept;

}  // namespace pm
