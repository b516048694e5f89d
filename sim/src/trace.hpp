// The run's trace: a streamed hash of every record, and (only when asked) readable lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace pm::sim {

/// FNV-1a, folded over 64-bit words (one multiply per field keeps 800,000-rank runs cheap).
class trace_hash {
 public:
  void add(std::uint64_t word) noexcept { h_ = (h_ ^ word) * 0x100000001b3ull; }
  void add(std::string_view text) noexcept {
    for (unsigned char c : text) add(std::uint64_t{c});
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

/// "     1.500000123" (seconds, nanosecond digits): the time column of a trace line.
inline std::string trace_time(std::int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%6lld.%09lld", static_cast<long long>(ns / 1'000'000'000),
                static_cast<long long>(ns % 1'000'000'000));
  return buf;
}

}  // namespace pm::sim
