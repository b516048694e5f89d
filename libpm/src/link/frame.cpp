#include "link/frame.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "link/codec/wire_codec.hpp"
#include "pm/error.hpp"

namespace pm::link {

namespace {

std::string size_text(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

using codec::fail;

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t n) {
  out.push_back(static_cast<std::uint8_t>(n >> 24));
  out.push_back(static_cast<std::uint8_t>(n >> 16));
  out.push_back(static_cast<std::uint8_t>(n >> 8));
  out.push_back(static_cast<std::uint8_t>(n));
}

std::uint32_t get_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

void check_data(std::span<const std::uint8_t> bytes) {
  if (bytes.empty())
    throw error(errc::internal, "agent link: refusing to send an empty data frame");
  if (bytes.size() > max_data_bytes) {
    throw error(errc::internal, "agent link: data frame of " + std::to_string(bytes.size()) +
                                    " bytes exceeds " + size_text(max_data_bytes));
  }
}

}  // namespace

void append_control_frame(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> body) {
  if (body.empty()) throw error(errc::internal, "agent link: refusing to send an empty message");
  if (body.size() + 1 > max_frame_bytes) {
    fail("message of " + std::to_string(body.size()) + " bytes exceeds the " +
         size_text(max_frame_bytes) + " limit");
  }
  put_u32(out, static_cast<std::uint32_t>(body.size() + 1));
  out.push_back(static_cast<std::uint8_t>(frame_kind::control));
  out.insert(out.end(), body.begin(), body.end());
}

void append_output_frame(std::vector<std::uint8_t>& out, std::uint32_t rank, output_stream stream,
                         std::span<const std::uint8_t> bytes) {
  check_data(bytes);
  put_u32(out, static_cast<std::uint32_t>(bytes.size() + 6));
  out.push_back(static_cast<std::uint8_t>(frame_kind::output));
  put_u32(out, rank);
  out.push_back(stream == output_stream::out ? 1 : 2);
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void append_input_frame(std::vector<std::uint8_t>& out, std::uint32_t rank,
                        std::span<const std::uint8_t> bytes) {
  check_data(bytes);
  put_u32(out, static_cast<std::uint32_t>(bytes.size() + 5));
  out.push_back(static_cast<std::uint8_t>(frame_kind::input));
  put_u32(out, rank);
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void append_relay_frames(std::vector<std::uint8_t>& out, std::uint32_t host,
                         std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const auto n = std::min(bytes.size(), max_data_bytes);
    const std::size_t at = out.size();
    out.resize(at + frame_header_bytes + 5 + n);
    auto* p = out.data() + at;
    const auto len = static_cast<std::uint32_t>(n + 5);
    for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(len >> (24 - 8 * i));
    p[4] = static_cast<std::uint8_t>(frame_kind::relay);
    for (int i = 0; i < 4; ++i) p[5 + i] = static_cast<std::uint8_t>(host >> (24 - 8 * i));
    std::memcpy(p + 9, bytes.data(), n);
    bytes = bytes.subspan(n);
  }
}

void frame_decoder::feed(std::span<const std::uint8_t> bytes) {
  if (!view_.empty()) {
    // What a view still holds goes first, copied (bytes must follow it).
    const auto held = view_;
    view_ = {};
    feed(held);
  }
  // Compact once the consumed prefix dominates, so a long-lived link does not grow.
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

void frame_decoder::feed_view(std::span<const std::uint8_t> bytes) {
  if (buffer_.size() - start_ != 0 || !view_.empty()) {
    feed(bytes);  // behind a partial frame: joined in the buffer
    return;
  }
  buffer_.clear();
  start_ = 0;
  view_ = bytes;
}

std::optional<frame> frame_decoder::next() {
  std::size_t used = 0;
  if (!view_.empty()) {
    auto f = take(view_.data(), view_.size(), used);
    if (f) {
      view_ = view_.subspan(used);
      return f;
    }
    // A partial frame: kept until the rest arrives.
    const auto held = view_;
    view_ = {};
    feed(held);
    return std::nullopt;
  }
  auto f = take(buffer_.data() + start_, buffer_.size() - start_, used);
  if (f) start_ += used;
  return f;
}

// The frame at p if all of it is there (`used`: its bytes), else nothing.
std::optional<frame> frame_decoder::take(const std::uint8_t* p, std::size_t available,
                                         std::size_t& used) const {
  if (available < frame_header_bytes) return std::nullopt;
  const std::uint32_t n = get_u32(p);
  if (n == 0) fail("empty frame");
  if (n > max_body_) {
    fail("frame of " + std::to_string(n) + " bytes exceeds the " + size_text(max_body_) + " limit");
  }
  if (available < frame_header_bytes + n) return std::nullopt;
  const std::uint8_t* body = p + frame_header_bytes;
  used = frame_header_bytes + n;
  frame f;
  switch (body[0]) {
    case static_cast<std::uint8_t>(frame_kind::control):
      if (n < 2) fail("empty message");
      f.kind = frame_kind::control;
      f.payload = {body + 1, n - 1};
      return f;
    case static_cast<std::uint8_t>(frame_kind::output):
      if (n < 7) fail("output frame of " + std::to_string(n) + " bytes carries no output");
      if (body[5] != 1 && body[5] != 2) {
        fail("output frame names stream " + std::to_string(body[5]) + " (1 or 2 expected)");
      }
      f.kind = frame_kind::output;
      f.rank = get_u32(body + 1);
      f.stream = body[5] == 1 ? output_stream::out : output_stream::err;
      f.payload = {body + 6, n - 6};
      return f;
    case static_cast<std::uint8_t>(frame_kind::input):
      if (n < 6) fail("input frame of " + std::to_string(n) + " bytes carries no input");
      f.kind = frame_kind::input;
      f.rank = get_u32(body + 1);
      f.payload = {body + 5, n - 5};
      return f;
    case static_cast<std::uint8_t>(frame_kind::relay):
      if (n < 6) fail("relay frame of " + std::to_string(n) + " bytes carries no bytes");
      f.kind = frame_kind::relay;
      f.rank = get_u32(body + 1);
      f.payload = {body + 5, n - 5};
      return f;
    default:
      fail("unknown frame kind " + std::to_string(body[0]));
  }
}

void frame_decoder::finish() const {
  if (buffered() == 0) return;
  if (buffered() < frame_header_bytes) {
    fail("stream ended inside a frame header (" + std::to_string(buffered()) + " of 4 bytes)");
  }
  const std::uint32_t n = get_u32(view_.empty() ? buffer_.data() + start_ : view_.data());
  fail("stream ended inside a frame (" + std::to_string(buffered() - frame_header_bytes) + " of " +
       std::to_string(n) + " bytes)");
}

std::optional<std::size_t> preamble_scanner::scan(std::span<const std::uint8_t> bytes) {
  if (found_) return 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::uint8_t b = bytes[i];
    if (b == magic[matched_]) {
      if (std::size_t{++matched_} == magic.size()) {
        found_ = true;
        return i + 1;
      }
      continue;
    }
    // Bytes of a partial match were noise after all. The magic's only border is its first byte
    // (NUL), so a mismatching NUL may start a new match.
    const bool restarts = b == magic[0];
    noise_ += matched_ + (restarts ? 0 : 1);
    if (!kept_) kept_ = std::make_unique<std::string>();
    if (kept_->size() < 512) {
      for (std::size_t k = 0; k < matched_; ++k) kept_->push_back(static_cast<char>(magic[k]));
      if (!restarts) kept_->push_back(static_cast<char>(b));
    }
    matched_ = restarts ? 1 : 0;
    if (noise_ > max_noise_) {
      fail("the peer sent " + std::to_string(noise_) +
           " bytes that are not the agent link (it began: '" + noise_text() + "')");
    }
  }
  return std::nullopt;
}

std::string preamble_scanner::noise_text() const {
  std::string shown;
  if (!kept_) return shown;
  for (char c : *kept_) {
    if (c == '\n' && shown.empty()) continue;  // skip leading blank lines
    if (c == '\n' || shown.size() >= 200) break;
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u == 0x7f ? '?' : c);
  }
  return shown;
}

}  // namespace pm::link
