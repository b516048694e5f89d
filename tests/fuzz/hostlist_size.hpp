// How many names a Slurm hostlist expands to, roughly, so that the Slurm targets can leave out
// lists between max_expanded_names and the parsers' cap (10,000,000 names, docs/allocation.md):
// expanding those is correct and only slow (seconds and gigabytes in a sanitizer build), and a
// fuzzer that finds one would spend its time there. Lists past the cap stay in: the parser
// refuses them by counting, before it allocates. This is not a second parser: it counts a list
// the parser accepts exactly, and a list the parser refuses is refused before anything expands.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace pm::fuzz {

inline constexpr std::uint64_t max_expanded_names = 100'000;
inline constexpr std::uint64_t hostlist_cap = 10'000'000;

inline std::uint64_t rough_hostlist_size(std::string_view text) {
  constexpr std::uint64_t big = std::uint64_t{1} << 60;
  const auto mul = [&](std::uint64_t a, std::uint64_t b) {
    return b != 0 && a > big / b ? big : a * b;
  };
  std::uint64_t total = 0, item = 1, bracket = 0, lo = 0, number = 0;
  bool inside = false, dash = false;
  const auto end_part = [&] {
    const std::uint64_t hi = number;
    bracket = std::min(big, bracket + (dash && hi > lo ? hi - lo : 0) + 1);
    number = lo = 0;
    dash = false;
  };
  for (const char c : text) {
    if (inside && c >= '0' && c <= '9') {
      number = std::min(big, number * 10 + static_cast<std::uint64_t>(c - '0'));
    } else if (inside && c == '-') {
      lo = number;
      number = 0;
      dash = true;
    } else if (inside && c == ',') {
      end_part();
    } else if (c == '[') {
      inside = true;
      bracket = number = lo = 0;
      dash = false;
    } else if (inside && c == ']') {
      end_part();
      item = mul(item, bracket);
      inside = false;
    } else if (!inside && c == ',') {
      total = std::min(big, total + item);
      item = 1;
    }
  }
  return std::min(big, total + item);
}

/// True for a list worth expanding here: small, or past the cap (refused before any expansion).
inline bool worth_expanding(std::string_view hostlist) {
  const auto n = rough_hostlist_size(hostlist);
  return n <= max_expanded_names || n > hostlist_cap;
}

}  // namespace pm::fuzz
