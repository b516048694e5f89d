// What every fuzz target shares (docs/fuzzing.md).
//
// The contract the targets check beyond "no crash, no sanitizer report": bad input is a
// pm::error whose what() is one line, never another exception. Anything else escapes the target
// and libFuzzer reports it as a crash (an uncaught exception aborts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace pm::fuzz {

/// Stops the run with a report naming the broken promise (libFuzzer saves the input).
[[noreturn]] inline void broken(const char* what) {
  __builtin_fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) broken(what);
}

/// A pm::error must read as one line for a human.
inline void check_one_line(const pm::error& e) {
  const std::string_view text = e.what();
  if (text.empty()) broken("a pm::error with an empty message");
  if (text.find('\n') != std::string_view::npos) {
    __builtin_fprintf(stderr, "fuzz: the message: %s\n", e.what());
    broken("a pm::error message spans several lines");
  }
}

/// Runs f; a pm::error is an accepted outcome (and must be one line), anything else escapes.
/// Returns true when f returned normally.
template <class F>
bool attempt(F&& f) {
  try {
    f();
    return true;
  } catch (const pm::error& e) {
    check_one_line(e);
    return false;
  }
}

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Splits at `sep` (every piece, empty ones too).
inline std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (true) {
    const auto at = text.find(sep, pos);
    out.emplace_back(text.substr(pos, at == std::string_view::npos ? text.npos : at - pos));
    if (at == std::string_view::npos) return out;
    pos = at + 1;
  }
}

/// A machine the allocation rules can recognise as "this one", the same on every run.
inline local_host fixed_local_host() {
  local_host me;
  me.hostname = "node1";
  me.aliases = {"localhost", "node1.cluster", "127.0.0.1", "10.0.0.1"};
  me.cores = 4;
  return me;
}

/// Jobs larger than this are not mapped by the targets: a rank map of the size a user asked for
/// is allocated on purpose (the limit is the user's, map_job caps it at 2^32 - 2 ranks).
inline constexpr std::uint64_t max_mapped_ranks = 4096;
/// Allocations larger than this are parsed but not resolved (allocation_checks.hpp).
inline constexpr std::size_t max_resolved_hosts = 100'000;

}  // namespace pm::fuzz
