// Error messages quote the user's text; control characters in it must not break the message's
// one line (a hostfile token or an environment value may hold anything).
#pragma once

#include <string>
#include <string_view>

namespace pm::model {

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

}  // namespace pm::model
