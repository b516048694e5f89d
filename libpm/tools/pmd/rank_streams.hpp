// The ranks' standard streams where they cross the link as frames (agents on other hosts): each
// forwarded output pipe is read as far as the link's credit allows and its end reported; each
// stdin pipe is fed from the launcher's input frames, acknowledged as the rank takes them. pmd's
// byte mover: it decides nothing the agent machine would (docs/agent.md, "Lifecycle" 4).
// Driven by the owner's epoll set; one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "event_set.hpp"
#include "launcher_link.hpp"
#include "link/socket.hpp"
#include "pm/output.hpp"

namespace pmd {

class rank_streams {
 public:
  /// A forwarded pipe ended after `bytes` bytes, all sent.
  using ended_fn =
      std::function<void(std::uint32_t rank, pm::output_stream s, std::uint64_t bytes)>;
  /// Epoll tags: the kind in the top byte (the owner routes these kinds here), the rank below.
  static constexpr std::uint64_t tag_stdout = 5ull << 56;
  static constexpr std::uint64_t tag_stderr = 6ull << 56;
  static constexpr std::uint64_t tag_stdin = 7ull << 56;
  static bool owns_tag(std::uint64_t tag) {
    const auto kind = tag & (0xffull << 56);
    return kind == tag_stdout || kind == tag_stderr || kind == tag_stdin;
  }

  /// Output goes out as `link`'s frames as far as its credit allows; input is acknowledged to it
  /// as the ranks take it.
  rank_streams(event_set& events, launcher_link& link, ended_fn ended)
      : events_(events), link_(link), ended_(std::move(ended)) {}

  /// A rank's output read end to forward (non-blocking from now on).
  void forward(std::uint32_t rank, pm::output_stream s, pm::link::owned_fd fd);
  /// A rank's stdin write end, fed from input frames.
  void feed_input(std::uint32_t rank, pm::link::owned_fd fd);
  void on_event(std::uint64_t tag);
  /// Stdin bytes for a rank: written as far as it takes them, the rest when it is writable.
  void input(std::uint32_t rank, std::span<const std::uint8_t> bytes);
  /// The launcher's input for the rank ended: close its pipe once written.
  void close_input(std::uint32_t rank);
  /// Nothing receives this stream any more: its read end closes (the rank gets SIGPIPE at its
  /// next write) and its end is reported with the bytes sent so far.
  void close_output(std::uint32_t rank, pm::output_stream stream);
  /// The link granted credit: read the paused pipes again.
  void resume();
  /// The link is gone: stop reading output (the ranks block in write() until they are ended).
  void stop_reading();
  /// A restart is complete (pm::agent::forget_ranks): every pipe of the ranks before goes (their
  /// output ended already; input they did not take is acknowledged and dropped).
  void forget_ranks();
  /// --enable-recovery (pm::agent::forget_rank): the pipes of one rank go (its forwarded output
  /// ended already; input it did not take is acknowledged and dropped).
  void forget_rank(std::uint32_t rank);

 private:
  // A rank's stdin fed from the launcher's input frames: the write end of its pipe.
  struct input_pipe {
    pm::link::owned_fd fd;
    std::string pending;   // received, not yet written (at most the link's window)
    bool closing = false;  // input_closed came: close once pending is written
    bool watched = false;
  };
  // A forwarded output pipe of a rank.
  struct output_pipe {
    pm::link::owned_fd fd;
    std::uint64_t bytes = 0;
    bool watched = false;
  };
  static std::uint64_t key(std::uint32_t rank, pm::output_stream s) {
    return (std::uint64_t{rank} << 1) | (s == pm::output_stream::err ? 1 : 0);
  }
  void on_output(std::uint32_t rank, pm::output_stream stream);
  void write_input(std::uint32_t rank);

  event_set& events_;
  launcher_link& link_;
  ended_fn ended_;
  std::unordered_map<std::uint64_t, output_pipe> forwarded_;  // key: rank << 1 | (stream == err)
  std::vector<std::uint64_t> paused_;                         // forwarded pipes waiting for credit
  std::unordered_map<std::uint32_t, input_pipe> inputs_;      // ranks whose stdin comes as frames
  // Forwarded output is read through this; not zero-filled, so that a pmd whose ranks' output
  // goes straight to the launcher (every local job) never touches it.
  static constexpr std::size_t buffer_size = std::size_t{256} << 10;
  std::unique_ptr<char[]> buffer_{new char[buffer_size]};
};

}  // namespace pmd
