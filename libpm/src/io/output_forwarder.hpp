// output_forwarder: moves the ranks' output from their pipes to the destinations (the launcher's
// stdout/stderr, an embedder's sink, per-rank files) on one Asio io_context, single-threaded.
// docs/output.md describes every mode and guarantee; in short:
//   - each pipe is read in big chunks into one shared buffer; plain mode writes everything up to
//     the chunk's last newline with one writev and keeps only the unterminated tail;
//   - lines of different ranks are never cut into each other; a line longer than max_line is
//     passed on in marked pieces; a last line without newline is kept;
//   - memory is bounded: when a destination's queue is full, the pipes feeding it are not read,
//     so the ranks block in write() — until the destination drains;
//   - the launcher's inherited descriptors are never made non-blocking: pipes and ttys are
//     reopened through /proc/self/fd/N (a new open file description), files and sockets get
//     blocking writes;
//   - a failed destination (EPIPE, EIO, ...) is reported once through output_options::on_error,
//     then its output is discarded while the pipes are still drained to end-of-stream.
// Output never passes through the controller: per (rank, stream) the forwarder reports only
// end-of-stream and the byte count (attach's on_eof).
// Not thread-safe: call it from the io_context's thread; its callbacks run there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "pm/output.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::io {

/// Sizes the forwarder works with; the defaults suit pmrun (tests shrink them).
struct forwarder_limits {
  /// A destination whose queue holds this many bytes stops the reading of the pipes feeding it.
  std::size_t queue_limit = std::size_t{4} << 20;
  /// Bytes read from a pipe at once (one buffer, shared by all pipes).
  std::size_t read_chunk = std::size_t{1} << 20;
  /// Pipe capacity asked for with F_SETPIPE_SZ: at most this, and at most 64 MiB over all pipes.
  std::size_t pipe_size = std::size_t{1} << 20;
};

class output_forwarder {
 public:
  /// `job_size` (ranks in the job) sets the width of per-rank directory names. Throws pm::error
  /// (errc::system) when output_options::output_dir cannot be created.
  output_forwarder(boost::asio::io_context& io, output_options options, std::size_t job_size,
                   forwarder_limits limits = {});
  ~output_forwarder();
  output_forwarder(const output_forwarder&) = delete;
  output_forwarder& operator=(const output_forwarder&) = delete;

  /// Takes ownership of `read_fd`, the read end of a rank's stdout or stderr pipe, and forwards it
  /// until end-of-stream; then calls on_eof(bytes read) (the bytes may still be queued for writing:
  /// async_drain waits for those).
  void attach(std::uint32_t rank, output_stream stream, int read_fd,
              std::function<void(std::uint64_t bytes)> on_eof);

  /// A stream whose bytes are pushed (a rank on another host: its agent forwards them over the
  /// agent link) instead of read from a pipe. Same guarantees as attach(). on_eof as for attach.
  void open_stream(std::uint32_t rank, output_stream stream,
                   std::function<void(std::uint64_t bytes)> on_eof);
  /// Processes the bytes at once, as a chunk read from a pipe (never blocks, never drops: a
  /// destination's queue may grow past its limit by what the producer sends while congested,
  /// which the agent link's window bounds). Bytes for a stream not opened, or closed, are ignored.
  void push(std::uint32_t rank, output_stream stream, std::span<const char> bytes);
  /// End-of-stream of a pushed stream: its partial last line is kept, on_eof(bytes) follows.
  void close_stream(std::uint32_t rank, output_stream stream);
  /// True when the destination of this pushed stream is over its queue limit: its producer should
  /// pause (the agent link withholds credit). The resume callback fires (posted) once it drained.
  bool congested(std::uint32_t rank, output_stream stream);
  void set_resume_callback(std::function<void()> callback);

  /// Calls `handler` (posted, never nested) once every attached stream reached end-of-stream and
  /// everything read was written (or discarded by a failed destination).
  void async_drain(std::function<void()> handler);

  struct statistics {
    std::uint64_t bytes_read = 0;       ///< from all pipes
    std::uint64_t bytes_written = 0;    ///< to stdout/stderr (not counting per-rank files)
    std::uint64_t bytes_discarded = 0;  ///< meant for a failed destination
    std::size_t max_queued = 0;         ///< the largest a destination queue grew, in bytes
    std::size_t streams_open = 0;       ///< attached and not yet at end-of-stream
  };
  statistics stats() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::io
