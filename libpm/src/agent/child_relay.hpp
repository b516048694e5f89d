// The agents this agent starts for the tree launch (docs/multihost.md, "The tree launch"), as a
// sans-I/O part of the agent: which child a launcher message is for, what to forward, what to
// report when a child's carrier (its ssh) cannot start or ends, and how they are ended when this
// agent loses its launcher or clears up.
//
// The launcher sends child_open{host, argv}: the complete ssh command line of a host whose plan
// parent this agent is. The driver runs it (with the agent's own environment, never the
// launcher's) and moves bytes both ways: child_data from the launcher goes to ssh's stdin, what
// ssh prints on stdout goes back as child_data. The link inside (hello, nonce, output credit) is
// the launcher's with that host, end to end; its heartbeats go hop by hop (link version 12): the
// relay follows the frames of both directions (link::relay_tap) without reading them, takes the
// child's heartbeats out of what goes to the launcher, times the child itself (tick(): nothing
// from it for the silence bound ends it, and child_closed says so with `silent_ms`), and writes
// heartbeats of its own into the child's stdin between the launcher's frames. So the launcher
// times only the hosts it reaches itself, and a heartbeat crosses one hop. When ssh ends,
// child_closed says how, with the last line it printed on stderr.
//
// No orphans: when the agent loses its launcher, or clears up to exit, every child's stdin is
// closed (its agent then sees its launcher gone and ends its ranks); a child still there
// `end_sequence`'s grace later gets its last signal. No descriptor, no clock: times come with the
// calls.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "agent/agent.hpp"
#include "link/messages.hpp"
#include "link/relay_tap.hpp"
#include "sys/stop_sequence.hpp"

namespace pm::agent {

// ---- events: what the driver saw of a child's carrier ----
/// The carrier could not be started.
struct child_start_failed {
  std::uint32_t host = 0;
  std::string reason;
};
/// Bytes it printed on stdout (the child's end of its link).
struct child_output {
  std::uint32_t host = 0;
  std::string bytes;
};
/// Bytes it printed on stderr (ssh's own complaints).
struct child_said {
  std::uint32_t host = 0;
  std::string bytes;
};
/// It ended (everything it printed was reported before): `code`, or -1 and the signal.
struct child_ended {
  std::uint32_t host = 0;
  int code = 0;
  int signo = 0;
};

using child_event = std::variant<child_start_failed, child_output, child_said, child_ended>;

// ---- actions ----
/// Run `argv` for `host` with pipes for its stdin, stdout and stderr; report child_start_failed
/// or, later, its output and its end. `input_closed`: the agent is clearing up already, so it
/// only gets end-of-file.
struct start_child {
  std::uint32_t host = 0;
  std::vector<std::string> argv;
  bool input_closed = false;
};
/// Write these bytes to the child's stdin (in order, as it takes them).
struct write_child {
  std::uint32_t host = 0;
  std::string bytes;
};
/// Close its stdin once what was written reached it.
struct close_child_input {
  std::uint32_t host = 0;
};
/// The launcher gave up on it: drop what was not written, close its stdin, SIGTERM.
struct stop_child {
  std::uint32_t host = 0;
};
/// The end sequence's last signal to a child still there after its grace.
struct kill_child {
  std::uint32_t host = 0;
  int signo = SIGKILL;
};

using child_action =
    std::variant<send, start_child, write_child, close_child_input, stop_child, kill_child>;

class child_relay {
 public:
  using time = std::chrono::nanoseconds;
  /// How the children end: closing their stdin takes the first signal's place (an agent that sees
  /// its launcher gone ends its ranks); one still there after the grace gets the last signal.
  static constexpr sys::stop_sequence end_sequence{
      .first_signal = 0, .grace = std::chrono::milliseconds(3000), .last_signal = SIGKILL};
  /// ssh's stderr kept per child for its last line.
  static constexpr std::size_t kept_stderr = 8192;

  /// child_open, child_data, child_close; false: not one of them.
  bool on_message(const link::message& m, std::vector<child_action>& out);
  /// The same, moving a child_data's bytes into its write_child (no copy per relayed piece).
  bool on_message(link::message& m, std::vector<child_action>& out);
  void handle(time now, child_event e, std::vector<child_action>& out);
  void handle(child_event e, std::vector<child_action>& out) { handle(time{0}, std::move(e), out); }
  /// The link's heartbeat period and silence bound (the job's setup; 0: none): call at least
  /// once a period (the agent's driver does when its own link's timer is due). A heartbeat goes
  /// to each child at most once `every` * 3/4 (so a tick that comes a little early still sends
  /// one); a child that said hello and then nothing for `silence` is ended and reported.
  void tick(time now, std::chrono::milliseconds every, std::chrono::milliseconds silence,
            std::vector<child_action>& out);
  /// The agent lost its launcher or clears up: the first call closes every child's stdin, a call
  /// `end_sequence.grace` after it kills what is left (the agent's sweep calls again until none
  /// is).
  void end_all(time now, std::vector<child_action>& out);
  bool empty() const noexcept { return hosts_.empty(); }

 private:
  // By host, sorted, in two flat vectors (a parent has its fan-out of children, 32 by default): a
  // relayed piece, both ways, looks its host up in 128 bytes of hosts. ssh's stderr is kept apart
  // for the few children whose ssh says something.
  static constexpr std::size_t none = ~std::size_t{0};
  std::size_t index(std::uint32_t host) const;
  void remove(std::size_t i);
  std::string& stderr_tail(std::uint32_t host);
  // Each child's link as it passes (both ways) and when it was last heard from.
  struct hop {
    link::relay_tap up;    // from the child: its heartbeats are taken out (held: one cut short)
    link::relay_tap down;  // to the child: where a heartbeat may go in
    link::relay_tap::held_frame held;
    bool stopping = false;   // child_close came: nothing more goes to it
    bool beat_owed = false;  // a heartbeat waits for the end of the launcher's frame
    // When it was last heard from, in ms, wrapping (only differences of seconds are taken).
    std::uint32_t heard_ms = 0;
  };
  static std::uint32_t ms_of(time t) {
    return static_cast<std::uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(t).count());
  }
  std::vector<std::uint32_t> hosts_;
  std::vector<hop> hops_;
  std::vector<std::pair<std::uint32_t, std::string>> stderr_tails_;  // for their last line
  std::optional<time> kill_at_;
  time next_beat_{0};
};

}  // namespace pm::agent
