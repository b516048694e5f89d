// transport_router: picks each host's transport. A host that is this machine (host::local) gets
// the local transport (pmd over a socket pair); every other host gets the remote one: the
// embedder's own (job_request::remote_transport), else srun (remote_launch::launcher) or ssh. So a
// host that is not this machine never runs its ranks here. The router is itself a transport; it
// remembers which one opened each host.
#pragma once

#include <memory>
#include <unordered_map>

#include "pm/launcher.hpp"
#include "pm/transport.hpp"

namespace boost::asio {
class io_context;
}

namespace pm {

class transport_router final : public transport {
 public:
  /// `early`: this machine's agent started beforehand, for the local transport to adopt.
  transport_router(boost::asio::io_context& io, remote_launch remote,
                   std::shared_ptr<transport> remote_transport,
                   std::shared_ptr<early_agent> early = nullptr);
  ~transport_router() override;

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override;
  void established(std::uint32_t host) override;
  void close(std::uint32_t host, std::function<void(agent_end)> done) override;

 private:
  transport& local();
  transport& remote();

  boost::asio::io_context& io_;
  remote_launch options_;
  std::unique_ptr<transport> local_;
  std::shared_ptr<transport> remote_;
  std::shared_ptr<early_agent> early_;
  std::unordered_map<std::uint32_t, transport*> by_host_;
};

}  // namespace pm
