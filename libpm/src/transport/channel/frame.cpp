#include "transport/channel/frame.hpp"

#include <string>

#include "pm/error.hpp"

namespace pm::channel {

namespace {

std::string mib(std::size_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

void append_frame(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> body) {
  if (body.empty()) throw error(errc::internal, "agent channel: refusing to send an empty frame");
  if (body.size() > max_frame_bytes) {
    throw error(errc::launch, "agent channel: message of " + std::to_string(body.size()) +
                                  " bytes exceeds the " + mib(max_frame_bytes) + " limit");
  }
  const auto n = static_cast<std::uint32_t>(body.size());
  out.push_back(static_cast<std::uint8_t>(n >> 24));
  out.push_back(static_cast<std::uint8_t>(n >> 16));
  out.push_back(static_cast<std::uint8_t>(n >> 8));
  out.push_back(static_cast<std::uint8_t>(n));
  out.insert(out.end(), body.begin(), body.end());
}

void frame_decoder::feed(std::span<const std::uint8_t> bytes) {
  // Compact once the consumed prefix dominates, so a long-lived channel does not grow.
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

std::optional<std::vector<std::uint8_t>> frame_decoder::next() {
  if (buffered() < frame_header_bytes) return std::nullopt;
  const std::uint8_t* p = buffer_.data() + start_;
  const std::uint32_t n = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                          (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
  if (n == 0) throw error(errc::launch, "agent channel: empty frame");
  if (n > max_body_) {
    throw error(errc::launch, "agent channel: frame of " + std::to_string(n) +
                                  " bytes exceeds the " + mib(max_body_) + " limit");
  }
  if (buffered() < frame_header_bytes + n) return std::nullopt;
  std::vector<std::uint8_t> body(p + frame_header_bytes, p + frame_header_bytes + n);
  start_ += frame_header_bytes + n;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  }
  return body;
}

void frame_decoder::finish() const {
  if (buffered() == 0) return;
  if (buffered() < frame_header_bytes) {
    throw error(errc::launch, "agent channel: stream ended inside a frame header (" +
                                  std::to_string(buffered()) + " of 4 bytes)");
  }
  const std::uint8_t* p = buffer_.data() + start_;
  const std::uint32_t n = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                          (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
  throw error(errc::launch, "agent channel: stream ended inside a frame (" +
                                std::to_string(buffered() - frame_header_bytes) + " of " +
                                std::to_string(n) + " bytes)");
}

}  // namespace pm::channel
