#include "transport/routing.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "transport/local/local_transport.hpp"
#include "transport/srun/srun_transport.hpp"
#include "transport/ssh/ssh_transport.hpp"

namespace pm {

transport_router::transport_router(boost::asio::io_context& io, remote_launch remote,
                                   std::shared_ptr<transport> remote_transport,
                                   std::shared_ptr<early_agent> early)
    : io_(io),
      options_(std::move(remote)),
      remote_(std::move(remote_transport)),
      early_(std::move(early)) {}

transport_router::~transport_router() = default;

transport& transport_router::local() {
  if (!local_) {
    local::local_transport_options o;
    o.early = early_;
    local_ = std::make_unique<local::local_transport>(io_, std::move(o));
  }
  return *local_;
}

transport& transport_router::remote() {
  if (!remote_ && options_.launcher == agent_launcher::srun) {
    remote_ = std::make_shared<srun::srun_transport>(io_, options_);
  }
  if (!remote_) remote_ = std::make_shared<ssh::ssh_transport>(io_, options_);
  return *remote_;
}

void transport_router::open(const agent_target& target, std::function<void(agent_stream)> opened,
                            std::function<void(std::string reason)> failed) {
  transport& t = target.info.local ? local() : remote();
  by_host_[target.host] = &t;
  t.open(target, std::move(opened), std::move(failed));
}

void transport_router::established(std::uint32_t host) {
  if (auto it = by_host_.find(host); it != by_host_.end()) it->second->established(host);
}

void transport_router::close(std::uint32_t host, std::function<void(agent_end)> done) {
  auto it = by_host_.find(host);
  if (it == by_host_.end()) {
    boost::asio::post(io_, [done = std::move(done)] { done({}); });
    return;
  }
  it->second->close(host, std::move(done));
}

}  // namespace pm
