// dvm_transport: a job's agents started through a DVM (docs/dvm.md). For the hosts the job router
// opens in one turn of the io_context, one request goes over the submitter's connection to the
// DVM's server, which asks each host's daemon to start `pmd --connect` with this job's token;
// each agent dials back (callback_listener, as under srun) and its socket becomes the host's
// stream. The server's word on an agent (it could not start, it ended, its host was lost) reaches
// the host's open() or close(). Not thread-safe; callbacks are posted to the io_context.
#pragma once

#include <memory>

#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::dvm_parts {

/// `connection` is the submitter's connected socket to the DVM's server, after its claim; the
/// transport owns it (closing it tells the server the job is over).
std::shared_ptr<transport> make_dvm_transport(boost::asio::io_context& io, int connection,
                                              const remote_launch& remote);

}  // namespace pm::dvm_parts
