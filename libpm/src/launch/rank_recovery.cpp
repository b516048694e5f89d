// --enable-recovery (docs/resilience.md, "Recovering single ranks"): the controller decides that a
// failed rank starts again alone (controller_options::rank_restarts, one budget for the launch);
// here the launcher tells the embedder, forgets what it pushed of the failed process's output,
// and asks the rank's agent for it again with the same spawn request as the first time, its own
// restart count aside (TORCHELASTIC_RESTART_COUNT) and stdin from /dev/null. The agent takes the
// rank number again once its process ended (it sweeps the rank's process group first).
#include "env/compose.hpp"
#include "launch/launcher_impl.hpp"
#include "text/seconds_text.hpp"

namespace pm::launch {

void launcher::impl::rank_restart_begun(rank_restart_report r) {
  decided(r.host, "restart rank " + std::to_string(r.rank) + " (" + std::to_string(r.number) + ")");
  // The rank's group got SIGKILL; what left it (setsid) and still holds its output would hold
  // the restart up for as long as it lives: it gets the kill grace (restart_held_up).
  awaiting_respawn[r.rank] = r.count;
  start_own_timer(req.control.kill_grace, own_timer{timer_kind::restart_leftover, r.host,
                                                    (std::uint64_t{r.count} << 32) | r.rank});
  out->push_back(rank_restarted{std::move(r)});
}

// The controller asks for a restarted rank's spawn once the failed process's streams ended:
// output pushed over the link opens again for the next process (its first bytes reopen it).
void launcher::impl::respawning(const std::vector<std::uint32_t>& ranks) {
  for (const auto rank : ranks) {
    if (rank < pushed.size() && ctl.restarts_of(rank) > 0) pushed[rank] = 0;
    awaiting_respawn.erase(rank);
  }
}

// The kill grace after a rank's restart began, and its old process's streams are still open:
// something it started outside its process group holds them. Its agent closes them (what holds
// them gets SIGPIPE on its next write, as under `| head`), and the rank starts again; the holder
// itself is ended with the job's other leftovers. Before any spawn of the rank: the link keeps
// the order, so the new process's pipes are never the ones closed.
void launcher::impl::restart_held_up(std::uint32_t rank, std::uint32_t count) {
  const auto it = awaiting_respawn.find(rank);
  if (it == awaiting_respawn.end() || it->second != count) return;
  // The job is ending: the rank ends as its failed process did (end_respawns), and the job's
  // own end clears what holds its output.
  if (done || finishing || ctl.ending()) {
    awaiting_respawn.erase(it);
    return;
  }
  const auto host = ctl.host_of(rank);
  const bool here = rank < piped.size() && piped[rank] != 0;  // its pipes came to this process
  if (!here && !link_usable(host)) return;
  out->push_back(say{"rank " + std::to_string(rank) + " on " + host_info(host).name +
                     ": what its failed process left running still holds its output after " +
                     text::seconds_text(req.control.kill_grace) +
                     " s; its output is cut there and the rank starts again"});
  if (here) {
    // Its group again (the failed leader is unreaped, so the number is still its), then the
    // pipes: read what they hold, closed, their ends reported.
    piped[rank] = 0;
    out->push_back(end_orphaned_rank{host, rank, ctl.rank_report_of(rank).pid});
    return;
  }
  send_to(host, link::output_unwanted{rank, stream_kind::out});
  if (!req.output.merge_stderr) send_to(host, link::output_unwanted{rank, stream_kind::err});
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
