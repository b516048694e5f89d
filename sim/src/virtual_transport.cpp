// The virtual transport: what the launcher's open_host and close_host do to simulated hosts, as
// the ssh and srun transports do to real ones. ssh starts one agent per host, at most
// `concurrent_starts` set-ups at once (a slot frees when the agent said hello or ssh ended); each
// start is an agent hop. srun starts every agent in one step, and each agent calls the launcher,
// judged by the srun transport's real caller_gate. Closing a stream ends ssh with the agent, or
// kills it 200 ms later (a crashed or cut-off host), and says how in ssh's words (ssh_end).
#include <signal.h>

#include <algorithm>

#include "transport/srun/connect_back.hpp"
#include "transport/ssh/ssh_command.hpp"
#include "world_impl.hpp"

namespace pm::sim {

namespace {
// ssh_transport's stop steps: SIGTERM after this, if ssh did not end with its agent.
constexpr std::int64_t ssh_stop_ns = 200'000'000;
}  // namespace

void world::open_host(std::uint32_t host) {
  auto& h = hosts_[host];
  h.parent = no_host;
  if (h.open_at < 0) first_opened(host, now_);
  h.up_ended = false;
  h.established = false;
  const auto hop = s_.latency.agent_hop.count();
  if (s_.connect_back) {
    // One srun step starts every agent at once; each calls back when it runs.
    gate_->expect(host, host_name(host));
    h.ssh = carrier::running;
    h.called = false;
    greetings_.erase(host);
    std::int64_t start = now_ + hop + jitter(sim_time(hop / 4));
    if (h.late_call > start) start = h.late_call;  // the call, and so all it says, comes then
    schedule_agent(host, start);
    return;
  }
  h.ssh = carrier::waiting;
  ssh_queue_.push_back(host);
  while (setting_up_ < std::max<std::uint32_t>(1, s_.latency.concurrent_starts) &&
         ssh_queue_head_ < ssh_queue_.size())
    start_ssh(ssh_queue_[ssh_queue_head_++]);
}

void world::start_ssh(std::uint32_t host) {
  auto& h = hosts_[host];
  if (h.ssh != carrier::waiting) return;  // closed while it waited
  h.ssh = carrier::running;
  h.slot_held = true;
  ++setting_up_;
  answer_later({launcher_answer::kind::stream_opened,
                host,
                0,
                static_cast<std::uint64_t>(carrier_pid_base + host),
                {}});
  const auto hop = s_.latency.agent_hop.count();
  schedule_agent(host, now_ + hop + jitter(sim_time(hop / 4)));
}

void world::release_slot(std::uint32_t host) {
  auto& h = hosts_[host];
  if (!h.slot_held) return;
  h.slot_held = false;
  --setting_up_;
  while (setting_up_ < std::max<std::uint32_t>(1, s_.latency.concurrent_starts) &&
         ssh_queue_head_ < ssh_queue_.size())
    start_ssh(ssh_queue_[ssh_queue_head_++]);
  if (ssh_queue_head_ == ssh_queue_.size()) {
    ssh_queue_.clear();
    ssh_queue_head_ = 0;
  }
}

// The agent of `host` will run at `start` (later if its link is cut then: ssh waits).
void world::schedule_agent(std::uint32_t host, std::int64_t start) {
  auto& h = hosts_[host];
  if (h.part_from >= 0 && start >= h.part_from && start < h.part_until) start = h.part_until;
  ++h.starts;
  h.agent_start = start;
  h.down.last_arrival = std::max(h.down.last_arrival, start);
  h.up.last_arrival = std::max(h.up.last_arrival, start);
  h.spawn_free = start;
  ++agents_pending_;
  at(start, ek::agent_starts, host, h.starts & sim_event::max_b);
}

// The launcher is done with the stream of a host it reached itself: what its end still holds
// goes out, then the end of the stream (the agent sees it when it arrives); ssh ends with the
// agent, or is killed.
void world::close_host(std::uint32_t host) {
  auto& h = hosts_[host];
  flush_launcher(host, h);
  if (gate_) gate_->forget(host);  // no caller becomes it any more
  const auto t = arrival(h, h.down, now_, h.agent_start);
  h.down.push_end(t);
  at(t, ek::link_arrival, host, 0);
  release_slot(host);
  if (h.ssh == carrier::waiting || s_.connect_back) {
    // A start still waiting for a slot never begins; srun's caller is simply hung up on.
    h.ssh = carrier::none;
    answer_later({launcher_answer::kind::carrier_ended, host, 0, 0, {}});
    return;
  }
  if (h.up_ended) {
    carrier_done(host, h.exit_code, 0);
    return;
  }
  h.ssh = carrier::closing;
  at(now_ + ssh_stop_ns, ek::carrier_end, host, h.starts & sim_event::max_b);
}

void world::on_carrier_end(std::uint32_t host, std::uint32_t start) {
  auto& h = hosts_[host];
  if (h.ssh != carrier::closing || (h.starts & sim_event::max_b) != start) return;
  feed_launcher([&](launch::actions& out) {
    h.ssh = carrier::none;
    launcher_->carrier_ended(
        link::link_time(now_), host,
        ssh::ssh_end(map_->allocation().hosts[host], "pmd", -1, SIGTERM, h.established, ""), out);
  });
}

// ssh ended with its agent's side of the stream (`code`: the remote command's exit status).
void world::carrier_done(std::uint32_t host, int code, int signo) {
  auto& h = hosts_[host];
  h.ssh = carrier::none;
  const std::string_view said = carrier_said(h);
  answer_later(
      {launcher_answer::kind::carrier_ended, host, 0, 0,
       ssh::ssh_end(map_->allocation().hosts[host], "pmd", code, signo, h.established, said)});
}

// Connect-back: what arrives before the host's caller was accepted is the call's greeting, read
// up to its newline and judged by the launcher's caller_gate (the real one, as the srun transport
// feeds it). True when `bytes` (the rest after the greeting) go on to the link.
bool world::pass_call(std::uint32_t host, host_rec& h, std::span<const std::uint8_t>& bytes) {
  if (h.call_refused) return false;  // a closed caller
  const auto nl = std::find(bytes.begin(), bytes.end(), std::uint8_t{'\n'});
  const auto take = static_cast<std::size_t>(nl - bytes.begin()) + (nl != bytes.end() ? 1 : 0);
  auto& greeting = greetings_[host];
  greeting.append(reinterpret_cast<const char*>(bytes.data()), take);
  bytes = bytes.subspan(take);
  const auto v = gate_->judge(greeting);
  if (v.kind == srun::caller_gate::verdict::more) return false;
  ++result_.stats.calls;
  if (v.kind == srun::caller_gate::verdict::refuse) {
    refuse_call(host, h, v.why);
    return false;
  }
  if (v.host != host) correctness("the caller of " + host_name(host) + " became another host's");
  h.called = true;
  line("   the agent on " + host_name(host) + " called back");
  if (h.dup_call) {
    // Its second call (a retried connect) comes right behind the first: refused.
    ++result_.stats.faults_fired[static_cast<std::size_t>(fault_kind::duplicate_call)];
    ++result_.stats.calls;
    const auto again = gate_->judge(greeting);
    if (again.kind == srun::caller_gate::verdict::accept) {
      correctness("a second caller became the stream of " + host_name(host));
    } else {
      ++result_.stats.callers_refused;
      line("!! a second call of the agent on " + host_name(host) + ": refused (" + again.why + ")");
    }
  }
  greetings_.erase(host);
  // The caller is the host's stream now: the launcher writes what it holds (hello, setup, ...).
  feed_launcher(
      [&](launch::actions& out) { launcher_->stream_opened(link::link_time(now_), host, 0, out); });
  return !bytes.empty();
}

// A refused caller's connection is closed: its agent reads the end and exits.
void world::refuse_call(std::uint32_t host, host_rec& h, const std::string& why) {
  h.call_refused = true;
  ++result_.stats.callers_refused;
  line("!! the launcher refuses the call of the agent on " + host_name(host) + ": " + why);
  const auto t = arrival(h, h.down, now_, h.agent_start);
  h.down.push_end(t);
  at(t, ek::link_arrival, host, 0);
}

}  // namespace pm::sim
