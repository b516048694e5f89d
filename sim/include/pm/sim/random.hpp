// The simulator's pseudo-random numbers: one pinned algorithm, integers only.
//
// xoshiro256** (Blackman and Vigna), seeded through splitmix64. The standard library's engines
// are portable but its distributions are not (libstdc++ and libc++ give different numbers for
// the same seed), so the simulator never uses std::*_distribution: every draw below is exact
// integer arithmetic and a seed means the same run on every platform and compiler.
#pragma once

#include <cstdint>

namespace pm::sim {

// GCC and Clang's 128-bit integer, for the exact multiply in below().
__extension__ using uint128 = unsigned __int128;

/// splitmix64: a seed expander (also a good 64-bit mixing function).
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class prng {
 public:
  explicit constexpr prng(std::uint64_t seed) noexcept {
    for (auto& word : s_) word = splitmix64(seed);
  }

  /// The next 64 random bits.
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject); 0 when n is 0.
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    if (n == 0) return 0;
    for (;;) {
      const uint128 m = static_cast<uint128>(next()) * n;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= n || low >= (0 - n) % n) return static_cast<std::uint64_t>(m >> 64);
    }
  }

  /// Uniform in [lo, hi] (lo when hi < lo).
  constexpr std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept {
    if (hi <= lo) return lo;
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }

  /// True with probability num/den (integer-only: no floating point enters a run).
  constexpr bool chance(std::uint32_t num, std::uint32_t den) noexcept {
    return den != 0 && below(den) < num;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t s_[4]{};
};

}  // namespace pm::sim
