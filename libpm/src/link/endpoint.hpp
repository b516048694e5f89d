// One end of an agent link, as a sans-I/O machine: bytes in, events and bytes out, time passed in.
//
// The same class serves the launcher's end (one per host) and the agent's end, whatever carries
// the bytes: a Unix socket to a local pmd, ssh's stdin/stdout, a TCP connection, the simulator's
// virtual stream. It owns everything the link itself decides (docs/agent-link.md):
//   - the handshake: the magic (text before it, e.g. a login shell's greeting, is skipped up to a
//     limit), then a hello each way carrying the protocol version and the job's nonce; another
//     version or nonce ends the link with one clear reason;
//   - heartbeats: after the handshake, a heartbeat each interval (a few bytes; cheaper than
//     tracking what else was sent);
//     silence from the peer for longer than the silence timeout ends the link ("no word from the
//     agent for 2.0 s"), except while the peer said it is suspended (its launcher stopped by ^Z);
//   - a deadline for the peer's hello (a host that never answers);
//   - flow control of data frames (output toward the launcher, stdin toward the agent): a sender
//     may have at most `send_window` bytes unacknowledged; the receiver acknowledges what it has
//     consumed. So output back-pressure stops the agent reading the ranks' pipes, while control
//     messages and heartbeats keep flowing both ways;
//   - which messages each side may send; anything else, or garbage, ends the link.
// It never reads a clock, touches a descriptor or sleeps. Drivers: call start(), feed what arrives
// to received() / closed(), call tick() at deadline(), write output() and then consume_output().
// After a link_down event the endpoint ignores input and sends nothing more. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "link/frame.hpp"
#include "link/messages.hpp"

namespace pm::link {

using link_time = std::chrono::nanoseconds;

enum class role : std::uint8_t { launcher, agent };

struct endpoint_options {
  role self = role::launcher;
  /// The job's nonce: this side's hello carries it, and the peer's must carry the same.
  std::uint64_t nonce = 0;
  /// The peer's hello must arrive within this long of start() (0: no deadline).
  std::chrono::milliseconds hello_timeout{0};
  /// After the handshake, send a heartbeat this often (0: never).
  std::chrono::milliseconds heartbeat_interval{0};
  /// Nothing heard from the peer for this long ends the link (0: never).
  std::chrono::milliseconds silence_timeout{0};
  /// Bytes before the peer's magic that are skipped as noise; more end the link.
  std::size_t max_noise = std::size_t{64} << 10;
  /// Data bytes (output or input frames) this side may have sent and not had acknowledged.
  std::uint64_t send_window = std::uint64_t{4} << 20;
  /// Received data is acknowledged once this much was consumed (must stay well below the peer's
  /// window, or the peer would wait for an ack that never comes).
  std::uint64_t ack_batch = std::uint64_t{64} << 10;
};

// ---- events ----
/// The peer's hello arrived and matched (version and nonce).
struct peer_greeted {
  hello peer;
};
/// A control message other than the link's own (hello, heartbeat, ack); suspend and resume
/// come too, after the link acted on them.
struct message_in {
  message msg;
  std::uint32_t fds = 0;
};
/// Output bytes of a rank (launcher side). `bytes` is valid until the next call to received(),
/// as long as the bytes given to received() are (it may point into them).
struct output_in {
  std::uint32_t rank;
  output_stream stream;
  std::span<const std::uint8_t> bytes;
};
/// Stdin bytes for a rank (agent side). Valid as output_in's.
struct input_in {
  std::uint32_t rank;
  std::span<const std::uint8_t> bytes;
};
/// Bytes of `host`'s link relayed by this link's agent (a relay frame; launcher side: the agent
/// side gets them as a child_data message). Valid as output_in's: the launcher feeds them to that
/// host's endpoint in place, however deep the tree nests them.
struct relay_in {
  std::uint32_t host;
  std::span<const std::uint8_t> bytes;
};
/// An acknowledgement gave this side credit to send data again (after credit() was exhausted).
struct credit_granted {};
/// The link is over: closed, broken, garbage, silence, a wrong peer. One line, no prefix.
struct link_down {
  std::string reason;
};
using link_event = std::variant<peer_greeted, message_in, output_in, input_in, relay_in,
                                credit_granted, link_down>;

class endpoint {
 public:
  explicit endpoint(endpoint_options options);

  /// Queues the magic and this side's hello (its version and nonce are filled in), and starts the
  /// hello deadline.
  void start(link_time now, hello mine);

  /// The stream to the peer opened (bytes could be queued before): the hello deadline counts from
  /// here, so a host waiting for its turn to be started (a cap on concurrent ssh) is not lost.
  void stream_opened(link_time now) noexcept {
    started_at_ = now;
    last_heard_ = now;
  }

  /// Bytes from the peer.
  void received(link_time now, std::span<const std::uint8_t> bytes, std::vector<link_event>& out);
  /// The peer's stream ended (end-of-file) or broke (`why` non-empty: the error).
  void closed(link_time now, std::vector<link_event>& out, const std::string& why = {});
  /// Someone else timed the peer (a tree parent, for a relayed link: heartbeats go hop by hop)
  /// and heard nothing for `quiet`: the link ends as this side's own silence timeout ends it.
  void peer_silent(std::chrono::nanoseconds quiet, std::vector<link_event>& out);
  /// Timers: heartbeats due, the hello deadline, silence. Call at or after deadline().
  void tick(link_time now, std::vector<link_event>& out);
  /// When tick() should be called next (nothing: no timer is needed).
  std::optional<link_time> deadline() const;

  /// Queues a control message. Returns the stream offset of the frame's first byte (where its
  /// descriptors must be attached, socket.hpp). Nothing is queued after the link went down.
  std::uint64_t send(const message& m, std::uint32_t fds = 0);
  /// Queues bytes of `host`'s link to relay (child_data, without a copy into a message first).
  void send_relay(std::uint32_t host, std::span<const std::uint8_t> bytes);
  /// Queues output (agent) or input (launcher) bytes. At most credit() bytes, split into frames
  /// here. Throws pm::error(internal) if asked for more than the credit.
  void send_output(std::uint32_t rank, output_stream stream, std::span<const std::uint8_t> bytes);
  void send_input(std::uint32_t rank, std::span<const std::uint8_t> bytes);
  /// Data bytes that may be sent now.
  std::uint64_t credit() const noexcept;
  /// This side consumed `bytes` of received data: the peer may send that much more.
  void acknowledge(std::uint64_t bytes);

  /// Sets the heartbeat interval and silence timeout after construction (an agent learns them
  /// from the job's setup, after the handshake); the silence clock restarts at `now`.
  void set_heartbeats(link_time now, std::chrono::milliseconds interval,
                      std::chrono::milliseconds silence);

  /// This side is about to be stopped (^Z) / continues: tells the peer, and restarts the silence
  /// clock on resume (the peer's heartbeats could not be read while stopped).
  void suspend(link_time now);
  void resume(link_time now);

  /// Bytes to write to the peer, and how many of them were written.
  std::span<const std::uint8_t> output() const noexcept;
  void consume_output(std::size_t n);
  /// Bytes consumed so far (the offset of output().front()).
  std::uint64_t output_offset() const noexcept { return consumed_; }
  /// Frees the capacity of buffers that hold nothing now (the output once it was all consumed,
  /// the input once no partial frame is left). For drivers of very many mostly idle links (the
  /// simulator's 100,000 hosts), whose buffers would otherwise each keep their largest size.
  void shrink();

  bool greeted() const noexcept { return greeted_; }
  bool down() const noexcept { return down_; }
  /// What the peer printed before the magic (for diagnostics when the link never came up).
  std::string noise_text() const { return scanner_.noise_text(); }
  const endpoint_options& options() const noexcept { return opts_; }

 private:
  void fail(std::vector<link_event>& out, std::string reason);
  void handle(link_time now, const frame& f, std::vector<link_event>& out);
  void handle_message(link_time now, envelope e, std::vector<link_event>& out);
  void queue_control(const message& m, std::uint32_t fds);
  const char* peer_name() const noexcept;

  endpoint_options opts_;
  preamble_scanner scanner_;
  frame_decoder decoder_;
  std::vector<std::uint8_t> out_;
  std::size_t out_start_ = 0;
  std::uint64_t consumed_ = 0;
  bool started_ = false;
  bool greeted_ = false;
  bool down_ = false;
  bool peer_suspended_ = false;
  bool credit_exhausted_ = false;  // credit() hit 0: tell the driver when it opens again
  link_time started_at_{0};
  link_time last_heard_{0};
  link_time next_beat_{0};
  std::uint64_t sent_data_ = 0;   // data bytes queued
  std::uint64_t acked_data_ = 0;  // of those, acknowledged by the peer
  std::uint64_t unacked_in_ = 0;  // received data consumed but not yet acknowledged
};

}  // namespace pm::link
