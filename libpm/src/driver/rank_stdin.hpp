// rank_stdin: the ranks' stdin on the launcher's side, for the job runner. It holds its own copy
// of each descriptor the caller gave (the caller may close its own once the runner exists), hands
// a local rank's to its agent (pass_stdin), pumps a remote rank's over the link (pump_stdin), and
// lets each go when the launcher machine says the rank needs it no more (release_stdin): a copy
// kept longer would keep a pipe open for a rank that is gone, and whatever writes the rank's
// input (pmrun's `--stdin all` forwarder) would wait on it forever. Decides nothing. Not
// thread-safe.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "driver/stdin_pump.hpp"
#include "link/socket.hpp"

namespace pm::driver {

class rank_stdin {
 public:
  /// Copies `shared_fd` (what the one reading rank reads; -1: none) and `per_rank` (`--stdin all`,
  /// index = rank) and puts the copies in their place, so that whoever reads them from there
  /// (the launch config, once) sees descriptors that stay open. Throws pm::error when a copy
  /// cannot be made (out of descriptors), rather than give that rank /dev/null.
  rank_stdin(boost::asio::io_context& io, int& shared_fd, std::vector<int>& per_rank);
  ~rank_stdin();
  rank_stdin(const rank_stdin&) = delete;
  rank_stdin& operator=(const rank_stdin&) = delete;

  /// A new descriptor for rank's stdin (the caller owns it; invalid when there is none).
  link::owned_fd copy_for(std::uint32_t rank) const;
  /// Reads rank's stdin for its link and hands it over through `hooks`.
  void pump(std::uint32_t host, std::uint32_t rank, stdin_pump_hooks hooks);
  /// The link of `host` takes input again.
  void resume(std::uint32_t host);
  /// Closes the copy of rank's stdin and ends its pump (once the handler that asked returned:
  /// that may be the pump's own hand-over).
  void release(std::uint32_t rank);

 private:
  int source_of(std::uint32_t rank) const;
  void pump_later(std::uint32_t rank);

  boost::asio::io_context& io_;
  link::owned_fd shared_;
  std::vector<link::owned_fd> per_rank_;
  // By rank (a link retried before the rank started pumps it again) and the ranks of each host:
  // a credit grant and a release touch only their own, with thousands of remote ranks.
  std::unordered_map<std::uint32_t, std::vector<std::unique_ptr<stdin_pump>>> pumps_;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> ranks_of_host_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace pm::driver
