// How a tree-relayed host's ssh ended, in the flat launch's words and naming the parent that ran
// it (child_closed from the parent's agent). Pure.
#pragma once

#include <string>

#include "link/messages.hpp"
#include "pm/allocation.hpp"
#include "pm/transport.hpp"

namespace pm::launch {

/// Empty `how` when it exited 0; retryable for ssh's 255 before the child's agent said hello
/// (unless ssh's last words say it is final: refused, no route, no key).
agent_end relayed_ssh_end(const link::child_closed& closed, const pm::host& child,
                          const std::string& agent_path, const std::string& parent_name,
                          bool established);

}  // namespace pm::launch
