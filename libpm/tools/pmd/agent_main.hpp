// pmd's whole program as a function: pmd's main() calls it, and pmrun runs it in the child it
// forks as this machine's agent without an exec (pm::early_agent::fork; docs/agent.md, "The
// local agent, forked").
#pragma once

namespace pmd {

/// pmd's main: reads argv as pmd's command line, runs the agent and returns its exit status.
int agent_main(int argc, char** argv);

}  // namespace pmd
