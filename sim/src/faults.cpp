// Faults: crashes and partitions as the world sees them (what the link endpoints make of them is
// theirs), and signals to the launcher.
#include <signal.h>

#include <algorithm>

#include "transport/srun/connect_back.hpp"
#include "world_impl.hpp"

namespace pm::sim {

void world::plan(const fault& f) {
  // check_targets() has checked every target and partition.
  if (f.kind == fault_kind::launcher_signal) {
    // Never before job_start (events before it are ignored, by the controller's rules).
    at(std::max<std::int64_t>(f.at.count(), 1), ek::launcher_signal, f.target, 0);
    return;
  }
  switch (f.kind) {
    case fault_kind::host_crash: {
      auto& h = hosts_[f.target];
      if (h.crash_at < 0 || f.at.count() < h.crash_at) h.crash_at = f.at.count();
      at(f.at.count(), ek::host_crash, f.target, 0);
      break;
    }
    case fault_kind::partition: {
      auto& h = hosts_[f.target];
      h.part_from = f.at.count();
      h.part_until = f.until.count();
      at(f.at.count(), ek::partition_begin, f.target, 0);
      break;
    }
    case fault_kind::spawn_failure:
      procs_[f.target].flags |= f_spawn_fail;
      break;
    case fault_kind::agent_failure:
      hosts_[f.target].agent_fails = true;
      break;
    case fault_kind::lost_exit:
      procs_[f.target].flags |= f_lost_exit;
      break;
    case fault_kind::launcher_signal:
      break;
    case fault_kind::forged_call:
      at(f.at.count(), ek::forged_call, f.target, 0);
      break;
    case fault_kind::duplicate_call:
      hosts_[f.target].dup_call = true;
      break;
    case fault_kind::late_call:
      hosts_[f.target].late_call = std::max(hosts_[f.target].late_call, f.at.count());
      break;
    case fault_kind::lost_call:
      hosts_[f.target].lost_call = true;
      break;
    case fault_kind::silent_host:
      hosts_[f.target].silent = true;
      break;
    case fault_kind::ssh_failure:
      if (hosts_[f.target].ssh_failures < 255) ++hosts_[f.target].ssh_failures;
      break;
    case fault_kind::stall: {
      auto [it, fresh] = stalls_.try_emplace(f.target, f.at.count(), false);
      if (!fresh) it->second.first = std::min(it->second.first, f.at.count());
      break;
    }
  }
}

bool world::stalled_now(std::uint32_t rank) const {
  if (stalls_.empty()) return false;
  const auto it = stalls_.find(rank);
  return it != stalls_.end() && now_ >= it->second.first;
}

// pmd reads /proc; here a rank progresses (its CPU time and written bytes grow with the clock)
// until its stall fault, then stands still in the state a blocked process shows.
void world::sample_ranks(std::uint32_t host, const agent::sample_ranks& x) {
  agent::ranks_sampled r;
  r.ranks.reserve(x.ranks.size());
  for (const auto& [rank, pid] : x.ranks) {
    agent::rank_sample s;
    s.rank = rank;
    if (rank >= procs_.size() || procs_[rank].state != pstate::running ||
        procs_[rank].host != host) {
      s.gone = true;
      r.ranks.push_back(std::move(s));
      continue;
    }
    std::int64_t until = now_;
    if (stalled_now(rank)) {
      auto& st = stalls_.find(rank)->second;
      until = st.first;
      s.state = 'S';
      s.wchan = "stalled";
      if (!st.second) {
        st.second = true;
        ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::stall)];
        line("!! rank " + std::to_string(rank) + " stalls");
      }
    } else {
      s.state = 'R';
    }
    s.cpu_ms = static_cast<std::uint64_t>(until / 1'000'000);
    s.written = s.cpu_ms;
    r.ranks.push_back(std::move(s));
  }
  feed_agent(host, std::move(r));
}

// A stranger calls the launcher with a wrong token, claiming to be `host`: the gate must refuse
// it, whatever the state of the job.
void world::on_forged_call(std::uint32_t host) {
  ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::forged_call)];
  std::string forged;
  static constexpr char digits[] = "0123456789abcdef";
  for (int i = 0; i < 64; ++i) forged.push_back(digits[rng_.next() & 15]);
  if (forged == token_) forged[0] = forged[0] == '0' ? '1' : '0';
  const auto v = gate_->judge(srun::greeting(forged, host_name(host)));
  if (v.kind == srun::caller_gate::verdict::accept) {
    correctness("a caller with a forged token became the stream of " + host_name(host));
    return;
  }
  ++result_.stats.callers_refused;
  line("!! a forged caller claims to be " + host_name(host) + ": refused (" + v.why + ")");
}

namespace {
// The endpoints count in whole milliseconds, and their ticks run on a 1 ms grid.
constexpr std::int64_t ms_slack = 2'000'000;
}  // namespace

// After a crash or a cut, the launcher must notice within the link's promise from when the host
// fell silent, or when the hello deadline runs out if the agent never said hello.
void world::on_crash(std::uint32_t host) {
  auto& h = hosts_[host];
  if (h.crashed) return;
  const bool used = map_->node_of_host(host).has_value();
  if (used) ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::host_crash)];
  if (h.agent && !h.agent_done) --agents_pending_;
  h.crashed = true;
  line("!! " + host_name(host) + " crashes");
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x400 + std::uint64_t{host});
  for_ranks_on_host(host, [&](std::uint32_t rank) {
    auto& p = procs_[rank];
    if (p.state == pstate::running || p.state == pstate::spawning ||
        (p.flags & leftover_alive) != 0) {
      if (p.state == pstate::running || p.state == pstate::spawning) --live_procs_;
      if ((p.flags & leftover_alive) != 0) --leftovers_alive_;
      p.state = pstate::gone;
      p.flags = static_cast<std::uint8_t>(p.flags & ~leftover_alive);
      h.last_death = now_;
    }
    clients_.erase(rank);
  });
  servers_.erase(host);
  // Its agent and its end of the link vanish without a word: no end-of-stream, only silence.
  // What it wrote before is on the wire and still arrives; what comes for it is lost, and so are
  // the ssh connections of the children it relayed (their agents hear nothing more).
  h.agent.reset();
  h.agent_end.reset();
  h.down.drop();
  for (const auto c : h.children) hosts_[c].ssh = carrier::none;
  h.children.clear();
  if (h.open_at >= 0 && !h.lost && !h.agent_fails) {
    // Bytes it sent while cut off are held until the heal: its silence begins when they arrive.
    const bool cut = h.part_from >= 0 && now_ >= h.part_from && now_ < h.part_until;
    const auto silent_from = cut ? h.part_until : now_;
    const auto bound =
        std::max(silent_from + detection_promise(), h.open_at + s_.latency.hello_timeout.count()) +
        ms_slack;
    h.detect_bound = std::max(h.detect_bound, bound);
  }
}

// The launcher asked for the host the first time. One that crashed before (its agent never
// answers) must be given up by the link's hello deadline, which counts from now.
void world::first_opened(std::uint32_t host, std::int64_t at) {
  auto& h = hosts_[host];
  h.open_at = at;
  if (h.crashed && !h.lost) {
    h.detect_bound = std::max(h.detect_bound, at + s_.latency.hello_timeout.count() + ms_slack);
  }
}

void world::on_partition(std::uint32_t host) {
  auto& h = hosts_[host];
  if (h.open_at < 0 || h.crashed || h.agent_fails) return;
  ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::partition)];
  h.partition_fired = true;
  line("!! " + host_name(host) + " is cut off until " + format_duration(sim_time(h.part_until)));
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x500 + std::uint64_t{host});
  // Nothing crosses until it heals (arrival() holds the bytes back): both ends may notice the
  // silence, by their own timers. If they do, the launcher must by this bound.
  if (!h.lost) {
    const auto bound =
        std::max(now_ + detection_promise(), h.open_at + s_.latency.hello_timeout.count()) +
        ms_slack;
    h.detect_bound = std::max(h.detect_bound, bound);
  }
}

// The launcher (pmrun, or the embedding program) receives a signal.
void world::on_launcher_signal(int signo) {
  line("!! the launcher receives " + signal_name(signo));
  hash_.add(static_cast<std::uint64_t>(now_));
  hash_.add(0x600 + static_cast<std::uint64_t>(signo));
  if (!ctl_finished_)
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::launcher_signal)];
  feed_launcher(
      [&](launch::actions& out) { launcher_->signal(link::link_time(now_), signo, out); });
}

}  // namespace pm::sim
