// Frames of the agent link (docs/agent-link.md): after an 8-byte magic, a stream of frames, each
// a 4-byte big-endian body length, then the body. The body's first byte says what it carries:
//   control  a MessagePack map (messages.hpp): hello, spawn, exited, heartbeat, ...
//   output   a rank's output bytes: rank (4 bytes, big-endian), stream (1: stdout, 2: stderr),
//            bytes
//   input    stdin bytes for a rank: rank (4 bytes, big-endian), bytes
//   relay    bytes of another host's link, relayed by a tree parent's agent (the child_data
//            message): host (4 bytes, big-endian), bytes
// Output, input and relayed bytes travel raw so that they are never put into a document model:
// the hot path copies them once into the frame and hands the receiver a span of its buffer (a
// relayed host's link, nested a level per tree hop, is unwrapped in place by the launcher).
//
// The decoder is pure (feed bytes, take frames out), so it is unit-tested and fuzzed without
// sockets. Every malformed input is a pm::error with one line ("agent link: ..."), never a crash:
// a length above the limit is refused before anything is allocated for it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pm/output.hpp"

namespace pm::link {

/// Sent by each side before its first frame. NUL bytes never appear in what a login shell prints,
/// so text before the magic (an rc file's greeting) can be told from the link and skipped.
inline constexpr std::array<std::uint8_t, 8> magic = {0x00, 'p', 'm', 'l', 'i', 'n', 'k', 0x00};

inline constexpr std::size_t frame_header_bytes = 4;
/// The largest body a frame may carry (a spawn of many ranks with large environments fits).
inline constexpr std::size_t max_frame_bytes = std::size_t{64} << 20;
/// The largest output or input payload one frame carries (a pipe read of this size is one frame).
inline constexpr std::size_t max_data_bytes = std::size_t{256} << 10;

enum class frame_kind : std::uint8_t { control = 1, output = 2, input = 3, relay = 4 };

/// A decoded frame. `payload` points into the decoder's buffer: valid until the next feed().
struct frame {
  frame_kind kind = frame_kind::control;
  std::uint32_t rank = 0;                     ///< output and input frames; relay: the host
  output_stream stream = output_stream::out;  ///< output frames
  std::span<const std::uint8_t> payload;      ///< control: the MessagePack body; data: the bytes
};

/// Appends one control frame (header, kind, body) to `out`. Throws pm::error if the body is too
/// large.
void append_control_frame(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> body);
/// Appends one output frame. `bytes` must not be empty nor larger than max_data_bytes.
void append_output_frame(std::vector<std::uint8_t>& out, std::uint32_t rank, output_stream stream,
                         std::span<const std::uint8_t> bytes);
/// Appends one input frame (stdin bytes for `rank`). Same limits as output.
void append_input_frame(std::vector<std::uint8_t>& out, std::uint32_t rank,
                        std::span<const std::uint8_t> bytes);

/// Appends relay frames carrying `bytes` of `host`'s link (as many as max_data_bytes needs;
/// none for no bytes).
void append_relay_frames(std::vector<std::uint8_t>& out, std::uint32_t host,
                         std::span<const std::uint8_t> bytes);
/// Splits a byte stream (after the magic) into frames. Not thread-safe; one per connection.
class frame_decoder {
 public:
  explicit frame_decoder(std::size_t max_body = max_frame_bytes) : max_body_(max_body) {}

  /// Appends received bytes. Invalidates the payloads of frames returned before.
  void feed(std::span<const std::uint8_t> bytes);
  /// As feed(), without copying what holds whole frames: next() reads them in `bytes` itself
  /// (their payloads point there), so `bytes` must stay valid until next() returned nothing; a
  /// partial frame left at its end is copied then. For a caller that takes every frame at once.
  void feed_view(std::span<const std::uint8_t> bytes);
  /// The next whole frame, or nothing until more bytes arrive. Throws pm::error for an empty,
  /// oversized or malformed frame (the stream cannot be resynchronised after that: drop it).
  std::optional<frame> next();
  /// Call at end of stream: throws pm::error if a frame was cut off.
  void finish() const;
  /// Bytes received but not yet returned as a frame.
  std::size_t buffered() const noexcept { return buffer_.size() - start_ + view_.size(); }
  /// Frees the buffer if it holds no partial frame (invalidates the payloads returned before).
  void shrink() {
    if (buffered() != 0) return;
    std::vector<std::uint8_t>().swap(buffer_);
    start_ = 0;
  }

 private:
  std::optional<frame> take(const std::uint8_t* p, std::size_t available, std::size_t& used) const;

  std::size_t max_body_;
  std::vector<std::uint8_t> buffer_;
  std::size_t start_ = 0;               // first byte not yet consumed
  std::span<const std::uint8_t> view_;  // fed by feed_view(), read before buffer_ grows again
};

/// Finds the peer's magic in the first bytes of a stream; what comes before it is noise (a login
/// shell's greeting). Keeps the start of the noise for error messages.
class preamble_scanner {
 public:
  explicit preamble_scanner(std::size_t max_noise = std::size_t{64} << 10)
      : max_noise_(max_noise) {}
  /// Scans `bytes`. Returns the offset just past the magic once it is found (bytes after it are
  /// frames), or nothing while still looking. Throws pm::error when more than max_noise bytes came
  /// without the magic.
  std::optional<std::size_t> scan(std::span<const std::uint8_t> bytes);
  bool found() const noexcept { return found_; }
  std::size_t noise_bytes() const noexcept { return noise_; }
  /// The start of the noise, printable (control bytes as '?', at most one line of 200 chars):
  /// what the peer said instead of the link, e.g. "bash: pmd: command not found".
  std::string noise_text() const;

 private:
  std::size_t max_noise_;
  std::size_t noise_ = 0;
  std::unique_ptr<std::string> kept_;  // the first bytes of noise (rare: allocated when it comes)
  std::uint8_t matched_ = 0;           // bytes of the magic matched so far
  bool found_ = false;
};

}  // namespace pm::link
