// child_agents: the agents this pmd starts for the tree launch (docs/multihost.md, "The tree
// launch"). The launcher sends child_open{host, argv}: the complete ssh command line of a host
// whose plan parent this agent is, built by the launcher. pmd runs it (with its own environment,
// never the launcher's), and relays bytes unread both ways: child_data from the launcher goes to
// ssh's stdin, what ssh prints on stdout goes back as child_data. The link inside (hello, nonce,
// heartbeats, output credit) is the launcher's with that host, end to end. When ssh ends, pmd
// sends child_closed with its exit status and the last line it printed on stderr.
//
// Flow control: a child's bytes are read only while the queue toward the launcher holds less than
// `max_queued` bytes, so a busy child never buries this agent's own heartbeats; end to end, each
// child's output is bounded by its own link's credit window with the launcher.
//
// No orphans: when this agent loses its launcher, or clears up to exit, every child's stdin is
// closed (its agent then sees its launcher gone and ends its ranks); ssh still running after
// `end_sequence`'s grace is killed. ssh is reaped through its pidfd; SIGCHLD stays with the agent's
// loop. Driven by the owner's epoll set; one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "link/messages.hpp"
#include "link/socket.hpp"
#include "sys/stop_sequence.hpp"

namespace pmd {

class child_agents {
 public:
  using clock = std::chrono::steady_clock;
  struct hooks {
    std::function<void(int fd, std::uint32_t events, std::uint64_t tag)> watch;
    std::function<void(int fd)> unwatch;
    std::function<void(const pm::link::message&)> send;  ///< to the launcher
    std::function<std::size_t()> queued;                 ///< bytes waiting to go to the launcher
  };
  /// Epoll tags: kind in the top byte (the owner routes these kinds here), host below.
  static constexpr std::uint64_t tag_out = 9ull << 56;
  static constexpr std::uint64_t tag_err = 10ull << 56;
  static constexpr std::uint64_t tag_exit = 11ull << 56;
  static constexpr std::uint64_t tag_in = 12ull << 56;
  static bool owns_tag(std::uint64_t tag) {
    const auto kind = tag & (0xffull << 56);
    return kind == tag_out || kind == tag_err || kind == tag_exit || kind == tag_in;
  }
  static constexpr std::size_t max_queued = std::size_t{1} << 20;
  /// Closing stdin takes the first signal's place: an agent that sees its launcher gone ends its
  /// ranks; the ssh still running after the grace gets the last signal.
  static constexpr pm::sys::stop_sequence end_sequence{
      .first_signal = 0, .grace = std::chrono::milliseconds(3000), .last_signal = SIGKILL};

  child_agents(hooks h, std::vector<std::string> environment)
      : hooks_(std::move(h)), env_(std::move(environment)) {}
  ~child_agents();
  child_agents(const child_agents&) = delete;
  child_agents& operator=(const child_agents&) = delete;

  void open(const pm::link::child_open& m);
  void data(pm::link::child_data& m);
  /// The launcher gave up on that host's link: close its stdin and end the ssh.
  void close(std::uint32_t host);
  void on_event(std::uint64_t tag);
  /// The queue toward the launcher drained: read the children's output again.
  void resume();
  /// Close every child's stdin (their agents end their ranks); after end_sequence's grace, kill
  /// what is left.
  void end_all();
  bool owns(pid_t pid) const;
  bool empty() const { return children_.empty(); }

 private:
  struct child {
    pid_t pid = 0;
    pm::link::owned_fd pidfd, in, out, err;
    std::string pending_in;
    bool in_watched = false;
    bool out_watched = false;
    bool paused = false;
    bool closing_in = false;
    std::string stderr_tail;
  };
  void read_out(std::uint32_t host, child& c, bool drain);
  void read_err(child& c);
  void write_in(std::uint32_t host, child& c);
  void on_exit(std::uint32_t host);
  void close_in(child& c);

  hooks hooks_;
  std::vector<std::string> env_;
  std::unordered_map<std::uint32_t, child> children_;
  std::optional<clock::time_point> kill_at_;
};

}  // namespace pmd
