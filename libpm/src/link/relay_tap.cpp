#include "link/relay_tap.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "link/frame.hpp"
#include "link/messages.hpp"

namespace pm::link {

namespace {

const std::vector<std::uint8_t>& beat_bytes() {
  static const std::vector<std::uint8_t> framed = [] {
    std::vector<std::uint8_t> v;
    append_message(v, heartbeat{}, 0);
    if (v.size() > relay_tap::max_held) throw std::logic_error("a heartbeat's frame grew");
    return v;
  }();
  return framed;
}

constexpr std::size_t max_noise = std::size_t{64} << 10;

}  // namespace

std::span<const std::uint8_t> relay_tap::heartbeat_frame() {
  return beat_bytes();
}

void relay_tap::pass(std::string& bytes, held_frame* drop) {
  const bool drop_beats = drop != nullptr;
  std::uint8_t none_held = 0;
  std::uint8_t& held_n = drop_beats ? drop->size : none_held;
  std::uint8_t* held = drop_beats ? drop->bytes.data() : nullptr;
  if (state_ == stage::lost || bytes.empty()) return;
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  const std::size_t n = bytes.size();
  const auto& beat = beat_bytes();
  const std::size_t beat_body = beat.size() - frame_header_bytes;

  // What passes: bytes[0, same) as they are, until something is taken out; then `out`.
  std::string out;
  bool copying = false;
  std::size_t same = 0;
  const auto keep = [&](std::size_t from, std::size_t to) {
    if (from == to) return;
    if (!copying && from == same) {
      same = to;
      return;
    }
    if (!copying) {
      copying = true;
      out.assign(bytes, 0, same);
    }
    out.append(bytes, from, to - from);
  };
  // A frame not decided yet (dropping heartbeats: its header, or a heartbeat-sized frame): it
  // began at `open` in these bytes, or before them (its first bytes are in held, `open` 0).
  constexpr std::size_t none = ~std::size_t{0};
  std::size_t open = held_n == 0 ? none : 0;
  const auto flush_held = [&] {  // what is held passes, before anything of these bytes
    if (!copying) {
      copying = true;
      out.assign(bytes, 0, same);
    }
    out.append(reinterpret_cast<const char*>(held), held_n);
    held_n = 0;
  };
  const auto release = [&](std::size_t to) {  // the open frame passes, up to `to`
    if (open == none) return;
    if (held_n != 0) flush_held();
    keep(open, to);
    open = none;
  };

  std::size_t i = 0;
  while (i < n) {
    switch (state_) {
      case stage::magic: {
        const std::size_t from = i;
        while (i < n && matched_ < magic.size()) {
          const auto b = p[i++];
          // The magic's only border is its first byte (a NUL): a mismatch restarts there.
          matched_ = b == magic[matched_] ? static_cast<std::uint8_t>(matched_ + 1)
                                          : static_cast<std::uint8_t>(b == magic[0] ? 1 : 0);
          if (++count_ > max_noise + magic.size()) {
            state_ = stage::lost;
            break;
          }
        }
        keep(from, i);
        if (state_ == stage::magic && matched_ == magic.size()) {
          state_ = stage::header;
          count_ = 0;
        }
        break;
      }
      case stage::header: {
        if (have_ == 0) {
          count_ = 0;
          if (drop_beats) open = i;
        }
        const std::size_t from = i;
        while (i < n && have_ < frame_header_bytes) {
          count_ = (count_ << 8) | p[i++];
          ++have_;
        }
        if (!drop_beats) keep(from, i);
        if (have_ < frame_header_bytes) break;
        have_ = 0;
        if (count_ == 0 || count_ > max_frame_bytes) {
          release(i);
          state_ = stage::lost;
          break;
        }
        if (drop_beats && count_ == beat_body) {
          state_ = stage::beat;
        } else {
          release(i);
          state_ = stage::body;
        }
        break;
      }
      case stage::body: {
        const auto k = std::min<std::size_t>(count_, n - i);
        keep(i, i + k);
        i += k;
        count_ -= static_cast<std::uint32_t>(k);
        if (count_ == 0) {
          framed_ = true;
          state_ = stage::header;
        }
        break;
      }
      case stage::beat: {
        const auto k = std::min<std::size_t>(count_, n - i);
        i += k;
        count_ -= static_cast<std::uint32_t>(k);
        if (count_ > 0) break;
        framed_ = true;
        state_ = stage::header;
        // Whole: a heartbeat is taken out, anything else of its size passes.
        if (held_n == 0) {
          if (!std::equal(beat.begin(), beat.end(), p + open)) release(i);
          open = none;
          break;
        }
        // Its start was held: it begins there and ends at i here (i <= a heartbeat's size).
        const std::size_t n_held = held_n;
        const bool is_beat =
            n_held + i == beat.size() &&
            std::equal(beat.begin(), beat.begin() + static_cast<std::ptrdiff_t>(n_held), held) &&
            std::equal(beat.begin() + static_cast<std::ptrdiff_t>(n_held), beat.end(), p);
        if (is_beat) {
          held_n = 0;
          open = none;
        } else {
          release(i);
        }
        break;
      }
      case stage::lost:
        release(i);
        keep(i, n);
        i = n;
        break;
    }
  }
  // A frame still undecided waits for its rest.
  if (open != none) {
    // (bytes before `open` in these bytes were kept or taken out already)
    std::memcpy(held + held_n, p + open, n - open);
    held_n = static_cast<std::uint8_t>(held_n + (n - open));
  }
  if (copying) {
    bytes = std::move(out);
  } else if (same < n) {
    bytes.resize(same);
  }
}

}  // namespace pm::link
