// callback_listener: the launcher's end of the connect-back (connect_back.hpp), shared by every
// transport whose agents dial back: srun's steps and a DVM's hosts (docs/slurm.md, docs/dvm.md).
//
// It listens on a TCP port of this machine (every address; with --iface only on the addresses it
// chose, one listener each, on one port), reads each caller's greeting line within a deadline and
// lets caller_gate judge it. An accepted caller's socket is handed to `accepted` as the stream of
// the host its greeting named; anything else is closed and said through `notice`, boundedly
// (refusal_log.hpp). Not thread-safe; everything runs on the io_context's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace pm::srun {

struct listener_options {
  /// --iface: interface names or CIDR blocks the agents may call; empty: any address.
  std::vector<std::string> iface;
  /// One line for the user (a refused caller), without the transport's prefix.
  std::function<void(const std::string& line)> notice;
  /// A caller was accepted as `host`'s agent: `fd` is its connected socket (blocking mode),
  /// owned by the callee. Called on the io_context's thread.
  std::function<void(std::uint32_t host, int fd)> accepted;
};

class callback_listener {
 public:
  callback_listener(boost::asio::io_context& io, listener_options options);
  /// Closes the listeners and every caller not judged yet.
  ~callback_listener();
  callback_listener(const callback_listener&) = delete;
  callback_listener& operator=(const callback_listener&) = delete;

  /// Listens, once (later calls do nothing): the addresses told to the agents put the one that
  /// routes toward `first_node` first. Throws pm::error(errc::launch or system) with one line.
  void listen(const std::string& first_node);
  bool listening() const noexcept;
  /// This machine's addresses for the agents, the port and the job's token (64 hex digits).
  const std::vector<std::string>& addresses() const noexcept;
  std::uint16_t port() const noexcept;
  const std::string& token() const noexcept;

  /// caller_gate's expect/forget: which hosts may call now.
  void expect(std::uint32_t host, const std::string& node);
  void forget(std::uint32_t host);
  /// Says what was counted and not said yet (the job's hosts are all closed).
  void flush_refusals();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::srun
