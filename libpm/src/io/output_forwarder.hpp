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
// end-of-stream and the byte count (attach's / open_stream's on_eof).
// Two kinds of input, with the same guarantees: a pipe the forwarder reads (attach: ranks on this
// host), or bytes pushed by the caller (open_stream/push/close_stream: ranks on other hosts, whose
// output arrives in agent-link messages). A pushed stream cannot be left unread, so back-pressure
// is the producer's: it asks congested() and waits for the resume callback.
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
  /// A destination whose queue holds this many bytes stops the reading of the pipes feeding it
  /// and is congested() for the pushed streams feeding it (until it drains to half of this).
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

  /// A job the ranks spawned (MPI_Comm_spawn): the ranks (processes) first .. first + size - 1
  /// are tagged [2,R] (the next one [3,R], ...) with R their rank in that job, and their per-rank
  /// files go to DIR/2/rank.R; JSON lines and the sink keep the process number.
  void add_job(std::uint32_t first, std::uint32_t size);

  /// Takes ownership of `read_fd`, the read end of a rank's stdout or stderr pipe, and forwards it
  /// until end-of-stream; then calls on_eof(bytes read) (the bytes may still be queued for writing:
  /// async_drain waits for those). on_eof runs in a handler on the io_context, never inside a call
  /// to the forwarder. A key already used throws pm::error(errc::internal) (read_fd is closed).
  void attach(std::uint32_t rank, output_stream stream, int read_fd,
              std::function<void(std::uint64_t bytes)> on_eof);

  // ---- pushed streams ---------------------------------------------------------------------
  // A stream whose bytes the caller hands over (the agent link, for ranks on other hosts). A
  // (rank, stream) key is used once: either attached or opened, never both, never twice. Misuse —
  // pushing to or closing a key that is not an open pushed stream, opening a key already used —
  // throws pm::error(errc::internal) (a bug of the caller; a link checks a remote agent's messages
  // against its own table before it pushes).

  /// Stops waiting for an attached pipe's end: its writers may never close it (the host's agent
  /// was lost, and what the rank started may hold it). What the pipe holds now is read and passed
  /// on, then it ends as at end-of-stream (on_eof is called). A stream never attached, pushed or
  /// already ended: nothing.
  void abandon(std::uint32_t rank, output_stream stream);

  /// Opens a pushed stream (per-rank files are created now, as for attach). on_eof(bytes pushed)
  /// follows close_stream as for attach: run on the io_context, posted, never inside a call to the
  /// forwarder.
  void open_stream(std::uint32_t rank, output_stream stream,
                   std::function<void(std::uint64_t bytes)> on_eof);

  /// Processes `bytes` at once, exactly like a chunk read from the rank's pipe: line assembly,
  /// formatting, writing or queueing for each destination. The span is used in place (plain mode
  /// writes from it; only what a full destination cannot take now is copied) and may be reused
  /// when push returns. Never blocks and never drops: if the destination is congested the bytes
  /// are queued beyond queue_limit, so the producer must stop when congested() turns true; the
  /// excess is then bounded by what it had in flight (its window).
  void push(std::uint32_t rank, output_stream stream, std::span<const char> bytes);

  /// End of a pushed stream (the agent saw the pipe's end-of-stream): an unterminated last line is
  /// passed on as for a pipe's end, the per-rank file is closed, and on_eof is posted.
  void close_stream(std::uint32_t rank, output_stream stream);

  /// True while the terminal destination (stdout/stderr) of this stream is congested: its queue
  /// reached queue_limit and has not yet drained to half of it. A producer stops sending this
  /// stream's bytes (the agent link withholds its credit, so the remote agent stops reading the
  /// rank's pipe) until the resume callback. Per-rank files and sinks never congest (they are
  /// written at once). Throws pm::error(errc::internal) for a key never attached or opened.
  bool congested(std::uint32_t rank, output_stream stream) const;

  /// True once nothing can receive this stream any more: its terminal destination failed (e.g.
  /// `pmrun ... | head` exited) and there is no per-rank file and no sink. What is pushed to it is
  /// then counted and discarded; a producer may close the rank's pipe, so that the rank gets
  /// SIGPIPE as a local rank does (the forwarder closes an attached pipe itself). Throws as
  /// congested().
  bool discarding(std::uint32_t rank, output_stream stream) const;

  /// `f` is called (posted, never nested) each time a congested destination stops being
  /// congested: drained to half of queue_limit, or failed. One callback for the whole forwarder:
  /// the producer then asks congested() for the streams it paused and grants more credit where
  /// it is false. An empty function removes it.
  void set_resume_callback(std::function<void()> f);

  /// Calls `handler` (posted, never nested) once every stream, attached or pushed, reached
  /// end-of-stream and everything read or pushed was written (or discarded by a failed
  /// destination).
  void async_drain(std::function<void()> handler);

  /// Stops waiting for terminal destinations that hold output nobody reads (a launcher
  /// interrupted twice): what each holds is discarded and named through on_error, and so is what
  /// the streams still bring, which are read to their ends; async_drain's handler may then run.
  void give_up();

  struct statistics {
    std::uint64_t bytes_read = 0;       ///< from all pipes and pushed streams
    std::uint64_t bytes_written = 0;    ///< to stdout/stderr (not counting per-rank files)
    std::uint64_t bytes_discarded = 0;  ///< meant for a failed destination
    std::size_t max_queued = 0;         ///< the largest a destination queue grew, in bytes
    std::size_t streams_open = 0;       ///< attached or opened, not yet at end-of-stream
  };
  statistics stats() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::io
