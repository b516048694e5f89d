// pmd, the node agent (docs/agent.md): the program is agent_main (main.cpp), which pmrun also
// runs in the local agent it forks.
#include "agent_main.hpp"

int main(int argc, char** argv) {
  return pmd::agent_main(argc, argv);
}
