// Messages about the ranks' output and input streams; the bytes themselves travel as data frames
// (frame.hpp), not as messages. Each declares its wire form once (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <optional>

#include "link/wire_schema.hpp"
#include "pm/output.hpp"

namespace pm::link {

/// Launcher -> agent: no more stdin for this rank (its pipe is closed).
struct input_closed {
  std::uint32_t rank = 0;
  friend bool operator==(const input_closed&, const input_closed&) = default;
  static constexpr auto wire() {
    return wire_message("input_closed", sender::launcher, field("rank", &input_closed::rank));
  }
};

/// Agent -> launcher: a forwarded output stream reached end-of-stream after `bytes` bytes (every
/// output frame of it was sent before this message).
struct stream_closed {
  std::uint32_t rank = 0;
  output_stream stream = output_stream::out;
  std::uint64_t bytes = 0;
  friend bool operator==(const stream_closed&, const stream_closed&) = default;
  static constexpr auto wire() {
    return wire_message("stream_closed", sender::agent, field("rank", &stream_closed::rank),
                        field("stream", &stream_closed::stream, 1, 2),
                        field("bytes", &stream_closed::bytes));
  }
};

/// A stream on the wire: 1 stdout, 2 stderr (as the output frames name them).
template <>
struct wire_number<output_stream> {
  static constexpr std::int64_t to(output_stream s) { return s == output_stream::out ? 1 : 2; }
  static constexpr std::optional<output_stream> from(std::int64_t n) {
    return n == 1 ? output_stream::out : output_stream::err;
  }
};

}  // namespace pm::link
