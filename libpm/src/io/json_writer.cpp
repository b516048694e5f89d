#include "io/json_writer.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

namespace pm {

namespace {

// At s[i]: {length, valid}. A valid UTF-8 sequence gives its length; an invalid one the length
// of its maximal subpart (the lead byte and the continuation bytes that fit it, at least 1),
// which is replaced by one U+FFFD, as Unicode recommends and nlohmann's "replace" does.
std::pair<std::size_t, bool> utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {1, true};
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // not overlong
    if (c == 0xED) hi = 0x9F;  // not a surrogate
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;  // not overlong
    if (c == 0xF4) hi = 0x8F;  // not beyond U+10FFFF
  } else {
    return {1, false};
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return {k, false};
  }
  return {need + 1, true};
}

}  // namespace

json_writer& json_writer::key(std::string_view k) {
  auto& l = open_.back();
  if (!l.empty) out_ += ',';
  l.empty = false;
  newline(open_.size());
  string(k);
  out_ += indent_ >= 0 ? ": " : ":";
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  before_value();
  string(s);
  return *this;
}

json_writer& json_writer::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}

// nlohmann's number layout: the shortest digits that read back as `d`, in plain notation for
// decimal exponents -4 < n <= 15 (with ".0" when there is no fraction), else d.ddde+XX.
json_writer& json_writer::value(double d) {
  before_value();
  if (!std::isfinite(d)) {
    out_ += "null";
    return *this;
  }
  if (d == 0) {
    out_ += std::signbit(d) ? "-0.0" : "0.0";
    return *this;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));  // -d.ddde±XX
  std::string digits;
  bool negative = false;
  std::size_t i = 0;
  if (sci[i] == '-') {
    negative = true;
    ++i;
  }
  for (; i < sci.size() && sci[i] != 'e'; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::atoi(std::string(sci.substr(i + 1)).c_str());
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;  // the decimal point's position after the first n digits
  constexpr int min_exp = -4;
  constexpr int max_exp = std::numeric_limits<double>::digits10;
  if (negative) out_ += '-';
  if (k <= n && n <= max_exp) {
    out_ += digits;
    out_.append(static_cast<std::size_t>(n - k), '0');
    out_ += ".0";
  } else if (0 < n && n <= max_exp) {
    out_.append(digits, 0, static_cast<std::size_t>(n));
    out_ += '.';
    out_.append(digits, static_cast<std::size_t>(n));
  } else if (min_exp < n && n <= 0) {
    out_ += "0.";
    out_.append(static_cast<std::size_t>(-n), '0');
    out_ += digits;
  } else {
    out_ += digits[0];
    if (k > 1) {
      out_ += '.';
      out_.append(digits, 1);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", n - 1 < 0 ? '-' : '+', std::abs(n - 1));
    out_ += e;
  }
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

json_writer& json_writer::open(char c) {
  before_value();
  out_ += c;
  open_.push_back(level{});
  return *this;
}

json_writer& json_writer::close(char c) {
  const bool empty = open_.back().empty;
  open_.pop_back();
  if (!empty) newline(open_.size());
  out_ += c;
  return *this;
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (open_.empty()) return;
  auto& l = open_.back();
  if (!l.empty) out_ += ',';
  l.empty = false;
  newline(open_.size());
}

void json_writer::newline(std::size_t depth) {
  if (indent_ < 0) return;
  out_ += '\n';
  out_.append(depth * static_cast<std::size_t>(indent_), ' ');
}

void json_writer::string(std::string_view s) {
  out_ += '"';
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\b':
        out_ += "\\b";
        break;
      case '\f':
        out_ += "\\f";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(c));
          out_ += u;
        } else {
          const auto [len, valid] = utf8_sequence(s, i);
          if (valid)
            out_.append(s, i, len);
          else
            out_ += "\xEF\xBF\xBD";  // U+FFFD
          i += len;
          continue;
        }
    }
    ++i;
  }
  out_ += '"';
}

}  // namespace pm
