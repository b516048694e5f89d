// Which address of a host the job hands out (MASTER_ADDR, TF_CONFIG's node list): one of the
// addresses its agent reported in its hello, never a loopback one (the agent leaves those out).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "link/messages.hpp"

namespace pm::net {

/// An agent reports its addresses as "ADDR%IFNAME", the best first (the address the launcher's
/// ssh reached it on leads). The choice:
///   1. with `iface` (interface names or CIDR blocks, --iface / oob_tcp_if_include): the first
///      address that matches one;
///   2. else, when `others` (hellos of other hosts of the job) is not empty and one of the agent's
///      addresses is the one this machine would send from toward another host (a UDP socket
///      connected, never written), that one: it is how an agent on this machine is reached by
///      the others, rather than through an interface they have no route to;
///   3. else the agent's first address; with none, its host name.
std::string pick_address(const link::hello& agent, const std::vector<std::string>& iface,
                         const std::vector<const link::hello*>& others);

/// The source address this machine would use toward the IPv4 address `to` (no packet is sent:
/// connect() on a UDP socket only chooses the route); nullopt for no route or no IPv4 address.
std::optional<std::string> source_toward(const std::string& to);

/// True when `address` ("10.1.2.3") on interface `ifname` matches `filter` (an interface name or
/// a CIDR block such as "10.1.0.0/16"). Pure.
bool address_matches(const std::string& address, const std::string& ifname,
                     const std::string& filter);

}  // namespace pm::net
