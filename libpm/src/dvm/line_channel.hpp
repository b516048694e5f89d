// line_channel: one JSON object a line over a stream descriptor, on an io_context (the DVM's
// channels: json_lines.hpp). Reads until the peer ends or sends something that is not an object
// of at most line_limit bytes; writes queue and go out in order without blocking the loop.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dvm/json_lines.hpp"
#include "io/sigpipe_guard.hpp"

namespace pm::dvm_parts {

class line_channel : public std::enable_shared_from_this<line_channel> {
 public:
  /// Takes `fd` over (closed with the channel).
  line_channel(boost::asio::io_context& io, int fd);
  ~line_channel();
  line_channel(const line_channel&) = delete;
  line_channel& operator=(const line_channel&) = delete;

  /// Starts reading: `on_object` for each line, then `on_end` once, with "" for the peer's end or
  /// one line naming what was wrong. Neither runs after close().
  void start(std::function<void(const nlohmann::json&)> on_object,
             std::function<void(const std::string& problem)> on_end);
  void send(const nlohmann::json& doc);
  /// Stops reading and closes once what was queued is written.
  void close();
  bool open() const noexcept { return !closed_; }
  int native_handle() { return sd_.native_handle(); }

 private:
  void read();
  void write();
  void finish(const std::string& problem);

  boost::asio::posix::stream_descriptor sd_;
  std::array<char, 16384> buf_{};
  line_buffer lines_;
  std::string outbox_, writing_;
  std::size_t written_ = 0;                      // of writing_
  bool guard_sigpipe_ = !io::sigpipe_ignored();  // (io/sigpipe_guard.hpp)
  bool closed_ = false, ended_ = false;
  std::function<void(const nlohmann::json&)> on_object_;
  std::function<void(const std::string&)> on_end_;
};

}  // namespace pm::dvm_parts
