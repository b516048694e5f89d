// line_assembler: turns one stream's bytes, in whatever chunks they arrive, into whole lines.
// Pure (no I/O, no clock), so the rules below are unit-tested on their own.
//
// It never copies whole lines: feed() hands its consumer everything up to the chunk's LAST
// newline at once (plain mode writes that with one writev), and keeps only the unterminated tail
// (at most max_line bytes). Rules:
//   - whole(prefix, body): prefix + body is one or more complete lines, ending with '\n'. prefix is
//     the kept tail of earlier chunks (possibly empty), body a slice of the chunk just fed.
//   - piece(prefix, body, flags): bytes of a line that has no '\n' yet, either because it grew
//     past max_line (flags.continued: max_line bytes, up to 3 fewer so that a UTF-8 character
//     is never cut in two: --json-lines turned each half into U+FFFD; the line goes on) or
//     because the stream ended (flags.partial, from finish()).
//   - a line of at most max_line bytes before its '\n' is never cut.
// The views are valid only during the call.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "pm/output.hpp"

namespace pm::io {

/// Where to cut the text a + b (longer than n) at most n bytes in: n, or up to 3 bytes before
/// it when byte n continues a UTF-8 character that began before it. Bytes that are not UTF-8
/// are cut at n.
inline std::size_t utf8_cut(std::string_view a, std::string_view b, std::size_t n) {
  const auto at = [&](std::size_t i) {
    return static_cast<unsigned char>(i < a.size() ? a[i] : b[i - a.size()]);
  };
  if ((at(n) & 0xC0) != 0x80) return n;  // a character starts at n
  for (std::size_t back = 1; back <= 3 && back < n; ++back) {
    const unsigned char c = at(n - back);
    if ((c & 0xC0) == 0x80) continue;  // another continuation byte
    if ((c & 0xC0) != 0xC0) return n;  // not a lead byte: not UTF-8
    const std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return length > back ? n - back : n;
  }
  return n;
}

class line_assembler {
 public:
  explicit line_assembler(std::size_t max_line) : max_line_(max_line == 0 ? 1 : max_line) {}

  template <class Consumer>
  void feed(std::string_view data, Consumer& out) {
    if (data.empty()) return;
    if (const void* nl = ::memrchr(data.data(), '\n', data.size())) {
      const auto upto = static_cast<std::size_t>(static_cast<const char*>(nl) - data.data()) + 1;
      out.whole(std::string_view(tail_), data.substr(0, upto));
      tail_.clear();
      data.remove_prefix(upto);
    }
    // No newline left in `data`: cut pieces while the unterminated line exceeds max_line.
    while (tail_.size() + data.size() > max_line_) {
      const std::size_t cut = utf8_cut(tail_, data, max_line_);
      if (cut <= tail_.size()) {  // within the kept tail (a character cut there): rare
        out.piece(std::string_view(tail_).substr(0, cut), std::string_view(),
                  line_flags{false, true});
        tail_.erase(0, cut);
        continue;
      }
      const std::size_t take = cut - tail_.size();
      out.piece(std::string_view(tail_), data.substr(0, take), line_flags{false, true});
      tail_.clear();
      data.remove_prefix(take);
    }
    tail_.append(data);
    // Give memory back after a long line: a tail is normally short.
    if (tail_.empty() && tail_.capacity() > 65536) std::string().swap(tail_);
  }

  /// End of stream: passes on the unterminated last line, if any, as a partial piece.
  template <class Consumer>
  void finish(Consumer& out) {
    if (!tail_.empty()) {
      out.piece(std::string_view(tail_), std::string_view(), line_flags{true, false});
      tail_.clear();
    }
  }

  /// Bytes held (the unterminated tail).
  std::size_t pending() const noexcept { return tail_.size(); }
  /// The unterminated tail itself (valid until the next feed or finish).
  std::string_view held() const noexcept { return tail_; }
  std::size_t max_line() const noexcept { return max_line_; }

 private:
  std::size_t max_line_;
  std::string tail_;
};

/// Calls fn(a, b, flags) for each line of whole(prefix, body) — the line's text is a + b, without
/// its '\n' — cutting lines longer than max_line into pieces (flags.continued on all but the last).
template <class Fn>
void for_each_line(std::string_view prefix, std::string_view body, std::size_t max_line, Fn&& fn) {
  if (max_line == 0) max_line = 1;
  auto emit = [&](std::string_view a, std::string_view b) {
    while (a.size() + b.size() > max_line) {
      const std::size_t cut = utf8_cut(a, b, max_line);
      const std::size_t ta = a.size() < cut ? a.size() : cut;
      const std::size_t tb = cut - ta;
      fn(a.substr(0, ta), b.substr(0, tb), line_flags{false, true});
      a.remove_prefix(ta);
      b.remove_prefix(tb);
    }
    fn(a, b, line_flags{});
  };
  bool first = true;
  while (!body.empty()) {
    const void* nl = std::memchr(body.data(), '\n', body.size());
    const std::size_t len =
        nl != nullptr ? static_cast<std::size_t>(static_cast<const char*>(nl) - body.data())
                      : body.size();
    emit(first ? prefix : std::string_view(), body.substr(0, len));
    first = false;
    body.remove_prefix(nl != nullptr ? len + 1 : len);
  }
}

}  // namespace pm::io
