// Writing to an output destination (output_forwarder.hpp): at once where it takes the bytes,
// queued where it is full (a non-blocking pipe or terminal) until it can take more, held behind a
// prompt's shown line in raw mode; a failed destination discards, a congested one pauses its
// producers until its queue has drained to half.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "io/output_forwarder.hpp"
#include "io/output_forwarder_impl.hpp"
#include "io/sigpipe_guard.hpp"

namespace pm::io {

namespace {

std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

}  // namespace

// ---- writing -----------------------------------------------------------------------------
void output_forwarder::impl::fail(destination& d, int e) {
  fail_with(d, "cannot write to " + d.name + ": " + errno_text(e) +
                   "; the ranks' further output to it is discarded");
}

void output_forwarder::impl::fail_with(destination& d, const std::string& message) {
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
void output_forwarder::impl::write_blocking(destination& d, iovec* iov, int n) {
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
void output_forwarder::impl::advance(iovec*& iov, int& n, std::size_t done) {
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

void output_forwarder::impl::write(destination& d, const stream_state& s, const slice* parts,
                                   int count, bool ends_line) {
  write_as(d, &s, parts, count, ends_line);
}

// Raw mode: the held output goes out once the shown line has ended (or must be cut).
void output_forwarder::impl::release_held(destination& d) {
  d.open_shown = false;
  if (d.held.empty()) return;
  const std::string held = std::move(d.held);
  d.held.clear();
  const stream_state* who = std::exchange(d.held_open, nullptr);
  const slice parts[] = {{held.data(), held.size()}};
  write_as(d, who, parts, 1, who == nullptr);
}

// `who`: the stream the bytes come from (nullptr: complete lines of held output).
void output_forwarder::impl::write_as(destination& d, const stream_state* who, const slice* parts,
                                      int count, bool ends_line) {
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

void output_forwarder::impl::write_now(destination& d, const stream_state* who, const slice* parts,
                                       int count, bool ends_line) {
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

void output_forwarder::impl::wait_writable(destination& d) {
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

void output_forwarder::impl::flush(destination& d) {
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
void output_forwarder::impl::leave_over(destination& d) {
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

}  // namespace pm::io
