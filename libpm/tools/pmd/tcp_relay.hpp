// How the ranks and tools reach the PMIx server that pmd-helper starts only when the first of them
// connects (pmix_gateway.hpp, docs/pmix.md "Who reaches the server"). The ranks were told pmd's
// port on 127.0.0.1 at exec (the helper took over pmd's listener); the server itself listens on a
// Unix socket in the agent's private 0700 directory, which no other user can reach. For each
// connection the helper accepts, the relay:
//   1. asks the kernel who made it (sock_diag, agent/peer_owner.hpp) and closes it at once unless
//      it is the job's owner (a line per refused uid, the first time; the rest are counted);
//   2. buffers its first message (the PMIx handshake, agent/pmix/handshake.hpp) within a deadline
//      and checks it: a connection that sends nothing, too little or garbage never reaches the
//      server, whose handler would read it with blocking receives on its progress thread;
//   3. connects to the server's Unix socket, hands the message over in one piece and pumps bytes
//      both ways; when a client leaves, the server's side is shut for writing only and what
//      libpmix still writes is read and dropped until it closes its end (libpmix 4.2.2 crashes
//      when a write of its answer to a handshake fails, and prints a line for any other);
//   4. tells libpmix of the clients that left one at a time: the next server's side is shut only
//      once libpmix closed the last one's end. libpmix 4.2.2 answers a fence of this host's ranks
//      again for every further client it finds gone in the same pass, after the first answer
//      freed the fence (a use-after-free that corrupted pmd's heap when the ranks of a job
//      blocked in a fence were killed together; docs/pmix.md, "Clients that leave together").
//
// Driven by an epoll set the owner polls: add() registers both descriptors of a pair under tags
// `tag_base | id << 1 | side`, on_event() takes such a tag, on_timer() runs the deadlines
// (next_deadline()). One thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "link/socket.hpp"

namespace pmd {

class tcp_relay {
 public:
  using clock = std::chrono::steady_clock;

  struct options {
    /// The only uid whose connections are relayed (the job's owner: pmd's own).
    uid_t owner = 0;
    /// A client must have sent its whole handshake this long after it was accepted.
    std::chrono::milliseconds handshake_deadline{5000};
    /// A client that left: how long the server's side stays open for libpmix to close it.
    std::chrono::milliseconds drain_deadline{10000};
    /// Called when a handshake is complete: where the server listens (a Unix socket path), or
    /// nothing (it could not start: the connection is closed).
    std::function<std::optional<std::string>()> server;
    /// One line for the user.
    std::function<void(const std::string&)> say;
  };

  /// `epoll_fd`: the owner's set; `tag_base`: the top bits that mark the relay's tags.
  tcp_relay(int epoll_fd, std::uint64_t tag_base, options o);
  ~tcp_relay();
  tcp_relay(const tcp_relay&) = delete;
  tcp_relay& operator=(const tcp_relay&) = delete;

  /// A connection pmd accepted on its PMIx port.
  void add(pm::link::owned_fd accepted);
  /// An epoll event for one of the relay's tags.
  void on_event(std::uint64_t tag, std::uint32_t events);
  /// Closes what missed its deadline by `now`.
  void on_timer(clock::time_point now);
  /// The earliest deadline of a connection (nothing: none is waiting).
  std::optional<clock::time_point> next_deadline() const;
  /// Ends every connection at pmd's end: the clients' sides are closed; the server's are kept
  /// open, untouched, until the relay goes (pmd then ends without finalizing the server, so
  /// libpmix never processes their loss: all of them at once is what it mishandles, step 4).
  void close_all();

  bool owns(std::uint64_t tag) const { return (tag & ~mask) == base_; }
  std::size_t size() const { return pairs_.size(); }
  /// Connections refused so far, by the uid that made them (-1: the kernel could not name one).
  const std::map<long, std::uint64_t>& refused() const { return refused_; }

  static constexpr std::uint64_t mask = (std::uint64_t{1} << 48) - 1;

 private:
  struct side {
    pm::link::owned_fd fd;
    std::string out;  // bytes for this side, not yet written
    std::uint32_t interest = 0;
    bool registered = false;
  };
  enum class phase {
    greeting,  // the client's handshake is being read; no server side yet
    relaying,
    waiting,   // the client left; libpmix is told when its turn comes (step 4). Meanwhile what
               // the server writes is read and dropped.
    draining,  // the client left and the server's side is shut: what it still writes is read and
               // dropped until it closes its end
  };
  struct pair {
    side s[2];  // 0: the client (rank or tool), 1: the server
    phase ph = phase::greeting;
    std::string first;             // greeting: what the client sent so far
    clock::time_point deadline{};  // greeting and draining
  };
  // Greeting and draining pairs are timed; a waiting pair's time starts when its turn comes.
  static bool has_deadline(phase ph) { return ph == phase::greeting || ph == phase::draining; }
  void update(std::uint64_t id, pair& p);
  void remove(std::uint64_t id);
  bool greet(std::uint64_t id, pair& p);  // false: the pair is over
  bool connect_server(pair& p);
  int pump(pair& p, int from);  // 0: both go on; 1 + side: that side ended
  bool drain(side& to);         // false: write failed
  bool forward(side& to, const char* bytes, std::size_t n);  // false: write failed
  void client_gone(std::uint64_t id, pair& p);
  void hang_up_next();  // no pair draining: shuts the server's side of the first one waiting
  void refuse(long uid, const std::string& why);
  void once(const std::string& kind, const std::string& line);

  int epoll_;
  std::uint64_t base_;
  options opts_;
  pm::link::owned_fd diag_;  // NETLINK_SOCK_DIAG, opened on first use
  std::uint64_t next_ = 0;
  std::unordered_map<std::uint64_t, pair> pairs_;
  std::deque<std::uint64_t> waiting_;      // pairs whose client left, in the order they left
  std::optional<std::uint64_t> draining_;  // the pair whose server's side is shut
  std::vector<pm::link::owned_fd> held_;   // the server's sides after close_all()
  std::map<long, std::uint64_t> refused_;
  std::map<std::string, std::uint64_t> said_;  // lines said once, by kind, and how often they came
};

}  // namespace pmd
