// Small helpers shared by the allocation parsers.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "pm/allocation.hpp"

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

/// Who ssh logs in as (`bob@node1`, `username=bob`): POSIX portable user names (letters, digits,
/// '.', '_', '-'), not starting with '-', which ssh would read as an option.
inline bool valid_user_name(std::string_view name) {
  if (name.empty() || name.front() == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

/// The position of `name` in an allocation's name index, or nullopt.
inline std::optional<std::uint32_t> find_in(
    const std::unordered_map<std::string, std::uint32_t>& index, std::string_view name) {
  const auto it = index.find(std::string(name));
  if (it == index.end()) return std::nullopt;
  return it->second;
}

/// A TCP port, 1..65535 ("2222"), or nullopt ("0", "abc", "65536", "+1").
inline std::optional<std::uint16_t> port_number(std::string_view text) {
  const auto n = positive_count(text);
  if (!n || *n > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(*n);
}

/// Why two entries for one host disagree on how ssh reaches it, or "" when they agree:
/// "with user 'alice', before with user 'bob'", "with no port, before with port 2222".
inline std::string reach_conflict(const host& before, const host& again) {
  auto user = [](const host& h) { return h.user.empty() ? "no user" : "user '" + h.user + "'"; };
  auto port = [](const host& h) {
    return h.port == 0 ? std::string("no port") : "port " + std::to_string(h.port);
  };
  if (before.user != again.user) return "with " + user(again) + ", before with " + user(before);
  if (before.port != again.port) return "with " + port(again) + ", before with " + port(before);
  return "";
}

/// "bob@node1" -> user "bob", name "node1" (split at the last '@', as ssh does); no '@': no user.
struct user_at_host {
  std::string_view user;
  std::string_view name;
  bool has_at = false;
};
inline user_at_host split_user_at_host(std::string_view text) {
  const auto at = text.rfind('@');
  if (at == std::string_view::npos) return {{}, text, false};
  return {text.substr(0, at), text.substr(at + 1), true};
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace pm::model
