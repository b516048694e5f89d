// Messages about the ranks' output and input streams; the bytes themselves travel as data frames
// (frame.hpp), not as messages. Each declares its wire form once (wire_schema.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

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

/// Launcher -> agent (version 13): nothing receives this stream of the rank any more (the
/// launcher's destination failed, `pmrun ... | head`, and it has no per-rank file or sink): close
/// the pipe's read end, so that the rank gets SIGPIPE at its next write, as a rank on the
/// launcher's machine does; its end is reported as any stream's.
struct output_unwanted {
  std::uint32_t rank = 0;
  output_stream stream = output_stream::out;
  friend bool operator==(const output_unwanted&, const output_unwanted&) = default;
  static constexpr auto wire() {
    return wire_message("output_unwanted", sender::launcher, field("rank", &output_unwanted::rank),
                        field("stream", &output_unwanted::stream, 1, 2));
  }
};

/// A forwarded output stream that reached end-of-stream after `bytes` bytes (every output frame
/// of it was sent before the message that names it).
struct closed_stream {
  std::uint32_t rank = 0;
  output_stream stream = output_stream::out;
  std::uint64_t bytes = 0;
  friend bool operator==(const closed_stream&, const closed_stream&) = default;
  static constexpr auto wire() {
    return wire_map(field("rank", &closed_stream::rank),
                    field("stream", &closed_stream::stream, 1, 2),
                    field("bytes", &closed_stream::bytes));
  }
};
/// Agent -> launcher: these streams ended (at least one), in one turn of the agent's loop.
struct stream_closed {
  std::vector<closed_stream> streams;
  friend bool operator==(const stream_closed&, const stream_closed&) = default;
  static constexpr auto wire() {
    return wire_message("stream_closed", sender::agent, field("streams", &stream_closed::streams));
  }
  static void check(const stream_closed& m, std::string_view type);  ///< at least one stream
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
