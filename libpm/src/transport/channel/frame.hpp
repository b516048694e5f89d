// Frames of the agent channel: a 4-byte big-endian body length, then the body (MessagePack).
//
// The decoder is pure (feed bytes, take whole bodies out), so it is unit-tested and fuzzed
// without sockets. Every malformed input is a pm::error with one line ("agent channel: ..."),
// never a crash: a length above max_frame_bytes is refused before anything is allocated for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace pm::channel {

inline constexpr std::size_t frame_header_bytes = 4;
/// The largest body a frame may carry (a spawn of many ranks with large environments fits).
inline constexpr std::size_t max_frame_bytes = std::size_t{64} << 20;

/// Appends one frame (header + body) to `out`. Throws pm::error if the body is empty or too large.
void append_frame(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> body);

/// Splits a byte stream into frame bodies. Not thread-safe; one per connection.
class frame_decoder {
 public:
  explicit frame_decoder(std::size_t max_body = max_frame_bytes) : max_body_(max_body) {}

  /// Appends received bytes.
  void feed(std::span<const std::uint8_t> bytes);
  /// The next whole body, or nothing until more bytes arrive. Throws pm::error for an empty or
  /// oversized frame (the stream cannot be resynchronised after that: drop the connection).
  std::optional<std::vector<std::uint8_t>> next();
  /// Call at end of stream: throws pm::error if a frame was cut off.
  void finish() const;
  /// Bytes received but not yet returned as a body.
  std::size_t buffered() const noexcept { return buffer_.size() - start_; }

 private:
  std::size_t max_body_;
  std::vector<std::uint8_t> buffer_;
  std::size_t start_ = 0;  // first byte not yet consumed
};

}  // namespace pm::channel
