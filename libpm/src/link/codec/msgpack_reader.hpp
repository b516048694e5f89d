// MessagePack read in place, with no document. A body is read twice: check_body() walks all of it
// once (well-formed, at most max_depth levels, nothing after the value; it names the first
// problem as nlohmann's reader did) and finds the top-level `type` and `fds`; then the codec
// (wire_codec.hpp) reads the fields it knows with msgpack_reader's primitives, which only ask
// "is this value of that kind" because the shape was already checked.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace pm::link::codec {

/// Deeper than any message needs (map > ranks > rank > argv is 4); refusing deeper input bounds
/// the reader's recursion on a hostile body.
inline constexpr int max_depth = 8;

/// Whether two short strings (keys, type names) are equal: compared inline, a word or two at a
/// time, since a call to memcmp cost more than the comparison of a few bytes.
inline bool same_text(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const auto word = [](std::string_view s, std::size_t at, auto zero) {
    decltype(zero) w;
    std::memcpy(&w, s.data() + at, sizeof w);
    return w;
  };
  if (n >= 8 && n <= 16) {
    return word(a, 0, std::uint64_t{}) == word(b, 0, std::uint64_t{}) &&
           word(a, n - 8, std::uint64_t{}) == word(b, n - 8, std::uint64_t{});
  }
  if (n >= 4 && n < 8) {
    return word(a, 0, std::uint32_t{}) == word(b, 0, std::uint32_t{}) &&
           word(a, n - 4, std::uint32_t{}) == word(b, n - 4, std::uint32_t{});
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

/// One field of the top-level map: its key and where its value starts.
struct listed_field {
  const char* key;
  std::size_t key_size;
  const std::uint8_t* value;
  std::string_view key_view() const { return {key, key_size}; }
};

/// What check_body() found at the top of a well-formed body.
struct body_shape {
  bool is_map = false;
  std::size_t entries = 0;              ///< the top-level map's number of fields
  const std::uint8_t* first = nullptr;  ///< its first key
  const std::uint8_t* type = nullptr;   ///< the value of its last "type" key, if any
  const std::uint8_t* fds = nullptr;    ///< the value of its last "fds" key, if any
  /// The first max_listed fields, so that the codec reads their values without parsing the keys
  /// again (all of them when entries <= max_listed). Left uninitialised beyond `entries`: zeroing
  /// them cost more than a small message's whole decoding.
  static constexpr std::size_t max_listed = 16;
  listed_field listed[max_listed];
};

/// Walks the whole body; throws pm::error ("agent link: malformed message body (...)", "...
/// nested deeper than 8 levels") at the first problem.
body_shape check_body(std::span<const std::uint8_t> body);

class msgpack_reader {
 public:
  msgpack_reader(const std::uint8_t* at, const std::uint8_t* end) : p_(at), end_(end) {}
  const std::uint8_t* pos() const { return p_; }
  void seek(const std::uint8_t* p) { p_ = p; }

  /// An integer: `neg` says it is below zero (then `v` holds its two's complement).
  [[gnu::always_inline]] bool integer(std::uint64_t& v, bool& neg) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    neg = false;
    if (b < 0x80) {
      ++p_;
      v = b;
      return true;
    }
    if (b >= 0xe0) {
      ++p_;
      neg = true;
      v = static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(b)));
      return true;
    }
    if (b >= 0xcc && b <= 0xcf) {
      ++p_;
      return be(1 << (b - 0xcc), v);
    }
    if (b >= 0xd0 && b <= 0xd3) {
      ++p_;
      const int n = 1 << (b - 0xd0);
      if (!be(n, v)) return false;
      const int shift = 64 - 8 * n;  // sign-extend
      const auto s = static_cast<std::int64_t>(v << shift) >> shift;
      v = static_cast<std::uint64_t>(s);
      neg = s < 0;
      return true;
    }
    return false;
  }
  [[gnu::always_inline]] bool str(std::string_view& s) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    std::uint64_t n = 0;
    if ((b & 0xe0) == 0xa0) {
      ++p_;
      n = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
      ++p_;
      if (!be(1 << (b - 0xd9), n)) return false;
    } else {
      return false;
    }
    if (static_cast<std::uint64_t>(end_ - p_) < n) return false;
    s = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  [[gnu::always_inline]] bool boolean(bool& out) {
    if (p_ == end_ || (*p_ != 0xc2 && *p_ != 0xc3)) return false;
    out = *p_++ == 0xc3;
    return true;
  }
  bool map(std::size_t& n) { return header(n, 0x80, 0xde); }
  bool array(std::size_t& n) { return header(n, 0x90, 0xdc); }
  /// Steps over one value of a body check_body() accepted.
  void skip();

 private:
  bool be(int n, std::uint64_t& v) {
    if (end_ - p_ < n) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | *p_++;
    return true;
  }
  bool header(std::size_t& n, std::uint8_t fix, std::uint8_t b16) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    if ((b & 0xf0) == fix) {
      ++p_;
      n = b & 0x0f;
      return true;
    }
    if (b != b16 && b != b16 + 1) return false;
    ++p_;
    std::uint64_t v = 0;
    if (!be(b == b16 ? 2 : 4, v)) return false;
    n = static_cast<std::size_t>(v);
    return true;
  }
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace pm::link::codec
