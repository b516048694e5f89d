// --enable-recovery (docs/resilience.md, "Recovering single ranks"): the controller decides that a
// failed rank starts again alone (controller_options::rank_restarts, one budget for the launch);
// here the launcher tells the embedder, forgets what it pushed of the failed process's output,
// and asks the rank's agent for it again with the same spawn request as the first time, its own
// restart count aside (TORCHELASTIC_RESTART_COUNT) and stdin from /dev/null. The agent takes the
// rank number again once its process ended (it sweeps the rank's process group first).
#include "env/compose.hpp"
#include "launch/launcher_impl.hpp"

namespace pm::launch {

void launcher::impl::rank_restart_begun(rank_restart_report r) {
  decided(r.host, "restart rank " + std::to_string(r.rank) + " (" + std::to_string(r.number) + ")");
  out->push_back(rank_restarted{std::move(r)});
}

// The controller asks for a restarted rank's spawn once the failed process's streams ended:
// output pushed over the link opens again for the next process (its first bytes reopen it).
void launcher::impl::respawning(const std::vector<std::uint32_t>& ranks) {
  for (const auto rank : ranks) {
    if (rank < pushed.size() && ctl.restarts_of(rank) > 0) pushed[rank] = 0;
  }
}

// The rank's spawn as the first time, but its own restart count (the torch profile's
// TORCHELASTIC_RESTART_COUNT) and no stdin: the terminal's or the pipe's bytes went to the first.
link::rank_spec launcher::impl::respawn_spec_of(std::uint32_t r, std::uint32_t restarts) const {
  link::rank_spec s;
  s.rank = r;
  s.app = req.map.at(r).app;
  if (cfg.rank_variables) {
    auto env = req.env;
    env.facts.restart_count = restarts;
    s.env = env_lines(rank_profile(req.map, r, env));
  }
  add_binding(r, s);
  s.stdin_from_launcher = false;
  return s;
}

}  // namespace pm::launch
