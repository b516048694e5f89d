#include "rank_streams.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace pmd {

void rank_streams::forward(std::uint32_t rank, pm::output_stream s, pm::link::owned_fd fd) {
  if (!fd) return;
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
  auto& p = forwarded_[key(rank, s)];
  p.fd = std::move(fd);
  p.watched = true;
  events_.watch(p.fd.get(), EPOLLIN,
                (s == pm::output_stream::out ? tag_stdout : tag_stderr) | rank);
}

void rank_streams::feed_input(std::uint32_t rank, pm::link::owned_fd fd) {
  inputs_[rank].fd = std::move(fd);
}

void rank_streams::on_event(std::uint64_t tag) {
  const auto rank = static_cast<std::uint32_t>(tag & 0xffffffffull);
  const auto kind = tag & (0xffull << 56);
  if (kind == tag_stdout) {
    on_output(rank, pm::output_stream::out);
  } else if (kind == tag_stderr) {
    on_output(rank, pm::output_stream::err);
  } else if (kind == tag_stdin) {
    write_input(rank);
  }
}

// A forwarded pipe is readable: send what the link's credit allows; at end-of-stream, say so.
void rank_streams::on_output(std::uint32_t rank, pm::output_stream stream) {
  const auto k = key(rank, stream);
  auto it = forwarded_.find(k);
  if (it == forwarded_.end() || !it->second.fd || !it->second.watched) return;
  auto& p = it->second;
  for (int round = 0; round < 4; ++round) {
    const auto credit = (link_.open() ? link_.endpoint().credit() : 0);
    if (credit == 0) {
      // Back-pressure: the rank blocks in write() until the launcher consumed its output.
      events_.unwatch(p.fd.get());
      p.watched = false;
      paused_.push_back(k);
      return;
    }
    const auto want = std::min<std::size_t>(buffer_size, credit);
    const ssize_t n = ::read(p.fd.get(), buffer_.get(), want);
    if (n > 0) {
      p.bytes += static_cast<std::uint64_t>(n);
      link_.endpoint().send_output(
          rank, stream,
          {reinterpret_cast<const std::uint8_t*>(buffer_.get()), static_cast<std::size_t>(n)});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // End of stream (or a read error: nothing more will come).
    events_.unwatch(p.fd.get());
    const auto bytes = p.bytes;
    forwarded_.erase(it);
    ended_(rank, stream, bytes);
    return;
  }
}

// Acknowledged once written (or dropped: a rank that is gone or closed its stdin), so the launcher
// sends at most the link's window ahead of what the rank reads.
void rank_streams::input(std::uint32_t rank, std::span<const std::uint8_t> bytes) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end() || !it->second.fd) {
    link_.endpoint().acknowledge(bytes.size());
    return;
  }
  it->second.pending.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  write_input(rank);
}

void rank_streams::write_input(std::uint32_t rank) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end()) return;
  auto& in = it->second;
  while (in.fd && !in.pending.empty()) {
    const ssize_t n = ::write(in.fd.get(), in.pending.data(), in.pending.size());
    if (n > 0) {
      link_.endpoint().acknowledge(static_cast<std::uint64_t>(n));
      in.pending.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!in.watched) {
        in.watched = true;
        events_.watch(in.fd.get(), EPOLLOUT, tag_stdin | rank);
      }
      return;
    }
    // EPIPE: the rank closed its stdin or ended; what it did not read is dropped.
    link_.endpoint().acknowledge(in.pending.size());
    in.pending.clear();
    if (in.watched) events_.unwatch(in.fd.get());
    in.fd.reset();
  }
  if (in.pending.empty()) {
    if (in.watched) {
      events_.unwatch(in.fd.get());
      in.watched = false;
    }
    if (in.closing) in.fd.reset();  // end of input: the rank reads end-of-file
  }
}

void rank_streams::close_input(std::uint32_t rank) {
  auto it = inputs_.find(rank);
  if (it == inputs_.end()) return;
  it->second.closing = true;
  write_input(rank);
}

void rank_streams::close_output(std::uint32_t rank, pm::output_stream stream) {
  auto it = forwarded_.find(key(rank, stream));
  if (it == forwarded_.end() || !it->second.fd) return;
  if (it->second.watched) events_.unwatch(it->second.fd.get());
  const auto bytes = it->second.bytes;
  forwarded_.erase(it);  // closes the read end; a paused key left in paused_ finds nothing
  ended_(rank, stream, bytes);
}

void rank_streams::resume() {
  auto keys = std::move(paused_);
  paused_.clear();
  for (const auto k : keys) {
    auto it = forwarded_.find(k);
    if (it == forwarded_.end() || !it->second.fd || it->second.watched) continue;
    it->second.watched = true;
    const auto rank = static_cast<std::uint32_t>(k >> 1);
    const bool err = (k & 1) != 0;
    events_.watch(it->second.fd.get(), EPOLLIN, (err ? tag_stderr : tag_stdout) | rank);
  }
}

// A pipe left in the epoll set would wake epoll_wait at once, forever, as soon as a rank wrote
// (nothing reads it without a link): pmd spun through the grace.
void rank_streams::stop_reading() {
  for (auto& [k, p] : forwarded_) {
    if (p.watched && p.fd) events_.unwatch(p.fd.get());
    p.watched = false;
  }
  paused_.clear();
}

void rank_streams::forget_rank(std::uint32_t rank) {
  for (const auto s : {pm::output_stream::out, pm::output_stream::err}) {
    auto it = forwarded_.find(key(rank, s));
    if (it == forwarded_.end()) continue;
    if (it->second.watched && it->second.fd) events_.unwatch(it->second.fd.get());
    forwarded_.erase(it);
    std::erase(paused_, key(rank, s));
  }
  if (auto it = inputs_.find(rank); it != inputs_.end()) {
    if (!it->second.pending.empty()) link_.endpoint().acknowledge(it->second.pending.size());
    if (it->second.watched && it->second.fd) events_.unwatch(it->second.fd.get());
    inputs_.erase(it);
  }
}

void rank_streams::forget_ranks() {
  for (auto& [k, p] : forwarded_) {
    if (p.watched && p.fd) events_.unwatch(p.fd.get());
  }
  forwarded_.clear();
  paused_.clear();
  for (auto& [rank, in] : inputs_) {
    if (!in.pending.empty()) link_.endpoint().acknowledge(in.pending.size());
    if (in.watched && in.fd) events_.unwatch(in.fd.get());
  }
  inputs_.clear();
}

}  // namespace pmd
