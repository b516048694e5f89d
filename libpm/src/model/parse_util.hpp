// Small helpers shared by the allocation parsers.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pm::model {

/// A positive 32-bit count ("4"), or nullopt for anything else ("x", "0", "-1", "4x", overflow).
inline std::optional<std::uint32_t> positive_count(std::string_view text) {
  std::uint32_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value == 0) {
    return std::nullopt;
  }
  return value;
}

/// Host names: letters, digits, '-', '.', '_' (IPv4 addresses included).
inline bool valid_host_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace pm::model
