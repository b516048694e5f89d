// --stall-timeout on the launcher's side (docs/resilience.md, "Stalls"): each agent says when its
// host turns quiet (none of its live ranks used CPU or wrote for the timeout) and when it is
// active again; the job is stalled when every host with live ranks is quiet. The launcher then
// asks those agents what their ranks are doing, prints one line per host, and feeds the
// controller job_stalled, which ends the job as a failure (cause `stalled`).
#include <cstdio>

#include "launch/launcher_impl.hpp"

namespace pm::launch {

namespace {

std::string seconds(std::int64_t ms, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

std::string stall_line(const std::string& host, const link::stall_report& report) {
  std::string line = "stalled on " + host + ":";
  if (report.ranks.empty()) return line + " no live rank";
  bool first = true;
  for (const auto& r : report.ranks) {
    line += first ? " " : "; ";
    first = false;
    line += "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ", " +
            (r.state.empty() ? std::string("?") : r.state);
    if (!r.wchan.empty()) line += " in " + r.wchan;
    line += ", cpu " + seconds(static_cast<std::int64_t>(r.cpu_ms), 2) + " s, ";
    line += r.output_ms < 0 ? std::string("no output yet")
                            : "last output " + seconds(r.output_ms, 1) + " s ago";
    line += ")";
  }
  return line;
}

std::string stall_unanswered_line(const std::string& host,
                                  const std::vector<std::uint32_t>& ranks) {
  std::string line = "stalled on " + host + ": its agent did not answer (rank";
  line += ranks.size() == 1 ? "" : "s";
  for (const auto r : ranks) line += " " + std::to_string(r);
  return line + ")";
}

void launcher::impl::on_quiet(std::uint32_t h, const link::host_quiet& q) {
  auto& hs = hosts[h];
  if (q.quiet != hs.quiet) {
    hs.quiet = q.quiet;
    if (q.quiet) {
      ++quiet_hosts;
    } else {
      --quiet_hosts;
    }
  }
  if (q.quiet) {
    stall_due = true;
  } else if (stall_round) {
    // A rank progressed while the others were asked: the job is not stalled.
    cancel_own_timer(stall_round->timer);
    stall_round.reset();
  }
}

// Every host with live ranks is quiet (and at least one has some): ask each what its ranks do.
void launcher::impl::check_stall() {
  stall_due = false;
  if (req.control.stall_timeout.count() <= 0 || stall_round || stall_told || quiet_hosts == 0 ||
      finishing || ctl.ending() || ctl.finished()) {
    return;
  }
  std::vector<std::uint32_t> live;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if (ctl.live_on_host(h) == 0) continue;
    if (!hosts[h].quiet) return;
    live.push_back(h);
  }
  if (live.empty()) return;
  decided(job_wide, "stalled");
  stall_round.emplace();
  auto& round = *stall_round;
  round.id = ++stall_rounds;
  round.hosts = live;
  round.answers.resize(live.size());
  for (const auto h : live) {
    if (!link_usable(h) || hosts[h].closed) continue;
    send_to(h, link::stall_query{round.id});
    ++round.waiting;
  }
  if (round.waiting == 0) {
    stall_named();
    return;
  }
  round.timer = start_own_timer(stall_answer_bound, own_timer{timer_kind::stall, 0, round.id});
}

void launcher::impl::on_stall_report(std::uint32_t h, link::stall_report& r) {
  if (!stall_round || r.id != stall_round->id) return;  // a round given up on
  auto& round = *stall_round;
  for (std::size_t i = 0; i < round.hosts.size(); ++i) {
    if (round.hosts[i] != h || round.answers[i]) continue;
    round.answers[i] = std::move(r);
    if (--round.waiting == 0) stall_named();
    return;
  }
}

void launcher::impl::stall_timer_fired(std::uint64_t id) {
  if (stall_round && stall_round->id == id) {
    stall_round->timer = 0;
    stall_named();
  }
}

// One line per quiet host, ranks ascending, then the controller applies the failure policy.
void launcher::impl::stall_named() {
  auto round = std::move(*stall_round);
  stall_round.reset();
  cancel_own_timer(round.timer);
  if (ctl.ending() || finishing) return;  // a failure or a signal came first: nothing to name
  stall_told = true;
  for (std::size_t i = 0; i < round.hosts.size(); ++i) {
    const auto h = round.hosts[i];
    if (round.answers[i]) {
      out->push_back(say{stall_line(host_info(h).name, *round.answers[i])});
      continue;
    }
    std::vector<std::uint32_t> live;
    for (const auto rank : ctl.processes_on_host(h)) {
      const auto state = ctl.rank_report_of(rank).state;
      if (state == rank_state::running || state == rank_state::pending) live.push_back(rank);
    }
    out->push_back(say{stall_unanswered_line(host_info(h).name, live)});
  }
  queue.push_back(job_stalled{});
}

}  // namespace pm::launch
