// Output formats: tags, timestamps, JSON lines, per-rank file names. Pure functions of their
// arguments (the caller reads the clock and passes the time), unit-tested against the exact text
// Open MPI 4.1 prints.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "pm/output.hpp"

namespace pm::io {

/// "Sun Nov 22 16:37:12 2026": ctime(3) without its newline, in the local time zone, always with
/// English names (as Open MPI's --timestamp-output prints it).
std::string format_ctime(std::time_t t);

/// "2026-11-22T16:37:12.123456Z": RFC 3339, UTC, microseconds (JSON lines).
std::string format_rfc3339_utc(std::chrono::system_clock::time_point t);

/// The text in front of a line in tagged/timestamped text mode:
///   tag:               "[1,R]<stdout>:"
///   timestamp:         "<time><stdout>:"
///   tag and timestamp: "<time>[1,R]<stdout>:"
/// A piece of a long line that continues on the next line gets "+:" instead of ":"
/// ("[1,R]<stdout>+:"). `time` is format_ctime's text (ignored without timestamp).
/// `job` is Open MPI's job number: 1 for the launch's own ranks, 2 for the first job they
/// spawned (MPI_Comm_spawn), ... with `rank` the rank in that job.
void append_line_prefix(std::string& out, bool tag, bool timestamp, std::string_view time,
                        std::uint32_t rank, output_stream stream, line_flags flags,
                        std::uint32_t job = 1);

/// One JSON-lines object and its '\n':
///   {"rank":R,"stream":"stdout","time":"<rfc3339>","line":"<text>"}
/// with ,"partial":true / ,"continued":true before the closing brace when set. Bytes of the line
/// that are not valid UTF-8 become U+FFFD. The line's text is a + b.
void append_json_line(std::string& out, std::uint32_t rank, output_stream stream,
                      std::string_view time, std::string_view a, std::string_view b,
                      line_flags flags);

/// Digits of the job size: Open MPI 4.1 pads rank.R to this width (10 ranks: rank.00 .. rank.09).
std::size_t rank_width(std::size_t job_size);

/// "DIR/1/rank.R" with R zero-padded to rank_width(job_size); "DIR/rank.R" without the job id
/// (--output-filename DIR:nojobid, as Open MPI 4.1).
std::string rank_directory(std::string_view dir, std::uint32_t rank, std::size_t job_size,
                           bool with_jobid = true, std::uint32_t job = 1);

/// Caches the formatted time for the current second, so per-line timestamps cost no formatting.
class ctime_cache {
 public:
  std::string_view at(std::time_t t) {
    if (t != second_ || text_.empty()) {
      second_ = t;
      text_ = format_ctime(t);
    }
    return text_;
  }

 private:
  std::time_t second_ = 0;
  std::string text_;
};

}  // namespace pm::io
