// The agent machine's timers as pmd keeps them: each start_timer's deadline on the monotonic
// clock; the machine ignores a timer that is not its latest, so none is ever cancelled here.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace pmd {

class timer_queue {
 public:
  using clock = std::chrono::steady_clock;

  void start(std::uint64_t id, std::chrono::milliseconds after) {
    timers_.emplace_back(clock::now() + after, id);
  }
  std::optional<clock::time_point> next() const {
    std::optional<clock::time_point> first;
    for (const auto& t : timers_) {
      if (!first || t.first < *first) first = t.first;
    }
    return first;
  }
  /// The timers due now, taken out.
  std::vector<std::uint64_t> take_due() {
    const auto now = clock::now();
    std::vector<std::uint64_t> due;
    std::erase_if(timers_, [&](const auto& t) {
      if (t.first > now) return false;
      due.push_back(t.second);
      return true;
    });
    return due;
  }

 private:
  std::vector<std::pair<clock::time_point, std::uint64_t>> timers_;
};

}  // namespace pmd
