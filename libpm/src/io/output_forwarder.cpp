// The output forwarder (output_forwarder.hpp): its destinations and streams made (the terminal,
// per-rank files under --output-filename), the ranks' pipes read, pushed streams (a remote rank's
// output from the agent link), and the drain. A stream's lines are formatted in
// output_forwarder_lines.cpp and written in output_forwarder_write.cpp.
#include "io/output_forwarder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/output_forwarder_impl.hpp"
#include "io/safe_path.hpp"
#include "io/sigpipe_guard.hpp"
#include "pm/error.hpp"

namespace pm::io {

output_forwarder::impl::impl(asio::io_context& io_, output_options options, std::size_t size,
                             forwarder_limits lim)
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
void output_forwarder::impl::open_output_directories() {
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

std::string output_forwarder::impl::rank_name(std::uint32_t rank, std::size_t size) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank.%0*u", static_cast<int>(rank_width(size)), rank);
  return buf;
}

bool output_forwarder::impl::same_file(int a, int b) {
  if (a == b) return true;
  struct stat sa {
  }, sb{};
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

destination* output_forwarder::impl::make_fd_destination(int fd, std::string name, format_mode fm) {
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

// ---- reading -----------------------------------------------------------------------------
destination* output_forwarder::impl::congested(const stream_state& s) const {
  destination* d = s.terminal;
  if (d != nullptr && !d->failed && !d->blocking && d->queued >= limits.queue_limit) return d;
  return nullptr;
}

void output_forwarder::impl::resume_parked(destination& d) {
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

void output_forwarder::impl::wait_readable(stream_state& s) {
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
bool output_forwarder::impl::orphaned(const stream_state& s) const {
  return !opt.sink && !s.file && (s.terminal == nullptr || s.terminal->failed);
}

void output_forwarder::impl::try_read(stream_state& s) {
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

void output_forwarder::impl::end_of_stream(stream_state& s) {
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

void output_forwarder::impl::check_drain() {
  if (!drain_handler || st.streams_open > 0) return;
  for (const auto& d : terminals) {
    if ((d->queued > 0 || !d->held.empty()) && !d->failed) return;
  }
  asio::post(io, std::move(drain_handler));
  drain_handler = nullptr;
}

std::size_t output_forwarder::impl::pipe_size() const {
  const std::size_t count = std::max<std::size_t>(1, job_size * (opt.merge_stderr ? 1 : 2));
  std::size_t size = (std::size_t{64} << 20) / count;
  size = std::min(size, limits.pipe_size);
  return std::max<std::size_t>(size, 65536);
}

std::uint64_t output_forwarder::impl::key_of(std::uint32_t rank, output_stream which) {
  return (std::uint64_t{rank} << 1) | static_cast<std::uint64_t>(which);
}

std::string output_forwarder::impl::name_of(std::uint32_t rank, output_stream which) {
  return "rank " + std::to_string(rank) + "'s " + std::string(to_string(which));
}

output_forwarder::impl::label output_forwarder::impl::label_of(std::uint32_t rank) const {
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const auto [first, size] = jobs[i];
    if (rank >= first && rank - first < size) {
      return {static_cast<std::uint32_t>(i + 2), rank - first, size};
    }
  }
  return {1, rank, job_size};
}

// A new stream for a key not used before (its per-rank file is created now, as mpirun does).
stream_state& output_forwarder::impl::add_stream(std::uint32_t rank, output_stream which,
                                                 std::function<void(std::uint64_t)> on_eof) {
  const std::uint64_t key = key_of(rank, which);
  bool again = false;
  if (const auto it = by_key.find(key); it != by_key.end()) {
    // A restarted rank (docs/resilience.md) opens its streams again once the earlier ones ended;
    // the ended one stays in `streams` (posted reads may still name it).
    if (!it->second->eof) {
      throw error(errc::internal, "output forwarder: " + name_of(rank, which) + " opened twice");
    }
    by_key.erase(it);
    again = true;
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
  if (!opt.output_dir.empty()) s->file = open_rank_file(rank, which, again);
  ++st.streams_open;
  by_key.emplace(key, s.get());
  streams.push_back(std::move(s));
  return *streams.back();
}

void output_forwarder::impl::attach(std::uint32_t rank, output_stream which, int fd,
                                    std::function<void(std::uint64_t)> on_eof) {
  if (const auto it = by_key.find(key_of(rank, which)); it != by_key.end() && !it->second->eof) {
    ::close(fd);  // owned even when refused
  }
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

void output_forwarder::impl::abandon(std::uint32_t rank, output_stream which) {
  const auto it = by_key.find(key_of(rank, which));
  if (it == by_key.end() || it->second->pushed || it->second->eof) return;
  stream_state& s = *it->second;
  // What is in the pipe now, at most its size: a writer still running is not followed.
  for (std::size_t taken = 0; taken < pipe_size() && !orphaned(s);) {
    const ssize_t r = ::read(s.pipe->native_handle(), scratch.get(), scratch_size);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    taken += static_cast<std::size_t>(r);
    s.bytes += static_cast<std::uint64_t>(r);
    st.bytes_read += static_cast<std::uint64_t>(r);
    consumer c{*this, s};
    s.assembler.feed(std::string_view(scratch.get(), static_cast<std::size_t>(r)), c);
    after_feed(s);
  }
  // A parked stream stays in its destination's list: resuming it finds it ended.
  end_of_stream(s);
}

// ---- pushed streams ----------------------------------------------------------------------
const stream_state& output_forwarder::impl::known(std::uint32_t rank, output_stream which) const {
  const auto it = by_key.find(key_of(rank, which));
  if (it == by_key.end()) {
    throw error(errc::internal, "output forwarder: " + name_of(rank, which) + " was never opened");
  }
  return *it->second;
}

// An open pushed stream, or errc::internal (`what` names the call for the message).
stream_state& output_forwarder::impl::open_pushed(std::uint32_t rank, output_stream which,
                                                  const char* what) {
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

void output_forwarder::impl::open_stream(std::uint32_t rank, output_stream which,
                                         std::function<void(std::uint64_t)> on_eof) {
  add_stream(rank, which, std::move(on_eof)).pushed = true;
}

void output_forwarder::impl::push(std::uint32_t rank, output_stream which,
                                  std::span<const char> bytes) {
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

void output_forwarder::impl::close_stream(std::uint32_t rank, output_stream which) {
  end_of_stream(open_pushed(rank, which, "close of"));
}

bool output_forwarder::impl::congested(std::uint32_t rank, output_stream which) const {
  const destination* d = known(rank, which).terminal;
  return d != nullptr && d->over && !d->failed;
}

std::unique_ptr<destination> output_forwarder::impl::open_rank_file(std::uint32_t rank,
                                                                    output_stream which,
                                                                    bool append) {
  auto d = std::make_unique<destination>();
  const auto l = label_of(rank);
  const std::string dir =
      // A spawned job keeps its job directory also with nojobid: DIR/rank.0 is the first job's.
      rank_directory(opt.output_dir, l.rank, l.size, !opt.output_dir_nojobid || l.job != 1, l.job);
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
    if (rank_dir) fd = open_file_in(rank_dir, to_string(which), 0644, p, append);
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

output_forwarder::output_forwarder(asio::io_context& io, output_options options,
                                   std::size_t job_size, forwarder_limits limits)
    : impl_(std::make_shared<impl>(io, std::move(options), job_size, limits)) {}

output_forwarder::~output_forwarder() = default;

void output_forwarder::add_job(std::uint32_t first, std::uint32_t size) {
  impl_->jobs.emplace_back(first, size);
}

void output_forwarder::abandon(std::uint32_t rank, output_stream stream) {
  impl_->abandon(rank, stream);
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

void output_forwarder::give_up() {
  for (auto& d : impl_->terminals) {
    // One that holds output: a terminal that is read holds next to nothing at any moment.
    if (d->failed || d->blocking || d->queued == 0) continue;
    impl_->fail_with(*d, std::to_string(d->queued) +
                             " bytes of the ranks' output were not written: " + d->name +
                             " is not being read; the rest of it is discarded");
  }
  impl_->check_drain();
}

output_forwarder::statistics output_forwarder::stats() const {
  return impl_->st;
}

}  // namespace pm::io
