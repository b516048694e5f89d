// Deciding the launch-time facts of the env contract: MASTER_ADDR, MASTER_PORT, node addresses.
#pragma once

#include <cstdint>
#include <optional>

#include "pm/allocation.hpp"
#include "pm/env.hpp"
#include "pm/export.hpp"
#include "pm/rank_map.hpp"

namespace pm {

/// A one-host job on this machine: 127.0.0.1. Otherwise an address of rank 0's host that the
/// other hosts reach — never a loopback address (Debian maps its own hostname to 127.0.1.1): its
/// name resolved through the resolver (no traffic beyond it), or for this machine the first
/// non-loopback IPv4 interface address; node_addrs likewise per node (the name itself when
/// nothing better is known). The port: `master_port` if given, else one free on this machine
/// (bound to port 0 and released). A remote rank 0's port is chosen here too; its agent will
/// decide it on that host once remote launch exists.
PM_API launch_facts decide_launch_facts(const rank_map& map, const local_host& me,
                                        std::optional<std::uint16_t> master_port);

}  // namespace pm
