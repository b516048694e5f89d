// The output forwarder's insides (output_forwarder.hpp), shared by the files that implement it:
// a destination (the terminal's stdout and stderr, a per-rank file), a rank's stream, and the
// forwarder's state with its methods, each defined in the file named above its group.
#pragma once

#include <sys/uio.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/line_assembler.hpp"
#include "io/output_format.hpp"
#include "io/output_forwarder.hpp"
#include "io/safe_path.hpp"

namespace pm::io {

namespace asio = boost::asio;

enum class format_mode { raw, text, json };

struct slice {
  const char* data;
  std::size_t size;
};

struct stream_state;

// One place output is written to: stdout, stderr (one object when both are the same file) or a
// per-rank file.
struct destination {
  std::string name;
  format_mode format = format_mode::raw;
  int fd = -1;
  bool blocking = true;  // regular file, socket, or a pipe/tty that could not be reopened
  bool socket = false;   // written with sendmsg(MSG_NOSIGNAL)
  bool guard_sigpipe = false;
  bool counts = true;                                    // in statistics::bytes_written
  std::optional<asio::posix::stream_descriptor> waiter;  // owns the reopened descriptor
  int owned_fd = -1;                                     // a per-rank file
  std::deque<std::string> queue;
  std::size_t queue_front = 0;  // bytes of queue.front() already written
  std::size_t queued = 0;
  bool waiting = false;
  bool failed = false;
  // The queue reached queue_limit and has not drained to half of it yet: pushed streams' producers
  // are asked to pause (output_forwarder::congested); leaving this state runs the resume callback.
  bool over = false;
  const stream_state* open_line = nullptr;  // raw mode: whose unterminated line ends the output
  // open_line was shown before its end (a prompt, after a quiet time): the other streams' output
  // is held until that line ends, so that it is never cut (at most queue_limit bytes, then the
  // line is cut after all). held_open: whose unterminated line ends `held`.
  bool open_shown = false;
  // When a stream writing here last fed bytes: a partial line is shown only once the whole
  // destination has been quiet (a prompt waits while everyone waits; a rank that was merely
  // descheduled mid-line while the others write on is not shown early).
  std::chrono::steady_clock::time_point last_feed;
  std::string held;
  const stream_state* held_open = nullptr;
  std::vector<stream_state*> parked;

  destination() = default;
  destination(const destination&) = delete;
  destination& operator=(const destination&) = delete;
  ~destination() {
    if (owned_fd >= 0) ::close(owned_fd);
  }
};

struct stream_state {
  std::uint32_t rank = 0;
  output_stream which = output_stream::out;
  std::optional<asio::posix::stream_descriptor> pipe;  // none for a pushed stream
  bool pushed = false;
  line_assembler assembler;
  destination* terminal = nullptr;
  std::unique_ptr<destination> file;
  std::uint64_t bytes = 0;
  bool eof = false;
  bool parked = false;
  std::function<void(std::uint64_t)> on_eof;
  // Text mode: what follows the timestamp, "[1,R]<stdout>:" / "[1,R]<stdout>+:", made once.
  std::string tag_line, tag_piece;
  // A partial line shown on the raw terminal after a quiet time: `shown` bytes of the assembler's
  // tail are out already, and are skipped when the line is emitted; `quiet` waits for the
  // destination to be silent (re-armed from its last feed rather than on every read).
  std::size_t shown = 0;
  std::optional<asio::steady_timer> quiet;

  explicit stream_state(std::size_t max_line) : assembler(max_line) {}
};

struct output_forwarder::impl : std::enable_shared_from_this<impl> {
  asio::io_context& io;
  output_options opt;
  std::size_t job_size;
  forwarder_limits limits;
  std::size_t max_line;
  bool guard = true;
  std::vector<std::unique_ptr<destination>> terminals;
  destination* out_dest = nullptr;
  destination* err_dest = nullptr;
  std::vector<std::unique_ptr<stream_state>> streams;
  std::unordered_map<std::uint64_t, stream_state*> by_key;  // (rank, stream) -> its state
  std::function<void()> resume_callback;
  // Not zero-filled: a page costs memory only once a read reaches it (most jobs write little).
  std::unique_ptr<char[]> scratch;
  std::size_t scratch_size = 0;
  std::string fmt;  // formatting buffer
  // Tagged lines of one chunk (tag_whole_lines); not zero-filled, kept between chunks.
  std::unique_ptr<char[]> tagged;
  std::size_t tagged_size = 0;
  std::size_t tagged_capacity = 0;
  std::string line;  // a sink's line when it straddles the kept tail and the new chunk
  // --output-filename: DIR, and DIR/1 (or DIR with nojobid), held open; spawned jobs' DIR/J.
  safe_dir base_dir;
  safe_dir first_job_dir;
  std::map<std::uint32_t, safe_dir> job_dirs;
  std::function<void()> drain_handler;
  statistics st;
  // The time of the chunk being processed, formatted at most once per chunk.
  std::optional<std::chrono::system_clock::time_point> chunk_time;
  ctime_cache ctime_text;
  std::string rfc_text;
  bool rfc_valid = false;
  // Spawned jobs: (first process, size), in order; Open MPI's job number is the index + 2.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> jobs;

  struct consumer {
    impl& m;
    stream_state& s;
    // The tail is handed over as `prefix` once; what was shown of it is accounted for then.
    void whole(std::string_view prefix, std::string_view body) {
      m.emit_whole(s, prefix, body);
      s.shown = 0;
    }
    void piece(std::string_view prefix, std::string_view body, line_flags f) {
      m.emit_piece(s, prefix, body, f);
      s.shown = 0;
    }
  };

  struct label {
    std::uint32_t job = 1;
    std::uint32_t rank = 0;
    std::size_t size = 0;
  };

  // output_forwarder.cpp: making destinations and streams, reading pipes, pushed streams, drain.
  impl(asio::io_context& io_, output_options options, std::size_t size, forwarder_limits lim);
  void open_output_directories();
  static std::string rank_name(std::uint32_t rank, std::size_t size);
  static bool same_file(int a, int b);
  destination* make_fd_destination(int fd, std::string name, format_mode fm);
  destination* congested(const stream_state& s) const;
  void resume_parked(destination& d);
  void wait_readable(stream_state& s);
  bool orphaned(const stream_state& s) const;
  void try_read(stream_state& s);
  void end_of_stream(stream_state& s);
  void check_drain();
  std::size_t pipe_size() const;
  static std::uint64_t key_of(std::uint32_t rank, output_stream which);
  static std::string name_of(std::uint32_t rank, output_stream which);
  label label_of(std::uint32_t rank) const;
  stream_state& add_stream(std::uint32_t rank, output_stream which,
                           std::function<void(std::uint64_t)> on_eof);
  void abandon(std::uint32_t rank, output_stream which);
  void attach(std::uint32_t rank, output_stream which, int fd,
              std::function<void(std::uint64_t)> on_eof);
  const stream_state& known(std::uint32_t rank, output_stream which) const;
  stream_state& open_pushed(std::uint32_t rank, output_stream which, const char* what);
  void open_stream(std::uint32_t rank, output_stream which,
                   std::function<void(std::uint64_t)> on_eof);
  void push(std::uint32_t rank, output_stream which, std::span<const char> bytes);
  void close_stream(std::uint32_t rank, output_stream which);
  bool congested(std::uint32_t rank, output_stream which) const;
  std::unique_ptr<destination> open_rank_file(std::uint32_t rank, output_stream which,
                                              bool append = false);

  // output_forwarder_lines.cpp: a stream's lines formatted for their destinations, prompts.
  std::chrono::system_clock::time_point now();
  std::string_view ctime_now();
  std::string_view rfc_now();
  void append_formatted(std::string& out, format_mode fm, const stream_state& s, std::string_view a,
                        std::string_view b, line_flags f);
  void to_sink(const stream_state& s, std::string_view a, std::string_view b, line_flags f);
  static std::string_view unshown(const stream_state& s, const destination* d,
                                  std::string_view prefix);
  void reserve_tagged(std::size_t size);
  bool tag_whole_lines(const stream_state& s, std::string_view prefix, std::string_view body,
                       std::string_view stamp);
  void emit_whole(stream_state& s, std::string_view prefix, std::string_view body);
  void emit_piece(stream_state& s, std::string_view prefix, std::string_view body, line_flags f);
  bool shows_partial_lines(const stream_state& s) const;
  void after_feed(stream_state& s);
  void arm_quiet(stream_state& s, std::chrono::steady_clock::duration after);
  void quiet_time(stream_state& s);

  // output_forwarder_write.cpp: writing to a destination, its queue and congestion.
  void fail(destination& d, int e);
  void fail_with(destination& d, const std::string& message);
  void write_blocking(destination& d, iovec* iov, int n);
  static void advance(iovec*& iov, int& n, std::size_t done);
  void write(destination& d, const stream_state& s, const slice* parts, int count, bool ends_line);
  void release_held(destination& d);
  void write_as(destination& d, const stream_state* who, const slice* parts, int count,
                bool ends_line);
  void write_now(destination& d, const stream_state* who, const slice* parts, int count,
                 bool ends_line);
  void wait_writable(destination& d);
  void flush(destination& d);
  void leave_over(destination& d);
};

}  // namespace pm::io
