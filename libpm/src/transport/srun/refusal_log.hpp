// refusal_log: what the launcher says about connect-back callers it refused (docs/slurm.md,
// "Refused callers"), bounded whatever arrives. Pure: no sockets, no clock (the time is passed in),
// so a flood of any size is tested in memory.
//
// The listener is open to the network: anyone can connect, and each refused connection once made
// its own line (18,247 lines for a flood of 27,000). Now:
//   - the first refusal of each kind from each peer address (a key: address + reason, the reason
//     a fixed text such as "wrong token") is shown in full, with what the caller said sanitized,
//     for at most `shown_keys` keys in all;
//   - every other refusal is counted: one summary line at most every `summary_every`, naming the
//     three keys refused most since the last summary and how many there were in all;
//   - at most `tracked_keys` keys are counted apart; beyond, refusals count as "other peers";
// so a flood of N connections over T seconds prints at most shown_keys + T / summary_every + 1
// lines, and its memory is bounded by tracked_keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace pm::srun {

class refusal_log {
 public:
  using clock = std::chrono::steady_clock;
  struct limits {
    std::size_t shown_keys = 8;
    std::chrono::milliseconds summary_every{10000};
    std::size_t tracked_keys = 64;
    // What was done to a connection, for the lines: "refused" (a caller), "closed" (one that
    // was let in and broke the protocol, the DVM's).
    const char* verb = "refused";
  };

  refusal_log() = default;
  explicit refusal_log(limits l) : limits_(l) {}

  /// A connection from `peer` ("10.0.0.5:41234": the address is the key, the port only shown)
  /// was refused: `reason` is the kind (fixed text), `why` the whole line's reason (already
  /// sanitized). Returns the line to print now, if any: "refused a connection from PEER: WHY"
  /// ("refused": limits::verb).
  std::optional<std::string> refused(std::string_view peer, std::string_view reason,
                                     std::string_view why, clock::time_point now);

  /// When the next summary is due, if refusals were counted and not said yet.
  std::optional<clock::time_point> summary_due() const;

  /// The summary of what was counted and not said, if any and if it is due at `now` (or
  /// `force`: the end of the job): "refused 18,246 more connections in the last 10 s:
  /// 18,000 from 10.0.0.5 (wrong token), 246 from 10.0.0.6 (no greeting within 5 s)".
  std::optional<std::string> summary(clock::time_point now, bool force = false);

  /// Connections refused in all (said or counted).
  std::uint64_t total() const { return total_; }

 private:
  struct count {
    std::uint64_t pending = 0;  // since the last summary
  };
  limits limits_;
  std::set<std::string> shown_;  // keys whose first refusal was shown (at most shown_keys)
  std::map<std::string, count> counted_;
  std::uint64_t other_ = 0;    // pending, of keys beyond tracked_keys
  std::uint64_t pending_ = 0;  // all pending
  std::uint64_t total_ = 0;
  std::optional<clock::time_point> window_start_;  // the first pending refusal's time
  std::optional<clock::time_point> last_summary_;
};

}  // namespace pm::srun
