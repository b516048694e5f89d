// Properties of host loss over the real agent link (rapidcheck): random host crashes and
// partitions during the launch and during the run, with heartbeats, silence and the hello deadline
// kept by the real pm::link::endpoint objects of every host. Every failure carries the pmsim
// command that replays it; every sample is run twice and must give the same trace hash.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "pm/sim/world.hpp"

namespace {

using namespace std::chrono_literals;
using pm::sim::fault;
using pm::sim::fault_kind;
using pm::sim::scenario;
using pm::sim::sim_time;

#define SIM_ASSERT(result, condition)                                                    \
  do {                                                                                   \
    if (!(condition)) RC_FAIL(std::string(#condition) + "\nreplay: " + (result).replay); \
  } while (false)

// When a fault strikes: during the launch (agents start 20-40 ms in, their hellos and the spawns
// cross right after) or during the run (the ranks run ~2 s).
sim_time gen_fault_time(bool during_launch) {
  return during_launch ? sim_time(std::chrono::microseconds(*rc::gen::inRange(0, 60'000)))
                       : sim_time(std::chrono::milliseconds(*rc::gen::inRange(60, 3000)));
}

struct plan_facts {
  std::set<std::uint32_t> crashed, partitioned;
  bool launch_crash = false, run_crash = false, launch_cut = false, run_cut = false;
  bool long_cut = false, short_cut = false;
};

scenario gen_link_scenario(plan_facts& facts) {
  scenario s;
  s.hosts = *rc::gen::inRange<std::uint32_t>(2, 13);
  s.slots = *rc::gen::inRange<std::uint32_t>(1, 5);
  s.seed = *rc::gen::arbitrary<std::uint64_t>();
  s.latency.run_time = 2s;
  s.latency.run_jitter = 500ms;
  // Faster heartbeats now and then (0.5 s, 2 s silence: the real launcher's remote defaults).
  if (*rc::gen::arbitrary<bool>()) {
    s.latency.heartbeat_interval = 500ms;
    s.latency.heartbeat_timeout = 2s;
  }
  s.latency.hello_timeout = std::chrono::seconds(*rc::gen::element(5, 20));
  s.control.abort_on_failure = *rc::gen::arbitrary<bool>();
  s.control.kill_grace = std::chrono::milliseconds(*rc::gen::element(100, 1000, 3000));
  // Sometimes an earlier failure of a rank's own.
  if (*rc::gen::weightedElement<int>({{3, 0}, {1, 1}}) == 1) {
    pm::sim::process_script fail;
    fail.value = *rc::gen::inRange(1, 4);
    fail.at = std::chrono::milliseconds(*rc::gen::inRange(0, 2000));
    s.set_script(*rc::gen::inRange<std::uint32_t>(0, s.hosts * s.slots), fail);
  }
  const auto count = *rc::gen::inRange(1, 4);
  for (int i = 0; i < count; ++i) {
    fault f;
    f.kind = *rc::gen::element(fault_kind::host_crash, fault_kind::partition);
    f.target = *rc::gen::inRange<std::uint32_t>(0, s.hosts);
    const bool during_launch = *rc::gen::arbitrary<bool>();
    f.at = gen_fault_time(during_launch);
    if (f.kind == fault_kind::host_crash) {
      if (!facts.crashed.insert(f.target).second) continue;
      (during_launch ? facts.launch_crash : facts.run_crash) = true;
    } else {
      if (!facts.partitioned.insert(f.target).second) continue;
      // Short ones heal before anyone notices; long ones outlast the silence timeout.
      const bool long_one = *rc::gen::arbitrary<bool>();
      f.until = f.at + (long_one ? std::chrono::milliseconds(*rc::gen::inRange(4000, 30000))
                                 : std::chrono::milliseconds(*rc::gen::inRange(50, 1500)));
      (during_launch ? facts.launch_cut : facts.run_cut) = true;
      (long_one ? facts.long_cut : facts.short_cut) = true;
    }
    s.faults.push_back(f);
  }
  return s;
}

bool ended_by(const pm::rank_report& rr, sim_time t) {
  return rr.state != pm::rank_state::pending && rr.state != pm::rank_state::running &&
         rr.state != pm::rank_state::lost && rr.ended_at && *rr.ended_at <= t;
}

}  // namespace

RC_GTEST_PROP(SimLinkProperty, HostLossDuringLaunchAndRunOverTheRealLink, ()) {
  plan_facts facts;
  const auto s = gen_link_scenario(facts);
  const auto r = pm::sim::run(s);
  if (r.outcome != pm::sim::verdict::ok) RC_FAIL(r.explain());
  // Determinism: the same seed, the same trace.
  const auto again = pm::sim::run(s);
  SIM_ASSERT(r, again.trace_hash == r.trace_hash);

  RC_CLASSIFY(facts.launch_crash, "crash during launch");
  RC_CLASSIFY(facts.run_crash, "crash during run");
  RC_CLASSIFY(facts.launch_cut, "partition during launch");
  RC_CLASSIFY(facts.run_cut, "partition during run");
  RC_CLASSIFY(r.stats.partitions_healed > 0, "partition healed unnoticed");
  RC_CLASSIFY(!r.hosts_lost.empty(), "host lost");
  RC_CLASSIFY(!r.agents_lost.empty(), "an agent gave up on its launcher");
  RC_CLASSIFY(r.report.cause == pm::cause_kind::host_lost, "ended by host loss");

  SIM_ASSERT(r, r.finished);
  const auto map = pm::map_job(pm::sim::make_job(s), pm::sim::make_allocation(s));
  // Every rank on a lost host is reported lost, unless it had ended before the loss.
  std::set<std::uint32_t> lost_hosts;
  for (const auto& loss : r.hosts_lost) {
    lost_hosts.insert(loss.host);
    SIM_ASSERT(r, !loss.reason.empty());
    // Only hosts a fault struck are lost, and only after it struck.
    SIM_ASSERT(r, facts.crashed.count(loss.host) + facts.partitioned.count(loss.host) > 0);
    for (const auto rank : map.ranks_on_host(loss.host)) {
      const auto& rr = r.report.ranks[rank];
      SIM_ASSERT(r, rr.state == pm::rank_state::lost || ended_by(rr, loss.at));
      if (rr.state == pm::rank_state::lost) SIM_ASSERT(r, !rr.reason.empty());
    }
  }
  for (const auto& rr : r.report.ranks) {
    if (rr.state == pm::rank_state::lost) SIM_ASSERT(r, lost_hosts.count(rr.host) == 1);
  }
  // A crashed host that ran ranks of the job while they ran is lost.
  // The job ends with the host-loss exit code unless an earlier failure decided it.
  if (!r.hosts_lost.empty()) {
    const auto first_loss = r.hosts_lost.front().at;
    bool earlier_failure = false;
    for (const auto& rr : r.report.ranks) {
      if (rr.state == pm::rank_state::exited && rr.status && !rr.status->success() && rr.ended_at &&
          *rr.ended_at <= first_loss)
        earlier_failure = true;
    }
    bool loss_hit_a_live_rank = false;
    for (const auto& loss : r.hosts_lost) {
      for (const auto rank : map.ranks_on_host(loss.host))
        loss_hit_a_live_rank |= r.report.ranks[rank].state == pm::rank_state::lost;
    }
    const bool set_up_failure = std::any_of(r.hosts_lost.begin(), r.hosts_lost.end(),
                                            [](const auto& loss) { return loss.before_hello; });
    if (r.report.cause == pm::cause_kind::host_lost) {
      SIM_ASSERT(r, r.report.exit_code == pm::exit_codes::host_lost);
    } else if (r.report.exit_code == pm::exit_codes::launch_failed) {
      // A host lost before its agent's hello: a set-up failure, not a lost host.
      SIM_ASSERT(r, set_up_failure);
      SIM_ASSERT(r, r.report.cause == pm::cause_kind::spawn_failed);
    } else if (loss_hit_a_live_rank) {
      SIM_ASSERT(r, earlier_failure);
      SIM_ASSERT(r, r.report.cause == pm::cause_kind::rank_failed);
    }
  }
  // The agent of a host cut off for good (the launcher gave up on it, it did not crash) ends its
  // ranks by itself: it gives up on the launcher within the silence timeout (or when the
  // launcher's closing reaches it after the heal), and nothing of the job runs on after its grace.
  std::map<std::uint32_t, fault> cuts;
  for (const auto& f : s.faults)
    if (f.kind == fault_kind::partition) cuts[f.target] = f;
  const auto slack = s.latency.link + s.latency.link_jitter + 2ms;  // ms counts, 1 ms tick grid
  for (const auto& loss : r.hosts_lost) {
    const auto cut = cuts.find(loss.host);
    if (cut == cuts.end() || facts.crashed.count(loss.host) > 0) continue;
    const auto agent = std::find_if(r.agents_lost.begin(), r.agents_lost.end(),
                                    [&](const auto& a) { return a.host == loss.host; });
    if (agent == r.agents_lost.end()) {
      // Its agent never ran: the launch was cut before it started (the hello deadline).
      continue;
    }
    const auto latest =
        std::max(cut->second.at + s.latency.heartbeat_timeout, cut->second.until) + slack;
    SIM_ASSERT(r, agent->at <= latest);
    SIM_ASSERT(r, agent->cleared <= agent->at + s.control.kill_grace + 1ms);
  }
  // A partition shorter than the silence timeout loses nobody on that host by itself.
  for (const auto& [host, f] : cuts) {
    if (f.until - f.at + 1ms < s.latency.heartbeat_timeout && facts.crashed.count(host) == 0 &&
        f.at > 60ms)
      SIM_ASSERT(r, lost_hosts.count(host) == 0);
  }
}
