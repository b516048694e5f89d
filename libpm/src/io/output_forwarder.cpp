#include "io/output_forwarder.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/line_assembler.hpp"
#include "io/output_format.hpp"
#include "io/safe_path.hpp"
#include "io/sigpipe_guard.hpp"
#include "pm/error.hpp"

namespace pm::io {

namespace asio = boost::asio;

namespace {

enum class format_mode { raw, text, json };

struct slice {
  const char* data;
  std::size_t size;
};

std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

}  // namespace

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

  impl(asio::io_context& io_, output_options options, std::size_t size, forwarder_limits lim)
      : io(io_), opt(std::move(options)), job_size(size), limits(lim) {
    max_line = opt.max_line == 0 ? default_max_line : opt.max_line;
    if (limits.read_chunk == 0) limits.read_chunk = std::size_t{1} << 20;
    scratch.reset(new char[limits.read_chunk]);
    scratch_size = limits.read_chunk;
    guard = !sigpipe_ignored();
    if (!opt.output_dir.empty()) open_output_directories();
    if (!opt.sink && !(opt.output_dir_nocopy && !opt.output_dir.empty())) {
      const format_mode fm = opt.json_lines               ? format_mode::json
                             : (opt.tag || opt.timestamp) ? format_mode::text
                                                          : format_mode::raw;
      out_dest = make_fd_destination(opt.stdout_fd, "standard output", fm);
      if (opt.json_lines || same_file(opt.stdout_fd, opt.stderr_fd)) {
        err_dest = out_dest;  // one queue keeps the two streams' order and lines apart
      } else {
        err_dest = make_fd_destination(opt.stderr_fd, "standard error", fm);
      }
    }
  }

  // --output-filename DIR: DIR and the first job's directory (DIR/1, or DIR itself with nojobid)
  // are walked (created where missing) and held open; what already exists of every rank's
  // directory and files is checked now, so that a refusal comes before any rank starts
  // (docs/output.md, "Where the files may be"). The directories are then ours and closed to
  // others: nobody else can plant anything in them before the ranks' files are made.
  void open_output_directories() {
    path_problem p;
    base_dir = open_directory(opt.output_dir, true, p);
    if (!base_dir) throw error(errc::system, "--output-filename: " + p.message("create"));
    if (opt.output_dir_nojobid) {
      first_job_dir = base_dir.duplicate();
    } else {
      first_job_dir = open_below(base_dir, "1", true, p);
      if (!first_job_dir) throw error(errc::system, "--output-filename: " + p.message("create"));
    }
    if (first_job_dir.created()) return;  // empty: nothing to check
    std::vector<std::string_view> files = {to_string(output_stream::out)};
    if (!opt.merge_stderr) files.push_back(to_string(output_stream::err));
    for (std::size_t r = 0; r < job_size; ++r) {
      const auto name = rank_name(static_cast<std::uint32_t>(r), job_size);
      if (!check_below(first_job_dir, name, files, p)) {
        throw error(errc::system, "--output-filename: " + p.message("open"));
      }
    }
  }

  static std::string rank_name(std::uint32_t rank, std::size_t size) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "rank.%0*u", static_cast<int>(rank_width(size)), rank);
    return buf;
  }

  static bool same_file(int a, int b) {
    if (a == b) return true;
    struct stat sa {
    }, sb{};
    if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }

  destination* make_fd_destination(int fd, std::string name, format_mode fm) {
    auto d = std::make_unique<destination>();
    d->name = std::move(name);
    d->format = fm;
    d->fd = fd;
    struct stat sb {};
    if (fd < 0 || ::fstat(fd, &sb) != 0) {
      fail(*d, fd < 0 ? EBADF : errno);
    } else if (S_ISSOCK(sb.st_mode)) {
      d->socket = true;
    } else if (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode)) {
      // A new open file description of the same pipe or tty: O_NONBLOCK on it does not change
      // the one the launcher shares with its shell.
      const std::string path = "/proc/self/fd/" + std::to_string(fd);
      const int nfd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
      if (nfd >= 0) {
        d->fd = nfd;
        d->blocking = false;
        d->waiter.emplace(io, nfd);
      }
      d->guard_sigpipe = guard && S_ISFIFO(sb.st_mode);
    }
    terminals.push_back(std::move(d));
    return terminals.back().get();
  }

  // ---- time --------------------------------------------------------------------------------

  std::chrono::system_clock::time_point now() {
    if (!chunk_time) {
      chunk_time = std::chrono::system_clock::now();
      rfc_valid = false;
    }
    return *chunk_time;
  }
  std::string_view ctime_now() {
    return ctime_text.at(std::chrono::system_clock::to_time_t(now()));
  }
  std::string_view rfc_now() {
    now();
    if (!rfc_valid) {
      rfc_text = format_rfc3339_utc(*chunk_time);
      rfc_valid = true;
    }
    return rfc_text;
  }

  // ---- formatting --------------------------------------------------------------------------

  void append_formatted(std::string& out, format_mode fm, const stream_state& s, std::string_view a,
                        std::string_view b, line_flags f) {
    if (fm == format_mode::json) {
      append_json_line(out, s.rank, s.which, rfc_now(), a, b, f);
      return;
    }
    if (opt.timestamp) out.append(ctime_now());
    out.append(f.continued ? s.tag_piece : s.tag_line);
    out.append(a);
    out.append(b);
    out.push_back('\n');
  }

  void to_sink(const stream_state& s, std::string_view a, std::string_view b, line_flags f) {
    if (a.empty() || b.empty()) {
      opt.sink(s.rank, s.which, a.empty() ? b : a, f);
      return;
    }
    line.assign(a).append(b);
    opt.sink(s.rank, s.which, line, f);
  }

  // What of `prefix` (the assembler's tail) destination `d` still needs: the terminal already
  // has the part a quiet-time flush showed.
  static std::string_view unshown(const stream_state& s, const destination* d,
                                  std::string_view prefix) {
    return d == s.terminal ? prefix.substr(std::min(s.shown, prefix.size())) : prefix;
  }

  // Makes room for `size` bytes in `tagged`, keeping the first tagged_size.
  void reserve_tagged(std::size_t size) {
    if (size <= tagged_capacity) return;
    const std::size_t capacity = std::max(size, tagged_capacity * 2);
    std::unique_ptr<char[]> bigger(new char[capacity]);
    if (tagged_size > 0) std::memcpy(bigger.get(), tagged.get(), tagged_size);
    tagged = std::move(bigger);
    tagged_capacity = capacity;
  }

  // --tag-output and/or --timestamp-output: every line of prefix + body (whole lines) becomes
  // stamp + tag + line in `tagged`, by plain copies into a buffer sized once per chunk (the stamp
  // is the chunk's, as on the general path). The general path's std::string appends, four per
  // 100-byte line, made pmrun the bottleneck of a tagged flood. False, with nothing written, when
  // a line is longer than max_line: the general path cuts it into marked pieces.
  bool tag_whole_lines(const stream_state& s, std::string_view prefix, std::string_view body,
                       std::string_view stamp) {
    const std::string_view tag = s.tag_line;
    tagged_size = 0;
    reserve_tagged(prefix.size() + body.size() +
                   (body.size() / 64 + 1) * (stamp.size() + tag.size()));
    std::string_view head = prefix;  // the kept tail starts the first line only
    while (!body.empty()) {
      const void* nl = std::memchr(body.data(), '\n', body.size());
      const std::size_t length =  // of the line, without its newline
          nl != nullptr ? static_cast<std::size_t>(static_cast<const char*>(nl) - body.data())
                        : body.size();
      if (head.size() + length > max_line) return false;
      reserve_tagged(tagged_size + stamp.size() + tag.size() + head.size() + length + 1);
      char* out = tagged.get() + tagged_size;
      if (!stamp.empty()) std::memcpy(out, stamp.data(), stamp.size());
      out += stamp.size();
      std::memcpy(out, tag.data(), tag.size());
      out += tag.size();
      if (!head.empty()) std::memcpy(out, head.data(), head.size());
      out += head.size();
      std::memcpy(out, body.data(), length);
      out += length;
      *out++ = '\n';
      tagged_size = static_cast<std::size_t>(out - tagged.get());
      body.remove_prefix(nl != nullptr ? length + 1 : length);
      head = {};
    }
    return true;
  }

  // Complete lines: prefix + body ends with '\n'.
  void emit_whole(stream_state& s, std::string_view prefix, std::string_view body) {
    for (destination* d : {s.terminal, s.file.get()}) {
      if (d == nullptr) continue;
      if (d->format == format_mode::raw) {
        const auto p = unshown(s, d, prefix);
        const slice parts[] = {{p.data(), p.size()}, {body.data(), body.size()}};
        write(*d, s, parts, 2, true);
      } else if (d->format == format_mode::text &&
                 tag_whole_lines(s, prefix, body,
                                 opt.timestamp ? ctime_now() : std::string_view{})) {
        const slice parts[] = {{tagged.get(), tagged_size}};
        write(*d, s, parts, 1, true);
      } else {
        fmt.clear();
        fmt.reserve(prefix.size() + body.size() + body.size() / 4 + 256);
        for_each_line(prefix, body, max_line,
                      [&](std::string_view a, std::string_view b, line_flags f) {
                        append_formatted(fmt, d->format, s, a, b, f);
                      });
        const slice parts[] = {{fmt.data(), fmt.size()}};
        write(*d, s, parts, 1, true);
      }
    }
    if (opt.sink) {
      for_each_line(
          prefix, body, max_line,
          [&](std::string_view a, std::string_view b, line_flags f) { to_sink(s, a, b, f); });
    }
  }

  // An unterminated piece: a long line's first max_line bytes, or a last line without '\n'.
  void emit_piece(stream_state& s, std::string_view prefix, std::string_view body, line_flags f) {
    for (destination* d : {s.terminal, s.file.get()}) {
      if (d == nullptr) continue;
      if (d->format == format_mode::raw) {
        const auto p = unshown(s, d, prefix);
        const slice parts[] = {{p.data(), p.size()}, {body.data(), body.size()}};
        write(*d, s, parts, 2, false);
      } else {
        fmt.clear();
        append_formatted(fmt, d->format, s, prefix, body, f);
        const slice parts[] = {{fmt.data(), fmt.size()}};
        write(*d, s, parts, 1, true);
      }
    }
    if (opt.sink) to_sink(s, prefix, body, f);
  }

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

  // ---- partial lines on the terminal (prompts) ----------------------------------------------

  // Not for a rank on another host (pushed): a pause in its bytes may be the link's (credit,
  // the network), not the rank's, and a line shown early there was cut by the lines piling up
  // behind it under back-pressure. Its prompt shows when its line ends.
  bool shows_partial_lines(const stream_state& s) const {
    return opt.partial_line_delay.count() > 0 && !opt.sink && s.terminal != nullptr &&
           s.terminal->format == format_mode::raw && !s.pushed;
  }

  // After a feed: a tail not shown yet waits for the destination to be quiet.
  void after_feed(stream_state& s) {
    if (!shows_partial_lines(s)) return;
    s.terminal->last_feed = std::chrono::steady_clock::now();
    if (s.assembler.pending() <= s.shown) return;
    if (s.quiet) return;  // armed: it re-arms itself from last_feed
    s.quiet.emplace(io);
    arm_quiet(s, opt.partial_line_delay);
  }

  void arm_quiet(stream_state& s, std::chrono::steady_clock::duration after) {
    s.quiet->expires_after(after);
    s.quiet->async_wait([weak = weak_from_this(), sp = &s](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec == asio::error::operation_aborted) return;
      self->quiet_time(*sp);
    });
  }

  void quiet_time(stream_state& s) {
    if (s.eof) {
      s.quiet.reset();
      return;
    }
    const auto silent = std::chrono::steady_clock::now() - s.terminal->last_feed;
    if (silent < opt.partial_line_delay) {
      arm_quiet(s, opt.partial_line_delay - silent);  // bytes came meanwhile: wait on
      return;
    }
    if (s.terminal->queued > 0 || s.terminal->waiting) {
      // The destination is the one that is slow (a stalled terminal or pipe): everyone stopped
      // because output waits, not because a rank waits for input. Showing the tail now would cut
      // a line that goes on once the queue drains, so wait on.
      arm_quiet(s, opt.partial_line_delay);
      return;
    }
    s.quiet.reset();
    const auto tail = s.assembler.held();
    if (tail.size() <= s.shown) return;
    const auto rest = tail.substr(s.shown);
    const slice parts[] = {{rest.data(), rest.size()}};
    destination& d = *s.terminal;
    write(d, s, parts, 1, false);                // the line stays open: its rest follows directly
    if (d.open_line == &s) d.open_shown = true;  // (else it was held behind another shown line)
    s.shown = tail.size();
  }

  // ---- writing -----------------------------------------------------------------------------

  void fail(destination& d, int e) {
    fail_with(d, "cannot write to " + d.name + ": " + errno_text(e) +
                     "; the ranks' further output to it is discarded");
  }

  void fail_with(destination& d, const std::string& message) {
    if (d.failed) return;
    d.failed = true;
    st.bytes_discarded += d.queued;
    d.queue.clear();
    d.queued = 0;
    d.queue_front = 0;
    leave_over(d);
    if (opt.on_error) opt.on_error(message);
    resume_parked(d);
  }

  // Writes all of iov to a blocking destination (waits in poll if someone made it non-blocking).
  void write_blocking(destination& d, iovec* iov, int n) {
    while (n > 0) {
      ssize_t r;
      if (d.socket) {
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<std::size_t>(n);
        r = ::sendmsg(d.fd, &msg, MSG_NOSIGNAL);
      } else {
        r = writev_guarded(d.fd, iov, n, d.guard_sigpipe);
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          pollfd p{d.fd, POLLOUT, 0};
          ::poll(&p, 1, -1);
          continue;
        }
        const int e = errno;
        std::size_t left = 0;
        for (int i = 0; i < n; ++i) left += iov[i].iov_len;
        st.bytes_discarded += left;
        fail(d, e);
        return;
      }
      if (d.counts) st.bytes_written += static_cast<std::uint64_t>(r);
      advance(iov, n, static_cast<std::size_t>(r));
    }
  }

  // Drops `done` bytes from the front of iov (entries fully written are removed).
  static void advance(iovec*& iov, int& n, std::size_t done) {
    while (n > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }

  void write(destination& d, const stream_state& s, const slice* parts, int count, bool ends_line) {
    write_as(d, &s, parts, count, ends_line);
  }

  // Raw mode: the held output goes out once the shown line has ended (or must be cut).
  void release_held(destination& d) {
    d.open_shown = false;
    if (d.held.empty()) return;
    const std::string held = std::move(d.held);
    d.held.clear();
    const stream_state* who = std::exchange(d.held_open, nullptr);
    const slice parts[] = {{held.data(), held.size()}};
    write_as(d, who, parts, 1, who == nullptr);
  }

  // `who`: the stream the bytes come from (nullptr: complete lines of held output).
  void write_as(destination& d, const stream_state* who, const slice* parts, int count,
                bool ends_line) {
    if (d.format == format_mode::raw && d.open_shown && d.open_line != who) {
      std::size_t size = 0;
      for (int i = 0; i < count; ++i) size += parts[i].size;
      if (d.held.size() + size <= limits.queue_limit) {
        if (d.held_open != nullptr && d.held_open != who) d.held.push_back('\n');
        for (int i = 0; i < count; ++i) d.held.append(parts[i].data, parts[i].size);
        if (size > 0) d.held_open = ends_line ? nullptr : who;
        return;
      }
      release_held(d);  // too much is waiting: the shown line is cut after all
    }
    const bool ends_shown_line = d.open_shown && d.open_line == who && ends_line;
    write_now(d, who, parts, count, ends_line);
    if (ends_shown_line) release_held(d);
  }

  void write_now(destination& d, const stream_state* who, const slice* parts, int count,
                 bool ends_line) {
    iovec iov[4];
    int n = 0;
    std::size_t total = 0;
    if (d.format == format_mode::raw) {
      // Another stream's unterminated line ends the output: finish it, so lines never join.
      if (d.open_line != nullptr && d.open_line != who) {
        iov[n++] = {const_cast<char*>("\n"), 1};
        total += 1;
      }
    }
    for (int i = 0; i < count; ++i) {
      if (parts[i].size == 0) continue;
      iov[n++] = {const_cast<char*>(parts[i].data), parts[i].size};
      total += parts[i].size;
    }
    if (total == 0) return;
    if (d.format == format_mode::raw) d.open_line = ends_line ? nullptr : who;
    if (d.failed) {
      st.bytes_discarded += total;
      return;
    }
    if (d.blocking) {
      write_blocking(d, iov, n);
      return;
    }
    iovec* cur = iov;
    if (!d.waiting && d.queued == 0) {
      for (;;) {
        const ssize_t r = writev_guarded(d.fd, cur, n, d.guard_sigpipe);
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN) break;
          const int e = errno;
          st.bytes_discarded += total;
          fail(d, e);
          return;
        }
        st.bytes_written += static_cast<std::uint64_t>(r);
        total -= static_cast<std::size_t>(r);
        advance(cur, n, static_cast<std::size_t>(r));
        if (n == 0) return;
      }
    }
    // The destination is full: queue a copy of the rest and wait until it can take more.
    std::string copy;
    copy.reserve(total);
    for (int i = 0; i < n; ++i)
      copy.append(static_cast<const char*>(cur[i].iov_base), cur[i].iov_len);
    d.queued += copy.size();
    d.queue.push_back(std::move(copy));
    st.max_queued = std::max(st.max_queued, d.queued);
    if (d.queued >= limits.queue_limit) d.over = true;
    wait_writable(d);
  }

  void wait_writable(destination& d) {
    if (d.waiting || d.failed) return;
    d.waiting = true;
    d.waiter->async_wait(asio::posix::stream_descriptor::wait_write,
                         [weak = weak_from_this(), dp = &d](const boost::system::error_code& ec) {
                           auto self = weak.lock();
                           if (!self || ec == asio::error::operation_aborted) return;
                           dp->waiting = false;
                           self->flush(*dp);
                         });
  }

  void flush(destination& d) {
    while (!d.failed && d.queued > 0) {
      iovec iov[64];
      int n = 0;
      std::size_t skip = d.queue_front;
      for (auto it = d.queue.begin(); it != d.queue.end() && n < 64; ++it) {
        iov[n++] = {it->data() + skip, it->size() - skip};
        skip = 0;
      }
      const ssize_t r = writev_guarded(d.fd, iov, n, d.guard_sigpipe);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          wait_writable(d);
          break;
        }
        fail(d, errno);
        break;
      }
      st.bytes_written += static_cast<std::uint64_t>(r);
      std::size_t done = static_cast<std::size_t>(r);
      d.queued -= done;
      while (done > 0) {
        const std::size_t left = d.queue.front().size() - d.queue_front;
        if (done >= left) {
          done -= left;
          d.queue.pop_front();
          d.queue_front = 0;
        } else {
          d.queue_front += done;
          done = 0;
        }
      }
    }
    if (d.queued <= limits.queue_limit / 2) {
      resume_parked(d);
      leave_over(d);
    }
    check_drain();
  }

  // The destination is no longer congested: producers of pushed streams may send again.
  void leave_over(destination& d) {
    if (!d.over) return;
    d.over = false;
    if (resume_callback) {
      asio::post(io, [weak = weak_from_this()] {
        auto self = weak.lock();
        if (self && self->resume_callback) {
          auto cb = self->resume_callback;  // it may replace itself
          cb();
        }
      });
    }
  }

  // ---- reading -----------------------------------------------------------------------------

  destination* congested(const stream_state& s) const {
    destination* d = s.terminal;
    if (d != nullptr && !d->failed && !d->blocking && d->queued >= limits.queue_limit) return d;
    return nullptr;
  }

  void resume_parked(destination& d) {
    auto parked = std::move(d.parked);
    d.parked.clear();
    for (stream_state* s : parked) {
      s->parked = false;
      // Read at once: the pipe's readiness edge may have passed while it was parked.
      asio::post(io, [weak = weak_from_this(), s] {
        if (auto self = weak.lock()) self->try_read(*s);
      });
    }
  }

  void wait_readable(stream_state& s) {
    s.pipe->async_wait(asio::posix::stream_descriptor::wait_read,
                       [weak = weak_from_this(), sp = &s](const boost::system::error_code& ec) {
                         auto self = weak.lock();
                         if (!self || ec == asio::error::operation_aborted) return;
                         self->try_read(*sp);
                       });
  }

  // Nothing can receive this stream any more (its destination broke, e.g. `pmrun ... | head`
  // exited, and there is no per-rank file or sink): close the pipe, as a shell pipeline would, so
  // the rank gets SIGPIPE instead of writing forever into nothing.
  bool orphaned(const stream_state& s) const {
    return !opt.sink && !s.file && (s.terminal == nullptr || s.terminal->failed);
  }

  void try_read(stream_state& s) {
    if (s.eof || s.parked) return;
    // A few chunks per turn, then let the other pipes and handlers run.
    for (int round = 0; round < 8; ++round) {
      // Checked before every read: a write of the previous chunk may just have failed, and a
      // fast writer must not get its whole output drained into nothing before its pipe closes.
      if (orphaned(s)) {
        end_of_stream(s);
        return;
      }
      if (destination* d = congested(s)) {
        s.parked = true;
        d->parked.push_back(&s);
        return;
      }
      const ssize_t r = ::read(s.pipe->native_handle(), scratch.get(), scratch_size);
      if (r > 0) {
        s.bytes += static_cast<std::uint64_t>(r);
        st.bytes_read += static_cast<std::uint64_t>(r);
        chunk_time.reset();
        consumer c{*this, s};
        s.assembler.feed(std::string_view(scratch.get(), static_cast<std::size_t>(r)), c);
        after_feed(s);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN) {
        wait_readable(s);
        return;
      }
      end_of_stream(s);  // 0, or a read error (EIO): nothing more will come
      return;
    }
    asio::post(io, [weak = weak_from_this(), sp = &s] {
      if (auto self = weak.lock()) self->try_read(*sp);
    });
  }

  void end_of_stream(stream_state& s) {
    chunk_time.reset();
    consumer c{*this, s};
    s.assembler.finish(c);
    s.eof = true;
    s.quiet.reset();  // cancels a pending quiet-time wait
    // A shown line that will never end: what waited behind it goes out now, on a new line.
    if (s.terminal != nullptr && s.terminal->open_shown && s.terminal->open_line == &s) {
      release_held(*s.terminal);
    }
    s.pipe.reset();  // closes the read end
    --st.streams_open;
    if (s.file) {
      ::close(s.file->owned_fd);
      s.file->owned_fd = -1;
      s.file->fd = -1;
    }
    if (s.on_eof) {
      auto cb = std::move(s.on_eof);
      if (s.pushed) {
        // Inside the caller's close_stream: run it later, as for a pipe's end (never nested).
        asio::post(io, [weak = weak_from_this(), cb = std::move(cb), n = s.bytes] {
          if (weak.lock()) cb(n);  // not after the forwarder is gone, as for pipes
        });
      } else {
        cb(s.bytes);
      }
    }
    check_drain();
  }

  void check_drain() {
    if (!drain_handler || st.streams_open > 0) return;
    for (const auto& d : terminals) {
      if ((d->queued > 0 || !d->held.empty()) && !d->failed) return;
    }
    asio::post(io, std::move(drain_handler));
    drain_handler = nullptr;
  }

  std::size_t pipe_size() const {
    const std::size_t count = std::max<std::size_t>(1, job_size * (opt.merge_stderr ? 1 : 2));
    std::size_t size = (std::size_t{64} << 20) / count;
    size = std::min(size, limits.pipe_size);
    return std::max<std::size_t>(size, 65536);
  }

  static std::uint64_t key_of(std::uint32_t rank, output_stream which) {
    return (std::uint64_t{rank} << 1) | static_cast<std::uint64_t>(which);
  }

  static std::string name_of(std::uint32_t rank, output_stream which) {
    return "rank " + std::to_string(rank) + "'s " + std::string(to_string(which));
  }

  // A new stream for a key not used before (its per-rank file is created now, as mpirun does).
  // Spawned jobs: (first process, size), in order; Open MPI's job number is the index + 2.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> jobs;
  struct label {
    std::uint32_t job = 1;
    std::uint32_t rank = 0;
    std::size_t size = 0;
  };
  label label_of(std::uint32_t rank) const {
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const auto [first, size] = jobs[i];
      if (rank >= first && rank - first < size) {
        return {static_cast<std::uint32_t>(i + 2), rank - first, size};
      }
    }
    return {1, rank, job_size};
  }

  stream_state& add_stream(std::uint32_t rank, output_stream which,
                           std::function<void(std::uint64_t)> on_eof) {
    const std::uint64_t key = key_of(rank, which);
    if (by_key.contains(key)) {
      throw error(errc::internal, "output forwarder: " + name_of(rank, which) + " opened twice");
    }
    auto s = std::make_unique<stream_state>(max_line);
    s->rank = rank;
    s->which = which;
    s->on_eof = std::move(on_eof);
    s->terminal = which == output_stream::out ? out_dest : err_dest;
    const auto l = label_of(rank);
    append_line_prefix(s->tag_line, opt.tag, false, {}, l.rank, which, line_flags{}, l.job);
    append_line_prefix(s->tag_piece, opt.tag, false, {}, l.rank, which, line_flags{false, true},
                       l.job);
    if (!opt.output_dir.empty()) s->file = open_rank_file(rank, which);
    ++st.streams_open;
    by_key.emplace(key, s.get());
    streams.push_back(std::move(s));
    return *streams.back();
  }

  void attach(std::uint32_t rank, output_stream which, int fd,
              std::function<void(std::uint64_t)> on_eof) {
    if (by_key.contains(key_of(rank, which))) ::close(fd);  // owned even when refused
    stream_state& s = add_stream(rank, which, std::move(on_eof));
    ::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(pipe_size()));  // best effort
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);  // our own pipe end
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    s.pipe.emplace(io, fd);
    asio::post(io, [weak = weak_from_this(), sp = &s] {
      if (auto self = weak.lock()) self->try_read(*sp);
    });
  }

  // ---- pushed streams ----------------------------------------------------------------------

  const stream_state& known(std::uint32_t rank, output_stream which) const {
    const auto it = by_key.find(key_of(rank, which));
    if (it == by_key.end()) {
      throw error(errc::internal,
                  "output forwarder: " + name_of(rank, which) + " was never opened");
    }
    return *it->second;
  }

  // An open pushed stream, or errc::internal (`what` names the call for the message).
  stream_state& open_pushed(std::uint32_t rank, output_stream which, const char* what) {
    const auto it = by_key.find(key_of(rank, which));
    if (it == by_key.end() || !it->second->pushed || it->second->eof) {
      const char* why = it == by_key.end()    ? "was never opened"
                        : !it->second->pushed ? "is read from a pipe"
                                              : "is closed";
      throw error(errc::internal, std::string("output forwarder: ") + what + " " +
                                      name_of(rank, which) + ", which " + why);
    }
    return *it->second;
  }

  void open_stream(std::uint32_t rank, output_stream which,
                   std::function<void(std::uint64_t)> on_eof) {
    add_stream(rank, which, std::move(on_eof)).pushed = true;
  }

  void push(std::uint32_t rank, output_stream which, std::span<const char> bytes) {
    stream_state& s = open_pushed(rank, which, "push to");
    if (bytes.empty()) return;
    s.bytes += bytes.size();
    st.bytes_read += bytes.size();
    if (orphaned(s)) {  // nowhere to go: do not even assemble lines
      st.bytes_discarded += bytes.size();
      return;
    }
    chunk_time.reset();
    consumer c{*this, s};
    s.assembler.feed(std::string_view(bytes.data(), bytes.size()), c);
    after_feed(s);
  }

  void close_stream(std::uint32_t rank, output_stream which) {
    end_of_stream(open_pushed(rank, which, "close of"));
  }

  bool congested(std::uint32_t rank, output_stream which) const {
    const destination* d = known(rank, which).terminal;
    return d != nullptr && d->over && !d->failed;
  }

  std::unique_ptr<destination> open_rank_file(std::uint32_t rank, output_stream which) {
    auto d = std::make_unique<destination>();
    const auto l = label_of(rank);
    const std::string dir =
        // A spawned job keeps its job directory also with nojobid: DIR/rank.0 is the first job's.
        rank_directory(opt.output_dir, l.rank, l.size, !opt.output_dir_nojobid || l.job != 1,
                       l.job);
    d->name = "'" + dir + "/" + std::string(to_string(which)) + "'";
    d->format = (opt.tag || opt.timestamp) ? format_mode::text : format_mode::raw;
    d->counts = false;
    // Walked from the held directories: never through a link, never into another user's
    // directory (safe_path.hpp). A refusal here means something changed since the check at the
    // start (or a spawned job's directory is not ours): the file is skipped, said once.
    path_problem p;
    const safe_dir* job_dir = &first_job_dir;
    if (l.job != 1) {
      auto it = job_dirs.find(l.job);
      if (it == job_dirs.end() || !it->second) {
        auto made = open_below(base_dir, std::to_string(l.job), true, p);
        it = job_dirs.insert_or_assign(l.job, std::move(made)).first;
      }
      job_dir = &it->second;
    }
    int fd = -1;
    if (*job_dir) {
      const safe_dir rank_dir = open_below(*job_dir, rank_name(l.rank, l.size), true, p);
      if (rank_dir) fd = open_file_in(rank_dir, to_string(which), 0644, p);
    }
    if (fd < 0) {
      fail_with(*d, "--output-filename: " + p.message("open") + "; rank " + std::to_string(rank) +
                        "'s " + std::string(to_string(which)) + " is not written to a file");
    } else {
      d->fd = fd;
      d->owned_fd = fd;
    }
    return d;
  }
};

output_forwarder::output_forwarder(asio::io_context& io, output_options options,
                                   std::size_t job_size, forwarder_limits limits)
    : impl_(std::make_shared<impl>(io, std::move(options), job_size, limits)) {}

output_forwarder::~output_forwarder() = default;

void output_forwarder::add_job(std::uint32_t first, std::uint32_t size) {
  impl_->jobs.emplace_back(first, size);
}

void output_forwarder::attach(std::uint32_t rank, output_stream stream, int read_fd,
                              std::function<void(std::uint64_t)> on_eof) {
  impl_->attach(rank, stream, read_fd, std::move(on_eof));
}

void output_forwarder::open_stream(std::uint32_t rank, output_stream stream,
                                   std::function<void(std::uint64_t)> on_eof) {
  impl_->open_stream(rank, stream, std::move(on_eof));
}

void output_forwarder::push(std::uint32_t rank, output_stream stream, std::span<const char> bytes) {
  impl_->push(rank, stream, bytes);
}

void output_forwarder::close_stream(std::uint32_t rank, output_stream stream) {
  impl_->close_stream(rank, stream);
}

bool output_forwarder::congested(std::uint32_t rank, output_stream stream) const {
  return impl_->congested(rank, stream);
}

bool output_forwarder::discarding(std::uint32_t rank, output_stream stream) const {
  return impl_->orphaned(impl_->known(rank, stream));
}

void output_forwarder::set_resume_callback(std::function<void()> f) {
  impl_->resume_callback = std::move(f);
}

void output_forwarder::async_drain(std::function<void()> handler) {
  impl_->drain_handler = std::move(handler);
  impl_->check_drain();
}

output_forwarder::statistics output_forwarder::stats() const {
  return impl_->st;
}

}  // namespace pm::io
