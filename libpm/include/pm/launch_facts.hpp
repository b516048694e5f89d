// Deciding the launch-time facts of the env contract: MASTER_ADDR, MASTER_PORT, node addresses.
#pragma once

#include <cstdint>
#include <optional>

#include "pm/allocation.hpp"
#include "pm/env.hpp"
#include "pm/export.hpp"
#include "pm/rank_map.hpp"

namespace pm {

/// A one-host job on this machine (host::local, or me.is_me(name)): 127.0.0.1, node_addrs
/// {"127.0.0.1"}. Otherwise node_addrs holds, per node the job uses, an address other hosts
/// reach — never a loopback one (Debian maps its own hostname to 127.0.1.1): for this machine
/// the numeric address it was named by, else its first non-loopback IPv4 interface address; for
/// another host its name through getaddrinfo, loopback skipped, IPv4 first; the name itself when
/// nothing better is known. master_addr = node_addrs[node of rank 0].
/// Only what the ranks will read is resolved: rank 0's host for MASTER_ADDR, and every other node
/// only when `profiles` has tf (TF_CONFIG lists every worker); without tf, node_addrs holds just
/// the master's entry at index node-of-rank-0 and "" for the others, and no other host name is
/// looked up, so that names nobody needs never cost a resolver query.
/// The port: `master_port` if given, else one free on the chosen address (bound to port 0, read,
/// released; 127.0.0.1 when rank 0 is on another host, until its agent decides one there).
/// Sends nothing. Throws pm::error(errc::system) when no port can be bound.
PM_API launch_facts decide_launch_facts(const rank_map& map, const local_host& me,
                                        std::optional<std::uint16_t> master_port,
                                        env_profile profiles = env_profile::all);

}  // namespace pm
