#include "launch/relayed_ssh_end.hpp"

#include "pm/exit_status.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm::launch {

agent_end relayed_ssh_end(const link::child_closed& c, const pm::host& child,
                          const std::string& agent_path, const std::string& parent_name,
                          bool established) {
  agent_end e;
  if (c.code == 0 && c.signo == 0) return e;
  if (c.code == -1 && c.signo == 0) {
    e.how = "the agent on " + parent_name + " could not start ssh to " + child.name;
    if (!c.said.empty()) e.how += ": " + c.said;
    return e;
  }
  if (c.signo != 0) {
    e.how = "ssh from " + parent_name + " was killed by " + signal_name(c.signo);
    if (!c.said.empty()) e.how += ": " + c.said;
    return e;
  }
  // The flat launch's words (ssh::ssh_end), and the parent that ran the ssh.
  e = ssh::ssh_end(child, agent_path, c.code, 0, established, {});
  e.how += ", from " + parent_name;
  const bool killed = established && c.code > 128 && c.code <= 128 + 64;
  if (!c.said.empty() && !killed) e.how += ": " + c.said;
  e.retryable = c.code == 255 && !established && !ssh::ssh_failure_is_final(c.said);
  return e;
}

}  // namespace pm::launch
