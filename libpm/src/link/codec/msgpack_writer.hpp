// MessagePack written directly: byte for byte what nlohmann's to_msgpack writes for the same
// document (the shortest form of every integer and length), with no document built. The codec
// (wire_codec.hpp) writes each map's keys sorted, as a std::map would.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pm::link::codec {

class msgpack_writer {
 public:
  explicit msgpack_writer(std::vector<std::uint8_t>& out) : out_(out) {}
  msgpack_writer(const msgpack_writer&) = delete;
  msgpack_writer& operator=(const msgpack_writer&) = delete;

  void map(std::size_t n) { header(n, 0x80, 15, 0xde, 0xdf); }
  void array(std::size_t n) { header(n, 0x90, 15, 0xdc, 0xdd); }
  void str(std::string_view s) {
    const auto n = s.size();
    if (n <= 31) {
      put(static_cast<std::uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      put(0xd9);
      be(n, 1);
    } else if (n <= 0xffff) {
      put(0xda);
      be(n, 2);
    } else {
      put(0xdb);
      be(n, 4);
    }
    raw(s.data(), n);
  }
  void uint(std::uint64_t v) {
    if (v < 128) {
      put(static_cast<std::uint8_t>(v));
    } else if (v <= 0xff) {
      put(0xcc);
      be(v, 1);
    } else if (v <= 0xffff) {
      put(0xcd);
      be(v, 2);
    } else if (v <= 0xffffffffull) {
      put(0xce);
      be(v, 4);
    } else {
      put(0xcf);
      be(v, 8);
    }
  }
  void sint(std::int64_t v) {
    if (v >= 0) {
      uint(static_cast<std::uint64_t>(v));
    } else if (v >= -32) {
      put(static_cast<std::uint8_t>(static_cast<std::int8_t>(v)));
    } else if (v >= INT8_MIN) {
      put(0xd0);
      be(static_cast<std::uint64_t>(v), 1);
    } else if (v >= INT16_MIN) {
      put(0xd1);
      be(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN) {
      put(0xd2);
      be(static_cast<std::uint64_t>(v), 4);
    } else {
      put(0xd3);
      be(static_cast<std::uint64_t>(v), 8);
    }
  }
  void boolean(bool b) { put(b ? 0xc3 : 0xc2); }
  /// Appends what is still buffered to the output vector; call once the message is written.
  [[gnu::noinline]] void flush() {
    out_.insert(out_.end(), buf_, buf_ + n_);
    n_ = 0;
  }

 private:
  // Bytes gather in a buffer on the stack and reach the vector in one insert per message (or per
  // full buffer): a push_back per byte cost a capacity check and a call each.
  static constexpr std::size_t capacity = 512;
  [[gnu::always_inline]] void put(std::uint8_t b) {
    if (n_ == capacity) [[unlikely]]
      flush();
    buf_[n_++] = b;
  }
  void raw(const char* p, std::size_t n) {
    if (n > capacity - n_) {
      flush();
      if (n > capacity / 2) {
        out_.insert(out_.end(), p, p + n);
        return;
      }
    }
    std::memcpy(buf_ + n_, p, n);
    n_ += n;
  }
  void header(std::size_t n, std::uint8_t fix, std::size_t fix_max, std::uint8_t b16,
              std::uint8_t b32) {
    if (n <= fix_max) {
      put(static_cast<std::uint8_t>(fix | n));
    } else if (n <= 0xffff) {
      put(b16);
      be(n, 2);
    } else {
      put(b32);
      be(n, 4);
    }
  }
  void be(std::uint64_t v, int bytes) {
    if (n_ + 8 > capacity) flush();
    for (int i = bytes - 1; i >= 0; --i) buf_[n_++] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::vector<std::uint8_t>& out_;
  std::size_t n_ = 0;
  std::uint8_t buf_[capacity];
};

}  // namespace pm::link::codec
