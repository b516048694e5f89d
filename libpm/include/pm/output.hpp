// pm::output_options: how the ranks' stdout/stderr reach the user (docs/output.md).
//
// Output bytes never pass through the controller: the output layer (libpm/src/io) reads each
// rank's pipes on the caller's io_context, writes to the launcher's stdout/stderr (or hands lines
// to an embedder's sink, or writes per-rank files) and reports only end-of-stream and a byte count
// per (rank, stream). Guarantees, in every mode: no byte is lost, lines of different ranks are
// never cut into each other, a last line without newline is kept, and memory stays bounded (when
// the destination blocks, the ranks block).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "pm/export.hpp"

namespace pm {

/// Which of a rank's streams a line came from.
enum class output_stream : std::uint8_t { out = 0, err = 1 };

/// "stdout" / "stderr", as in tags and JSON.
constexpr std::string_view to_string(output_stream s) noexcept {
  return s == output_stream::out ? "stdout" : "stderr";
}

/// What a line handed to a sink is (both false: a whole line that ended with '\n').
struct line_flags {
  /// The stream ended without a final '\n': this is its last, unterminated line.
  bool partial = false;
  /// The line was longer than output_options::max_line: this is a piece of it, and the next line
  /// of the same (rank, stream) continues it.
  bool continued = false;
  friend bool operator==(const line_flags&, const line_flags&) = default;
};

/// An embedder's receiver of lines, instead of the launcher's stdout/stderr. `line` has no
/// trailing '\n' and is valid only during the call. Called on the io_context's thread, in the
/// order each (rank, stream) wrote its lines; it must not block for long (the whole output layer
/// waits for it). Timestamps, tags and JSON do not apply to a sink (it gets the raw line).
using output_sink = std::function<void(std::uint32_t rank, output_stream stream,
                                       std::string_view line, line_flags flags)>;

/// How output is shown. The zero value is Open MPI's default: plain, stdout to stdout, stderr to
/// stderr.
struct output_options {
  /// --tag-output: every line starts with "[1,R]<stdout>:" / "[1,R]<stderr>:" (Open MPI 4.1).
  bool tag = false;
  /// --timestamp-output: every line starts with the local time as ctime prints it,
  /// "Sun Nov 22 16:37:12 2026" (Open MPI 4.1), before the tag; without a tag "<stdout>:" follows.
  bool timestamp = false;
  /// --merge-stderr-to-stdout: the ranks' stderr is their stdout (one pipe, one stream per rank).
  bool merge_stderr = false;
  /// JSON lines on stdout, one object per line: {"rank":R,"stream":"stdout","time":"...",
  /// "line":"..."} plus "partial":true / "continued":true when set. Overrides tag/timestamp for
  /// the terminal copy (per-rank files keep the text format).
  bool json_lines = false;
  /// --output-filename DIR: also write DIR/1/rank.R/stdout and .../stderr (only stdout when
  /// merged), R zero-padded to the number of digits of the job size, as Open MPI 4.1 does.
  std::string output_dir;
  /// --output-filename DIR:nocopy: write the files only, nothing to stdout/stderr.
  bool output_dir_nocopy = false;
  /// --output-filename DIR:nojobid: DIR/rank.R instead of DIR/1/rank.R (Open MPI 4.1).
  bool output_dir_nojobid = false;
  /// Longest line passed on whole; a longer one is passed on in pieces of this many bytes, each but
  /// the last marked (docs/output.md). 0: the default, 1 MiB.
  std::size_t max_line = 0;
  /// Raw terminal output (no tag, timestamp or JSON, no sink): a line without its newline yet
  /// (a prompt: `printf "Name: "; read x`) is shown after the stream has been quiet this long;
  /// the rest of the line follows it when it comes, with nothing in between from that stream.
  /// Per-rank files, sinks and formatted modes always get whole lines. 0: never.
  std::chrono::milliseconds partial_line_delay{50};
  /// Where stdout / stderr output goes (default: the launcher's own descriptors 1 and 2, which
  /// are never made non-blocking). Not owned: they stay open.
  int stdout_fd = 1;
  int stderr_fd = 2;
  /// If set, lines go here instead of stdout_fd/stderr_fd (per-rank files are still written).
  output_sink sink;
  /// Called once per destination that fails (e.g. "cannot write to standard output: Broken
  /// pipe; the ranks' further output to it is discarded"). Output to it is then discarded, and
  /// the pipes are still drained so that ranks never block.
  std::function<void(std::string_view message)> on_error;
};

/// The default max_line: 1 MiB.
inline constexpr std::size_t default_max_line = std::size_t{1} << 20;

}  // namespace pm
