// host_link: a launcher's end of one agent link on an io_context, for tests that talk to a real
// pmd without a whole launcher (local_agent_test). The launcher itself keeps its links in the
// launcher machine (libpm/src/launch) and moves their bytes with driver/host_stream.
//
// It owns a link::endpoint (the protocol: handshake, heartbeats, silence, flow control) and the
// descriptors of the stream a transport opened, and moves bytes between them with Asio; it only
// reports what the endpoint decided. Created before the stream exists, so that the hello, the
// job's setup and the first spawn are queued at once and written as soon as the stream opens (no
// round trip on the launch path). Not thread-safe; callbacks run on the io_context, never nested
// inside a call into the host_link.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "link/endpoint.hpp"
#include "link/socket.hpp"
#include "pm/transport.hpp"

namespace pm::driver {

struct host_link_callbacks {
  /// The agent's hello arrived (version and nonce matched).
  std::function<void(const link::hello& agent)> on_greeted;
  /// A message from the agent, with the descriptors that came with it (local agents only).
  std::function<void(link::message& msg, std::vector<link::owned_fd> fds)> on_message;
  /// Output bytes of a rank; valid during the call. The receiver acknowledges what it consumed.
  std::function<void(std::uint32_t rank, output_stream stream, std::span<const std::uint8_t>)>
      on_output;
  /// The link is over (closed, broken, silent, garbage, wrong peer); one line. Called once, and
  /// not after close().
  std::function<void(std::string reason)> on_down;
  /// The agent acknowledged stdin bytes after credit() had run out: more may be sent.
  std::function<void()> on_credit;
};

class host_link : public std::enable_shared_from_this<host_link> {
 public:
  using clock = std::chrono::steady_clock;

  /// Queues the magic and the launcher's hello at once.
  static std::shared_ptr<host_link> create(boost::asio::io_context& io,
                                           link::endpoint_options options,
                                           host_link_callbacks callbacks, clock::time_point epoch);
  ~host_link();
  host_link(const host_link&) = delete;
  host_link& operator=(const host_link&) = delete;

  /// The transport opened the stream: start moving bytes.
  void attach(agent_stream stream);
  /// Queue a message (descriptors only over a socket stream to a local agent).
  void send(const link::message& m, std::vector<link::owned_fd> fds = {});
  /// This side consumed `bytes` of the agent's output.
  void acknowledge(std::uint64_t bytes);
  /// Stdin bytes for a rank on that host: at most credit() of them.
  void send_input(std::uint32_t rank, std::span<const std::uint8_t> bytes);
  std::uint64_t credit() const noexcept { return down_ || closed_ ? 0 : ep_.credit(); }
  void suspend();
  void resume();
  /// Stop: no more callbacks; queued bytes are written if the stream takes them at once, then the
  /// descriptors are closed (the agent sees end-of-file).
  void close();
  bool down() const noexcept { return down_; }
  bool greeted() const noexcept { return ep_.greeted(); }
  std::int64_t carrier_pid() const noexcept { return pid_; }

 private:
  host_link(boost::asio::io_context& io, link::endpoint_options options,
            host_link_callbacks callbacks, clock::time_point epoch);
  link::link_time now() const { return clock::now() - epoch_; }
  void start_read();
  void on_readable();
  void flush();
  void arm_timer();
  void handle(std::vector<link::link_event>& events);
  void go_down(const std::string& reason);
  void after_write_failure(const std::string& err);
  void close_descriptors();

  boost::asio::io_context& io_;
  link::endpoint ep_;
  host_link_callbacks cb_;
  clock::time_point epoch_;
  link::stream_fds fds_;
  std::optional<boost::asio::posix::stream_descriptor> in_;
  std::optional<boost::asio::posix::stream_descriptor> out_;  // empty when in_ is a socket
  boost::asio::steady_timer timer_;
  std::optional<link::link_time> armed_for_;
  link::stream_writer writer_;
  link::stream_reader reader_;
  std::vector<link::link_event> events_;
  std::int64_t pid_ = 0;
  bool attached_ = false;
  bool writing_ = false;
  bool write_failed_ = false;  // the stream refused a write: read what is left, then down
  bool down_ = false;
  bool closed_ = false;
};

}  // namespace pm::driver
