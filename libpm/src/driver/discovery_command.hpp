// discovery_command: runs a host discovery command (restart_policy::host_discovery) for the
// launcher machine's discover_hosts: `/bin/sh -c COMMAND` in its own process group, with pmrun's
// environment, stdin from /dev/null, stdout read (at most 1 MiB), stderr passed through to the
// launcher's. What it printed is parsed (pm::parse_discovered_hosts) and each host that is this
// machine marked local, as the allocation's are. A command not done within `bound` is killed, its
// group with it. Destroying the object kills and reaps a command still running: the launch leaves
// nothing behind. Not thread-safe; `done` runs from the io_context, once, never after destruction.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "launch/launcher.hpp"

namespace boost::asio {
class io_context;
}

namespace pm::driver {

class discovery_command {
 public:
  using done_fn = std::function<void(launch::launcher::discovery)>;
  discovery_command(boost::asio::io_context& io, std::string command,
                    std::chrono::milliseconds bound, done_fn done);
  ~discovery_command();
  discovery_command(const discovery_command&) = delete;
  discovery_command& operator=(const discovery_command&) = delete;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace pm::driver
