// The frames between pmd and pmd-helper's PMIx server (pmix_helper.hpp): a 4-byte little-endian
// length of what follows, a kind byte, the body. Both ends are the same build; the bodies are
// pm::agent::pmix_channel's, or a sync number.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "pm/error.hpp"

namespace pmd::helper_frames {

/// pmd to the helper: a pmix_channel::to_helper; the helper to pmd: a pmix_event.
inline constexpr std::uint8_t message = 0;
/// pmd to the helper: "report every upcall queued by now, then echo this" (8-byte number); the
/// helper's echo.
inline constexpr std::uint8_t sync = 1;
/// pmd to the helper: it acted on pmix_server_up (the helper waits for this before the first
/// connection reaches the new server).
inline constexpr std::uint8_t server_up_handled = 2;

/// Far above any real body (a modex of every rank of a big job), far below memory trouble.
inline constexpr std::size_t max_frame = std::size_t{256} << 20;

inline void append(std::string& out, std::uint8_t kind, std::string_view body) {
  const auto n = static_cast<std::uint32_t>(body.size() + 1);
  char len[4];
  for (int i = 0; i < 4; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(len, 4);
  out.push_back(static_cast<char>(kind));
  out.append(body);
}

inline std::string sync_body(std::uint64_t n) {
  std::string b(8, '\0');
  std::memcpy(b.data(), &n, 8);
  return b;
}
inline std::uint64_t sync_number(std::string_view body) {
  std::uint64_t n = 0;
  if (body.size() == 8) std::memcpy(&n, body.data(), 8);
  return n;
}

/// One whole frame from the front of `in` (removed by the caller: `used` bytes), or nullopt.
struct frame {
  std::uint8_t kind = 0;
  std::string_view body;
  std::size_t used = 0;
};
inline std::optional<frame> next(std::string_view in) {
  if (in.size() < 4) return std::nullopt;
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= std::uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  if (n == 0 || n > max_frame) {
    throw pm::error(pm::errc::launch,
                    "PMIx helper channel: a frame of " + std::to_string(n) + " bytes");
  }
  if (in.size() < 4 + std::size_t{n}) return std::nullopt;
  return frame{static_cast<std::uint8_t>(in[4]), in.substr(5, n - 1), 4 + std::size_t{n}};
}

}  // namespace pmd::helper_frames
