// Error messages quote the user's text; control characters in it must not break the message's
// one line (a hostfile token or an environment value may hold anything).
#pragma once

#include <string>
#include <string_view>

namespace pm::text {

/// `text` with control characters spelled out: "\n", "\r", "\t", "\x01", "\x7f".
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

/// What an unauthenticated peer said (a connect-back caller's node name), for a log line: printable
/// ASCII kept, every other byte (control characters, DEL, anything not ASCII: a terminal's C1
/// escapes, invalid UTF-8) and a quote as "\xNN", a backslash as "\\", and at most `max` bytes of
/// the text shown (then "..."). Nothing the peer sends can change the terminal or the line's
/// meaning.
inline std::string untrusted(std::string_view text, std::size_t max = 64) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  const bool cut = text.size() > max;
  if (cut) text = text.substr(0, max);
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u >= 0x7f || c == '\'') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

/// The last non-empty line of what a helper program (ssh, srun) printed, for a one-line error:
/// control characters as '?', at most 300 characters.
inline std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of("\r\n ");
  if (end == std::string::npos) return {};
  auto begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  std::string line = text.substr(begin, end - begin + 1);
  for (char& c : line) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

}  // namespace pm::text
