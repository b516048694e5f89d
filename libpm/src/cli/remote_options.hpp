// Reading the remote options' values: shared by the command-line parser and the environment.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pm::cli {

/// An rsh agent command split into words; `what` names its source in messages
/// ("-mca plm_rsh_agent", "PM_RSH_AGENT"). A word's leading `~`, `~/` or `~user/` becomes that
/// home directory as a shell would for an unquoted word (ssh::split_agent_command): the command
/// runs on this machine, and ssh does not expand `-F ~/cfg` itself. Throws pm::error(errc::usage)
/// for a blank command, Open MPI's "ssh : rsh" alternatives, and what ssh::split_agent_command
/// refuses.
std::vector<std::string> agent_words(std::string_view what, std::string_view text);

/// plm_rsh_args split into words (blank: none), a leading `~` of a word expanded as for the agent.
std::vector<std::string> ssh_args(std::string_view what, std::string_view text);

/// Words split like a shell with no expansion at all (PM_SRUN_ARGS, an --app file's lines).
std::vector<std::string> agent_args(std::string_view what, std::string_view text);

/// An --iface / oob_tcp_if_include item: an interface name ("eth0") or a network in CIDR form
/// ("10.0.0.0/24", "fd00::/64").
bool valid_interface_spec(std::string_view item);

}  // namespace pm::cli
