// ssh_transport: agents on other hosts, started by the system ssh (docs/multihost.md).
//
// For each host it runs `ssh [the user's agent words and args] [BatchMode, ConnectTimeout,
// ServerAliveInterval] [-p port] [-l user] host '<pmd> --stdio --nonce N'` as a child of the
// launcher (own process group, so the terminal's ^C goes to the launcher, which decides), with
// pipes for stdin and stdout, which carry the agent link, and a pipe for stderr, whose last lines
// say why a connection failed ("Permission denied (publickey)", "pmd: not found"). Nothing about
// the job is on that command line: it travels over the link after the hello, so no remote shell
// ever parses user input. At most remote_launch::max_concurrent connections are being set up at
// once (a burst would meet sshd's MaxStartups); the next starts when one says hello or fails.
// ssh is reaped through a pidfd. Not thread-safe; callbacks are posted to the io_context.
#pragma once

#include <memory>

#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::ssh {

class ssh_transport final : public transport {
 public:
  ssh_transport(boost::asio::io_context& io, remote_launch options);
  /// Every ssh still running gets SIGTERM, then SIGKILL, and is reaped (blocking briefly).
  ~ssh_transport() override;
  ssh_transport(const ssh_transport&) = delete;
  ssh_transport& operator=(const ssh_transport&) = delete;

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override;
  void established(std::uint32_t host) override;
  void close(std::uint32_t host, std::function<void(agent_end)> done) override;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::ssh
