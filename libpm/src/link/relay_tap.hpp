// A tree parent's view of one relayed link, one direction (docs/agent-link.md, "Heartbeats and
// silence", version 12): heartbeats travel hop by hop. The parent does not parse the link it
// relays, but it follows its frames: the magic (after any noise), then each frame's length. That
// is enough to take the child's heartbeats out of what goes on toward the launcher (the parent
// times the child itself), and to know where a heartbeat of its own may go into the child's
// stdin (between two of the launcher's frames, once the launcher's hello passed). Bytes it cannot
// follow (a stream that is not a link) pass unchanged; the endpoints at both ends say what is
// wrong. No copy of what passes unless a heartbeat is taken out of the middle of it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace pm::link {

class relay_tap {
 public:
  /// At most a heartbeat's frame is ever held (checked where it is built).
  static constexpr std::size_t max_held = 24;
  /// Where a frame that may be a heartbeat waits for its rest (only a tap that takes heartbeats
  /// out needs one: a tree parent keeps two taps a child, one of them with this).
  struct held_frame {
    std::array<std::uint8_t, max_held> bytes{};
    std::uint8_t size = 0;
  };

  /// A heartbeat as framed on the wire (the frame's length, then its body).
  static std::span<const std::uint8_t> heartbeat_frame();

  /// The bytes that came, in place: with `drop_beats`, the heartbeats among them are taken out
  /// (a heartbeat cut by the end of `bytes` waits there for its rest); null: they are only
  /// followed. A tap is always passed the same (or always null).
  void pass(std::string& bytes, held_frame* drop_beats);
  /// A whole frame passed (the first is the sender's hello).
  bool framed() const noexcept { return framed_; }
  /// Between two frames, after the first: a frame may go in here.
  bool between_frames() const noexcept { return state_ == stage::header && have_ == 0 && framed_; }
  bool lost_track() const noexcept { return state_ == stage::lost; }

 private:
  enum class stage : std::uint8_t { magic, header, body, beat, lost };
  stage state_ = stage::magic;
  std::uint8_t matched_ = 0;  // bytes of the magic matched so far
  std::uint8_t have_ = 0;     // header bytes held
  bool framed_ = false;
  // Bytes of noise while looking for the magic, then the body bytes of a frame still to pass (8
  // bytes a tap: a tree parent keeps two a child, 32 children each).
  std::uint32_t count_ = 0;
};

}  // namespace pm::link
