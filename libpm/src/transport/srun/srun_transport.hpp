// srun_transport: agents inside a Slurm allocation, started by one `srun` step and dialling back
// over TCP (docs/slurm.md).
//
// The hosts the job router hands it in one turn of the io_context become one step: `srun ...
// --nodelist=<them> pmd --connect --nonce N` (srun_command.hpp), one agent per node, srun's own
// stdio not used for the link. Before srun starts, the transport listens on a TCP port of this
// machine (every address, told to the agents as the non-loopback addresses of this host, the one
// that routes toward the first node first; with --iface only on the addresses it chose, one
// listener each, and only those told); the token, addresses and port reach the agents in srun's
// environment, never in argv. A connection whose first line is not an agent's greeting with the
// job's token and a node of the step that has no agent yet (caller_gate decides) is closed and
// reported through remote_launch::notice, boundedly (refusal_log.hpp: the first of each kind from
// each address, then a count every 10 s and at the end); the job goes on. An accepted
// socket becomes the host's stream (a TCP socket: no descriptors travel, output comes as data
// frames).
//
// srun's exit ends every stream of its step that is still open (the link sees end-of-file) and
// fails the hosts whose agent never called, with srun's last line ("srun: error: ... CANCELLED
// ... DUE TO TIME LIMIT"). close() of a host answers at once while other hosts of the step still
// run; the last one waits for srun to end (a grace, then SIGTERM, then SIGKILL). srun is reaped
// through a pidfd. Not thread-safe; callbacks are posted to the io_context.
#pragma once

#include <memory>

#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::srun {

class srun_transport final : public transport {
 public:
  srun_transport(boost::asio::io_context& io, remote_launch options);
  /// An srun still running gets SIGTERM, then SIGKILL, and is reaped (blocking briefly).
  ~srun_transport() override;
  srun_transport(const srun_transport&) = delete;
  srun_transport& operator=(const srun_transport&) = delete;

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override;
  void close(std::uint32_t host, std::function<void(agent_end)> done) override;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace pm::srun
