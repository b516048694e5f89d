#include "link/codec/msgpack_reader.hpp"

#include <cstdio>
#include <string>

#include "pm/error.hpp"

namespace pm::link::codec {

namespace {

// Every value's extent, checked: a problem is reported the way nlohmann's reader reported it
// (the byte counted from 1), so that a peer's garbage reads as before.
class body_walker {
 public:
  explicit body_walker(std::span<const std::uint8_t> b)
      : begin_(b.data()), p_(b.data()), end_(b.data() + b.size()) {}

  body_shape top() {
    body_shape shape;
    if (p_ != end_ && ((*p_ & 0xf0) == 0x80 || *p_ == 0xde || *p_ == 0xdf)) {
      shape.is_map = true;
      shape.entries = container(1);
      shape.first = p_;
      for (std::size_t i = 0; i < shape.entries; ++i) {
        const std::string_view k = key();
        if (i < body_shape::max_listed) shape.listed[i] = {k.data(), k.size(), p_};
        if (same_text(k, "type")) shape.type = p_;
        if (same_text(k, "fds")) shape.fds = p_;
        // Small integers and short strings, most of a small message, without a call.
        if (p_ != end_ && (*p_ < 0x80 || *p_ >= 0xe0)) {
          ++p_;
        } else if (p_ != end_ && (*p_ & 0xe0) == 0xa0 &&
                   static_cast<std::size_t>(end_ - p_) > (*p_ & 0x1fu)) {
          p_ += 1 + (*p_ & 0x1f);
        } else {
          value(1);
        }
      }
    } else {
      value(0);
    }
    if (p_ != end_) {
      malformed("value", "expected end of input; last byte: " + hex(*p_), 1);
    }
    return shape;
  }

 private:
  [[noreturn]] void malformed(const char* what, const std::string& detail, std::size_t ahead) {
    const auto at = static_cast<std::size_t>(p_ - begin_) + ahead;
    throw error(errc::launch, "agent link: malformed message body (parse error at byte " +
                                  std::to_string(at) + ": syntax error while parsing MessagePack " +
                                  what + ": " + detail + ")");
  }
  [[noreturn]] void truncated(const char* what) {
    p_ = end_;
    malformed(what, "unexpected end of input", 1);
  }
  static std::string hex(std::uint8_t b) {
    char s[8];
    std::snprintf(s, sizeof s, "0x%02X", b);
    return s;
  }
  std::uint8_t byte(const char* what) {
    if (p_ == end_) truncated(what);
    return *p_++;
  }
  std::uint64_t be(int n, const char* what) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | byte(what);
    return v;
  }
  void bytes(std::uint64_t n, const char* what) {
    if (static_cast<std::uint64_t>(end_ - p_) < n) truncated(what);
    p_ += n;
  }
  // A map's or an array's header, `depth` levels deep (the body itself is level 1): its count.
  std::size_t container(int depth) {
    const std::uint8_t b = byte("value");
    std::uint64_t n = 0;
    if ((b & 0xe0) == 0x80) {
      n = b & 0x0f;
    } else if (b == 0xdc || b == 0xde) {
      n = be(2, "value");
    } else {
      n = be(4, "value");
    }
    if (depth > max_depth) {
      throw error(errc::launch, "agent link: message body nested deeper than " +
                                    std::to_string(max_depth) + " levels");
    }
    return static_cast<std::size_t>(n);
  }
  [[gnu::always_inline]] std::string_view key() {
    if (p_ == end_) truncated("string");
    const std::uint8_t b = *p_;
    if ((b & 0xe0) == 0xa0 && static_cast<std::size_t>(end_ - p_) > (b & 0x1fu)) {
      const auto* s = p_ + 1;
      p_ = s + (b & 0x1f);
      return {reinterpret_cast<const char*>(s), b & 0x1fu};
    }
    std::uint64_t n = 0;
    if ((b & 0xe0) == 0xa0) {
      ++p_;
      n = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
      ++p_;
      n = be(1 << (b - 0xd9), "string");
    } else {
      malformed("string",
                "expected length specification (0xA0-0xBF, 0xD9-0xDB); last byte: " + hex(b), 1);
    }
    const auto* s = p_;
    bytes(n, "string");
    return {reinterpret_cast<const char*>(s), static_cast<std::size_t>(n)};
  }
  // One value inside a container `depth` levels deep.
  void value(int depth) {
    if (p_ == end_) truncated("value");
    const std::uint8_t b = *p_;
    if (b < 0x80 || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      ++p_;
    } else if ((b & 0xe0) == 0xa0 || (b >= 0xd9 && b <= 0xdb)) {
      key();
    } else if (b >= 0xcc && b <= 0xd3) {  // uint, int 8..64
      ++p_;
      bytes(std::uint64_t{1} << ((b - 0xcc) & 3), "number");
    } else if ((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) {
      const std::size_t n = container(depth + 1);
      for (std::size_t i = 0; i < n; ++i) {
        key();
        value(depth + 1);
      }
    } else if ((b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd) {
      const std::size_t n = container(depth + 1);
      for (std::size_t i = 0; i < n; ++i) value(depth + 1);
    } else if (b >= 0xc4 && b <= 0xc6) {  // bin 8, 16, 32
      ++p_;
      bytes(be(1 << (b - 0xc4), "binary"), "binary");
    } else if (b >= 0xc7 && b <= 0xc9) {  // ext 8, 16, 32: length, type, data
      ++p_;
      const auto n = be(1 << (b - 0xc7), "binary");
      bytes(n + 1, "binary");
    } else if (b == 0xca || b == 0xcb) {  // float 32, 64
      ++p_;
      bytes(b == 0xca ? 4 : 8, "number");
    } else if (b >= 0xd4 && b <= 0xd8) {  // fixext 1..16: type, data
      ++p_;
      bytes(1 + (std::uint64_t{1} << (b - 0xd4)), "binary");
    } else {  // 0xc1, never used
      malformed("value", "invalid byte: " + hex(b), 1);
    }
  }

  const std::uint8_t* begin_;
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace

body_shape check_body(std::span<const std::uint8_t> body) {
  return body_walker(body).top();
}

void msgpack_reader::skip() {
  std::uint64_t v = 0;
  bool neg = false;
  std::string_view s;
  std::size_t n = 0;
  if (integer(v, neg) || str(s)) return;
  if (map(n)) {
    for (std::size_t i = 0; i < 2 * n; ++i) skip();
    return;
  }
  if (array(n)) {
    for (std::size_t i = 0; i < n; ++i) skip();
    return;
  }
  const std::uint8_t b = *p_++;
  if (b >= 0xc4 && b <= 0xc6) {
    be(1 << (b - 0xc4), v);
    p_ += v;
  } else if (b >= 0xc7 && b <= 0xc9) {
    be(1 << (b - 0xc7), v);
    p_ += v + 1;
  } else if (b == 0xca || b == 0xcb) {
    p_ += b == 0xca ? 4 : 8;
  } else if (b >= 0xd4 && b <= 0xd8) {
    p_ += 1 + (std::size_t{1} << (b - 0xd4));
  }
  // nil, true, false: the byte alone
}

}  // namespace pm::link::codec
