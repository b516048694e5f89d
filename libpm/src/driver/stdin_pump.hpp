// stdin_pump: stdin for a rank on another host, read here and handed to the launcher machine as
// far as the host's link credit allows (a rank that does not read its stdin stops the reading
// here). A pipe or a terminal is read when it is readable; a file is read straight on. Decides
// nothing about the job. Not thread-safe.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "link/socket.hpp"

namespace pm::driver {

struct stdin_pump_hooks {
  std::function<std::uint64_t()> credit;  ///< bytes the link takes now
  std::function<bool()> open;             ///< false: nothing will be taken any more
  std::function<void(std::span<const std::uint8_t>)> bytes;
  std::function<void()> ended;
};

class stdin_pump {
 public:
  /// Reads a private duplicate of `source` (the launcher's own description stays as it was).
  stdin_pump(boost::asio::io_context& io, std::uint32_t host, std::uint32_t rank, int source,
             stdin_pump_hooks hooks);
  ~stdin_pump();
  stdin_pump(const stdin_pump&) = delete;
  stdin_pump& operator=(const stdin_pump&) = delete;

  std::uint32_t host() const noexcept { return host_; }
  std::uint32_t rank() const noexcept { return rank_; }
  /// Read and hand over what the credit allows; called again when credit comes back.
  void pump();

 private:
  boost::asio::io_context& io_;
  std::uint32_t host_;
  std::uint32_t rank_;
  stdin_pump_hooks hooks_;
  link::owned_fd fd_;
  std::optional<boost::asio::posix::stream_descriptor> waiter_;  // pipes and ttys; none: a file
  std::vector<std::uint8_t> buffer_ = std::vector<std::uint8_t>(std::size_t{64} << 10);
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool waiting_ = false;
  bool done_ = false;
};

}  // namespace pm::driver
