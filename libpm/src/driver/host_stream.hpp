// host_stream: the bytes of one host's agent link on the job's io_context, for the launcher
// machine (launch/launcher.hpp), which owns the link itself. It holds the descriptors a transport
// opened, reads what arrives (with the descriptors a local agent passes) and hands it over,
// writes the machine's output for the host when asked, and runs the link's deadline timer. It
// decides nothing. Each open of the host's stream is a new generation: callbacks of an older
// one (a transport answering late) are dropped, their descriptors closed. Not thread-safe.
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

#include "link/socket.hpp"
#include "pm/transport.hpp"

namespace pm::launch {
class launcher;
}

namespace pm::driver {

struct host_stream_hooks {
  /// Bytes arrived (valid during the call).
  std::function<void(std::span<const std::uint8_t> bytes)> received;
  /// The stream ended (`why` empty: end-of-file) or broke.
  std::function<void(const std::string& why)> broken;
  /// The link's deadline (arm) came.
  std::function<void()> tick;
};

class host_stream : public std::enable_shared_from_this<host_stream> {
 public:
  using clock = std::chrono::steady_clock;

  host_stream(boost::asio::io_context& io, std::uint32_t host, launch::launcher& machine,
              host_stream_hooks hooks);
  ~host_stream();
  host_stream(const host_stream&) = delete;
  host_stream& operator=(const host_stream&) = delete;

  /// A new stream for the host is being opened: returns its generation (the old one is closed).
  std::uint64_t begin();
  bool current(std::uint64_t generation) const noexcept { return generation == generation_; }
  /// The transport opened it. False (and the descriptors closed) when it is not current.
  bool attach(std::uint64_t generation, agent_stream stream);
  void start_reading();
  /// Write what the machine holds for the host, as far as the stream takes it now (then when it
  /// becomes writable).
  void flush();
  void attach_fds(std::uint64_t offset, std::vector<link::owned_fd> fds);
  /// The first `n` descriptors received; throws pm::error if fewer arrived.
  std::vector<link::owned_fd> take_fds(std::uint32_t n);
  void arm(std::optional<clock::time_point> at);
  /// Over: what the machine still holds is written if the stream takes it at once; the
  /// descriptors close (the agent, or what carries its stream, sees end-of-file).
  void close();

 private:
  void start_read();
  void on_readable();
  void after_write_failure(const std::string& err);
  void close_descriptors();
  link::stream_writer::output_queue queue();

  boost::asio::io_context& io_;
  std::uint32_t host_;
  launch::launcher& machine_;
  host_stream_hooks hooks_;
  std::uint64_t generation_ = 0;
  link::stream_fds fds_;
  std::optional<boost::asio::posix::stream_descriptor> in_;
  std::optional<boost::asio::posix::stream_descriptor> out_;  // empty when in_ is a socket
  boost::asio::steady_timer timer_;
  std::optional<clock::time_point> armed_for_;
  std::unique_ptr<link::stream_writer> writer_;
  std::unique_ptr<link::stream_reader> reader_;
  bool attached_ = false;
  bool writing_ = false;
  bool write_failed_ = false;
  bool closed_ = false;
};

}  // namespace pm::driver
