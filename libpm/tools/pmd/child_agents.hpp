// child_agents: the processes that carry the tree launch's child links (docs/multihost.md, "The
// tree launch"): pmd's driver of the agent's child relay (libpm/src/agent/child_relay.hpp), which
// decides which child a message is for, what to report and when to end them. Here: the ssh
// processes, started with pmd's own environment, and the bytes moved unread between the relay's
// actions and their pipes; what they print and how they end is reported as child events.
//
// Flow control: a child's bytes are read only while the queue toward the launcher holds less than
// `max_queued` bytes, so a busy child never buries this agent's own heartbeats; end to end, each
// child's output is bounded by its own link's credit window with the launcher.
//
// ssh gets PR_SET_PDEATHSIG(SIGTERM) and is reaped through its pidfd; SIGCHLD stays with the
// agent's loop. Driven by the owner's epoll set; one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/child_relay.hpp"
#include "link/messages.hpp"
#include "link/socket.hpp"

namespace pmd {

class child_agents {
 public:
  struct hooks {
    std::function<void(int fd, std::uint32_t events, std::uint64_t tag)> watch;
    std::function<void(int fd)> unwatch;
    std::function<void(pm::agent::child_event)> report;  ///< for the agent's machine
    std::function<std::size_t()> queued;                 ///< bytes waiting to go to the launcher
  };
  /// Epoll tags: kind in the top byte (the owner routes these kinds here), host below.
  static constexpr std::uint64_t tag_out = 9ull << 56;
  static constexpr std::uint64_t tag_err = 10ull << 56;
  static constexpr std::uint64_t tag_exit = 11ull << 56;
  static constexpr std::uint64_t tag_in = 12ull << 56;
  static constexpr std::uint64_t tag_patience = 13ull << 56;
  static bool owns_tag(std::uint64_t tag) {
    const auto kind = tag & (0xffull << 56);
    return kind == tag_out || kind == tag_err || kind == tag_exit || kind == tag_in ||
           kind == tag_patience;
  }
  static constexpr std::size_t max_queued = std::size_t{1} << 20;

  child_agents(hooks h, std::vector<std::string> environment)
      : hooks_(std::move(h)), env_(std::move(environment)) {}
  ~child_agents();
  child_agents(const child_agents&) = delete;
  child_agents& operator=(const child_agents&) = delete;

  /// Carries out one of the child relay's actions but `send` (pmd's).
  void execute(pm::agent::child_action& a);
  void on_event(std::uint64_t tag);
  /// The queue toward the launcher drained: read the children's output again.
  void resume();
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
    pm::link::owned_fd patience;  // a timerfd, while a stopped child is given time (stop)
  };
  void open(const pm::agent::start_child& m);
  void write(std::uint32_t host, const std::string& bytes);
  void stop(std::uint32_t host);
  void patience_over(child& c);
  void read_out(std::uint32_t host, child& c, bool drain);
  void read_err(std::uint32_t host, child& c);
  void write_in(std::uint32_t host, child& c);
  void on_exit(std::uint32_t host);
  void close_in(child& c);

  hooks hooks_;
  std::vector<std::string> env_;
  std::unordered_map<std::uint32_t, child> children_;
};

}  // namespace pmd
