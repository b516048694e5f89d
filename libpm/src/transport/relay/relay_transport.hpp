// relay_transport: the launcher's side of the tree launch (docs/multihost.md, "The tree launch").
//
// A host whose plan parent is another host P is reached through P's agent: open() waits until
// P's link is greeted (and P has fewer than remote_launch::max_concurrent children being set up),
// then sends P child_open{host, argv}, argv being the complete ssh command line built here with
// the same functions as the flat launch (the host's user and port, plm_rsh_agent and its args,
// BatchMode and timeouts, the remote pmd path and --nonce). The stream it hands the host_link is
// one end of a socket pair: what the host_link writes goes to P as child_data{host, bytes}, and
// child_data from P is written back into it. So the host's own link (hello, nonce, heartbeats,
// output credit, silence) runs end to end, unread by P, and a deeper level nests: bytes for a
// depth-3 host are child_data inside child_data. child_closed from P ends the stream with how ssh
// ended (255 before the hello may be retried, as with the flat launch); P's link going down ends
// every child of P at once, naming P. Not thread-safe; callbacks are posted to the io_context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "link/messages.hpp"
#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::relay {

/// How the relay reaches a parent host's agent: over that host's own link.
struct relay_hooks {
  /// Queue `m` on the link of host `parent` (it is up when the relay calls this).
  std::function<void(std::uint32_t parent, const link::message& m)> send;
  /// The plan parent of a relayed host.
  std::function<std::uint32_t(std::uint32_t host)> parent_of;
  /// A host's name, for the lines the relay writes.
  std::function<std::string(std::uint32_t host)> name_of;
};

/// The line for a child's ssh that ended (child_closed), as the flat launch words it: empty when
/// it exited 0; retryable for 255 before its agent said hello. Pure.
agent_end child_end(const link::child_closed& closed, const pm::host& child,
                    const std::string& agent_path, const std::string& parent_name,
                    bool established);

class relay_transport final : public transport {
 public:
  relay_transport(boost::asio::io_context& io, remote_launch options, relay_hooks hooks);
  ~relay_transport() override;
  relay_transport(const relay_transport&) = delete;
  relay_transport& operator=(const relay_transport&) = delete;

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override;
  void established(std::uint32_t host) override;
  void close(std::uint32_t host, std::function<void(agent_end)> done) override;

  /// The link of `parent` is greeted: its children may be started.
  void parent_greeted(std::uint32_t parent);
  /// A child_data or child_closed that arrived on the link of `parent`.
  void from_parent(std::uint32_t parent, link::message& m);
  /// The link of `parent` is over: every child of it ends now (their agents lose their launcher
  /// with it, and end their ranks).
  void parent_down(std::uint32_t parent);

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::relay
