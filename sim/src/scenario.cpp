// Scenarios as printable values: durations, scripts, faults, and the pmsim arguments.
#include "pm/sim/scenario.hpp"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "pm/error.hpp"
#include "pm/rank_map.hpp"
#include "pm/sim/random.hpp"
#include "topologies.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm::sim {

namespace {

using namespace std::chrono_literals;

[[noreturn]] void usage(const std::string& message) {
  throw error(errc::usage, message);
}

// A printable rendering of user text inside a message (no control characters).
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  return out + "'";
}

template <class T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::uint32_t parse_u32(std::string_view text, std::string_view what) {
  auto v = parse_number<std::uint32_t>(text);
  if (!v) usage(std::string(what) + ": invalid number " + quoted(text));
  return *v;
}

int parse_int(std::string_view text, std::string_view what) {
  auto v = parse_number<int>(text);
  if (!v) usage(std::string(what) + ": invalid number " + quoted(text));
  return *v;
}

// "INT", "SIGINT" or a number: one of the signals a launcher handles.
int parse_launcher_signal(std::string_view text, std::string_view what) {
  std::string_view name = text;
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) {
    if (name == ::sigabbrev_np(signo) || parse_number<int>(text) == signo) return signo;
  }
  usage(std::string(what) + ": " + quoted(text) +
        " is not a signal the launcher handles (INT, TERM, HUP, USR1, USR2, TSTP, CONT)");
}

// Splits "a@b" at the first `sep`; second is empty without it.
std::pair<std::string_view, std::string_view> split(std::string_view text, char sep) {
  const auto at = text.find(sep);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + 1)};
}

// Writes `value` (nanoseconds) in units of `unit` nanoseconds with a trimmed decimal fraction.
std::string decimal(std::int64_t value, std::int64_t unit, const char* suffix) {
  std::string out = std::to_string(value / unit);
  std::int64_t frac = value % unit;
  if (frac != 0) {
    std::string digits;
    for (std::int64_t u = unit / 10; u > 0; u /= 10) {
      digits += static_cast<char>('0' + (frac / u) % 10);
    }
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out + suffix;
}

}  // namespace

std::string format_duration(sim_time d) {
  std::int64_t ns = d.count();
  std::string sign;
  if (ns < 0) {
    sign = "-";
    ns = -ns;
  }
  if (ns >= 1'000'000'000) return sign + decimal(ns, 1'000'000'000, "s");
  if (ns >= 1'000'000) return sign + decimal(ns, 1'000'000, "ms");
  if (ns >= 1'000) return sign + decimal(ns, 1'000, "us");
  if (ns == 0) return "0s";
  return sign + std::to_string(ns) + "ns";
}

sim_time parse_duration(std::string_view text, std::string_view what) {
  const auto bad = [&]() -> sim_time {
    usage(std::string(what) + ": invalid duration " + quoted(text) + " (e.g. 1.5s, 20ms)");
  };
  std::size_t digits_end = 0;
  while (digits_end < text.size() &&
         ((text[digits_end] >= '0' && text[digits_end] <= '9') || text[digits_end] == '.')) {
    ++digits_end;
  }
  const auto number = text.substr(0, digits_end);
  const auto unit_text = text.substr(digits_end);
  std::int64_t unit = 0;
  if (unit_text.empty() || unit_text == "s") {
    unit = 1'000'000'000;
  } else if (unit_text == "ms") {
    unit = 1'000'000;
  } else if (unit_text == "us") {
    unit = 1'000;
  } else if (unit_text == "ns") {
    unit = 1;
  } else if (unit_text == "m") {
    unit = 60'000'000'000;
  } else if (unit_text == "h") {
    unit = 3'600'000'000'000;
  } else {
    return bad();
  }
  auto [whole_text, frac_text] = split(number, '.');
  if (whole_text.empty() && frac_text.empty()) return bad();
  std::int64_t whole = 0;
  if (!whole_text.empty()) {
    auto v = parse_number<std::int64_t>(whole_text);
    if (!v || *v > 1'000'000'000'000'000 / unit) return bad();
    whole = *v;
  }
  std::int64_t frac_ns = 0;
  std::int64_t scale = unit;
  for (char c : frac_text) {
    if (c < '0' || c > '9') return bad();
    if (scale % 10 != 0) return bad();  // finer than a nanosecond
    scale /= 10;
    frac_ns += (c - '0') * scale;
  }
  return sim_time(whole * unit + frac_ns);
}

std::string to_string(const process_script& s) {
  std::string out;
  switch (s.end) {
    case process_script::ending::exit:
      out = "exit:" + std::to_string(s.value);
      break;
    case process_script::ending::signal:
      out = "signal:" + std::to_string(s.value);
      break;
    case process_script::ending::hang:
      out = "hang";
      break;
    case process_script::ending::abort:
      out = "abort:" + std::to_string(s.value);
      break;
  }
  if (s.at && s.end != process_script::ending::hang) out += "@" + format_duration(*s.at);
  for (const auto& c : s.calls) {
    out += c.what == pmix_call::kind::fence ? "+fence" : "+spawn:" + std::to_string(c.count);
    out += "@" + format_duration(c.at);
  }
  if (s.ignore_term) out += "+ignore-term";
  if (s.slow_start.count() != 0) out += "+slow=" + format_duration(s.slow_start);
  if (s.out_bytes != 0) out += "+out=" + std::to_string(s.out_bytes);
  if (s.close_early) out += "+close-early";
  if (s.leftover) out += "+leftover";
  return out;
}

process_script parse_script(std::string_view text) {
  const std::string what = "script " + quoted(text);
  process_script s;
  // A PMIx call, "fence@T" or "spawn:K@T" (T: 0 when left out); false: not one.
  const auto parse_call = [&](std::string_view step) {
    auto [kind_value, time] = split(step, '@');
    auto [kind, value] = split(kind_value, ':');
    pmix_call c;
    if (kind == "fence") {
      if (!value.empty()) usage(what + ": 'fence' takes no value");
    } else if (kind == "spawn") {
      c.what = pmix_call::kind::spawn;
      const auto n = parse_number<std::uint32_t>(value);
      if (!n || *n == 0) usage(what + ": spawn needs a rank count, e.g. spawn:2@1s");
      c.count = *n;
    } else {
      return false;
    }
    if (!time.empty()) c.at = parse_duration(time, what);
    // Sorted by time, stable: the order of two calls at the same time is the script's.
    auto it = std::upper_bound(s.calls.begin(), s.calls.end(), c,
                               [](const pmix_call& a, const pmix_call& b) { return a.at < b.at; });
    s.calls.insert(it, c);
    return true;
  };
  auto [head, rest] = split(text, '+');
  if (parse_call(head)) {
    // The default ending, the calls before it.
    head = "exit:0";
  }
  auto [kind_time, unused] = std::pair{head, std::string_view{}};
  (void)unused;
  auto [kind_value, time] = split(kind_time, '@');
  auto [kind, value] = split(kind_value, ':');
  if (kind == "exit") {
    s.end = process_script::ending::exit;
  } else if (kind == "signal") {
    s.end = process_script::ending::signal;
  } else if (kind == "hang") {
    s.end = process_script::ending::hang;
  } else if (kind == "abort") {
    s.end = process_script::ending::abort;
  } else {
    usage(what + ": unknown kind " + quoted(kind) + " (exit, signal, hang, abort)");
  }
  if (s.end == process_script::ending::hang) {
    if (!value.empty() || !time.empty()) usage(what + ": 'hang' takes no value or time");
  } else {
    if (value.empty())
      usage(what + ": " + std::string(kind) + " needs a value, e.g. " + std::string(kind) + ":7");
    s.value = parse_int(value, what);
    if (s.end == process_script::ending::exit && (s.value < 0 || s.value > 255))
      usage(what + ": exit codes are 0..255");
    if (s.end == process_script::ending::signal && (s.value < 1 || s.value > 64))
      usage(what + ": signals are 1..64");
    if (!time.empty()) s.at = parse_duration(time, what);
  }
  while (!rest.empty()) {
    auto [flag, more] = split(rest, '+');
    rest = more;
    auto [name, arg] = split(flag, '=');
    if (name == "ignore-term") {
      s.ignore_term = true;
    } else if (name == "slow") {
      s.slow_start = parse_duration(arg, what);
    } else if (name == "out") {
      auto v = parse_number<std::uint64_t>(arg);
      if (!v) usage(what + ": invalid byte count " + quoted(arg));
      s.out_bytes = *v;
    } else if (name == "close-early") {
      s.close_early = true;
    } else if (name == "leftover") {
      s.leftover = true;
    } else if (!arg.empty() || !parse_call(flag)) {
      usage(what + ": unknown option " + quoted(name) +
            " (ignore-term, slow=T, out=N, close-early, leftover, fence@T, spawn:K@T)");
    }
  }
  return s;
}

const char* to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::host_crash:
      return "crash";
    case fault_kind::partition:
      return "partition";
    case fault_kind::spawn_failure:
      return "spawn-fail";
    case fault_kind::agent_failure:
      return "agent-fail";
    case fault_kind::lost_exit:
      return "lost-exit";
    case fault_kind::launcher_signal:
      return "launcher-signal";
    case fault_kind::forged_call:
      return "forged-call";
    case fault_kind::duplicate_call:
      return "dup-call";
    case fault_kind::late_call:
      return "late-call";
    case fault_kind::lost_call:
      return "lost-call";
    case fault_kind::silent_host:
      return "silent";
    case fault_kind::ssh_failure:
      return "ssh-fail";
    case fault_kind::stall:
      return "stall";
  }
  return "?";
}

std::string to_string(const fault& f) {
  if (f.kind == fault_kind::launcher_signal) {
    const char* abbrev = ::sigabbrev_np(static_cast<int>(f.target));
    return std::string("launcher-signal:") +
           (abbrev != nullptr ? std::string(abbrev) : std::to_string(f.target)) + "@" +
           format_duration(f.at);
  }
  std::string out = std::string(to_string(f.kind)) + ":" + std::to_string(f.target);
  if (f.kind == fault_kind::host_crash || f.kind == fault_kind::forged_call ||
      f.kind == fault_kind::late_call || f.kind == fault_kind::stall)
    out += "@" + format_duration(f.at);
  if (f.kind == fault_kind::partition)
    out += "@" + format_duration(f.at) + "-" + format_duration(f.until);
  return out;
}

fault parse_fault(std::string_view text) {
  const std::string what = "fault " + quoted(text);
  auto [kind_target, time] = split(text, '@');
  auto [kind, target] = split(kind_target, ':');
  fault f;
  if (kind == "crash") {
    f.kind = fault_kind::host_crash;
  } else if (kind == "partition") {
    f.kind = fault_kind::partition;
  } else if (kind == "spawn-fail") {
    f.kind = fault_kind::spawn_failure;
  } else if (kind == "agent-fail") {
    f.kind = fault_kind::agent_failure;
  } else if (kind == "lost-exit") {
    f.kind = fault_kind::lost_exit;
  } else if (kind == "launcher-signal") {
    f.kind = fault_kind::launcher_signal;
  } else if (kind == "forged-call") {
    f.kind = fault_kind::forged_call;
  } else if (kind == "dup-call") {
    f.kind = fault_kind::duplicate_call;
  } else if (kind == "late-call") {
    f.kind = fault_kind::late_call;
  } else if (kind == "lost-call") {
    f.kind = fault_kind::lost_call;
  } else if (kind == "silent") {
    f.kind = fault_kind::silent_host;
  } else if (kind == "ssh-fail") {
    f.kind = fault_kind::ssh_failure;
  } else if (kind == "stall") {
    f.kind = fault_kind::stall;
  } else {
    usage(what + ": unknown kind " + quoted(kind) +
          " (crash, partition, spawn-fail, agent-fail, lost-exit, launcher-signal, forged-call, "
          "dup-call, late-call, lost-call, silent, ssh-fail, stall)");
  }
  if (target.empty()) usage(what + ": missing target, e.g. " + std::string(kind) + ":3");
  if (f.kind == fault_kind::launcher_signal) {
    f.target = static_cast<std::uint32_t>(parse_launcher_signal(target, what));
    if (time.empty()) usage(what + ": a launcher signal needs a time, e.g. launcher-signal:INT@2s");
    f.at = parse_duration(time, what);
    return f;
  }
  f.target = parse_u32(target, what);
  if (f.kind == fault_kind::host_crash || f.kind == fault_kind::forged_call ||
      f.kind == fault_kind::late_call || f.kind == fault_kind::stall) {
    if (time.empty())
      usage(what + ": a " + std::string(kind) + " needs a time, e.g. " + std::string(kind) +
            ":3@1s");
    f.at = parse_duration(time, what);
  } else if (f.kind == fault_kind::partition) {
    auto [from, to] = split(time, '-');
    if (from.empty() || to.empty())
      usage(what + ": a partition needs a time range, e.g. partition:3@1s-5s");
    f.at = parse_duration(from, what);
    f.until = parse_duration(to, what);
    if (f.until <= f.at) usage(what + ": the partition must end after it begins");
  } else if (!time.empty()) {
    usage(what + ": " + std::string(kind) + " takes no time");
  }
  return f;
}

std::string to_string(const app_segment& a) {
  std::string out = std::to_string(a.np);
  if (a.script) out += "=" + to_string(*a.script);
  return out;
}

app_segment parse_app(std::string_view text) {
  const std::string what = "app " + quoted(text);
  auto [np, script] = split(text, '=');
  app_segment a;
  a.np = parse_u32(np, what);
  if (a.np == 0) usage(what + ": an app needs at least one rank");
  if (!script.empty()) a.script = parse_script(script);
  return a;
}

const process_script& scenario::script_of(std::uint32_t rank) const {
  auto it = std::lower_bound(scripts.begin(), scripts.end(), rank,
                             [](const auto& entry, std::uint32_t r) { return entry.first < r; });
  if (it != scripts.end() && it->first == rank) return it->second;
  return default_script;
}

void scenario::set_script(std::uint32_t rank, process_script s) {
  auto it = std::lower_bound(scripts.begin(), scripts.end(), rank,
                             [](const auto& entry, std::uint32_t r) { return entry.first < r; });
  if (it != scripts.end() && it->first == rank)
    it->second = std::move(s);
  else
    scripts.insert(it, {rank, std::move(s)});
}

std::vector<std::string> scenario::to_args() const {
  std::vector<std::string> a;
  const scenario d;
  const auto add = [&](std::string flag, std::string value) {
    a.push_back(std::move(flag));
    a.push_back(std::move(value));
  };
  const auto duration = [&](const char* flag, sim_time v, sim_time def) {
    if (v != def) add(flag, format_duration(v));
  };
  if (!host_slots.empty()) {
    std::string list;
    for (auto n : host_slots) list += (list.empty() ? "" : ",") + std::to_string(n);
    add("--host-slots", list);
  } else {
    add("--hosts", std::to_string(hosts));
    add("--slots", std::to_string(slots));
  }
  if (np && apps.empty()) add("--np", std::to_string(*np));
  for (const auto& app : apps) add("--app", to_string(app));
  if (const auto by = map_by_arg(mapping); !by.empty()) add("--map-by", by);
  if (mapping.oversubscribe.value_or(false)) a.push_back("--oversubscribe");
  if (!control.abort_on_failure) a.push_back("--no-abort");
  if (control.notify_failures) a.push_back("--notify-failures");
  duration("--kill-grace", control.kill_grace, d.control.kill_grace);
  duration("--timeout", control.timeout, d.control.timeout);
  duration("--stall-timeout", control.stall_timeout, d.control.stall_timeout);
  if (control.streams_per_rank != d.control.streams_per_rank)
    add("--streams", std::to_string(control.streams_per_rank));
  if (max_restarts != 0) add("--max-restarts", std::to_string(max_restarts));
  if (scripts_every_incarnation) a.push_back("--scripts-every-incarnation");
  if (!spares) a.push_back("--no-spares");
  if (min_hosts != 0) add("--min-hosts", std::to_string(min_hosts));
  if (enable_recovery) a.push_back("--enable-recovery");
  const auto& l = latency;
  const auto& dl = d.latency;
  duration("--link", l.link, dl.link);
  duration("--link-jitter", l.link_jitter, dl.link_jitter);
  duration("--agent-hop", l.agent_hop, dl.agent_hop);
  if (l.fanout != dl.fanout) add("--fanout", std::to_string(l.fanout));
  if (l.concurrent_starts != dl.concurrent_starts)
    add("--concurrent-starts", std::to_string(l.concurrent_starts));
  duration("--spawn", l.spawn, dl.spawn);
  duration("--spawn-jitter", l.spawn_jitter, dl.spawn_jitter);
  duration("--reaction", l.reaction, dl.reaction);
  duration("--heartbeat", l.heartbeat_interval, dl.heartbeat_interval);
  duration("--heartbeat-timeout", l.heartbeat_timeout, dl.heartbeat_timeout);
  duration("--hello-timeout", l.hello_timeout, dl.hello_timeout);
  duration("--run-time", l.run_time, dl.run_time);
  duration("--run-jitter", l.run_jitter, dl.run_jitter);
  if (!(default_script == d.default_script)) add("--default", to_string(default_script));
  for (const auto& [rank, s] : scripts) add("--rank", std::to_string(rank) + "=" + to_string(s));
  for (const auto& f : faults) add("--fault", to_string(f));
  if (connect_back) a.push_back("--connect-back");
  append_topology_args(*this, a);
  add("--seed", std::to_string(seed));
  return a;
}

std::string scenario::replay_command() const {
  std::string out = "build/bin/pmsim";
  // A topology summary holds ';' and '|': quoted so that the line replays as it is (the
  // words a shell reads plainly, '=' among them here, are left as they are).
  const auto plain = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("-_.,:=@+/%").find(c) != std::string_view::npos;
  };
  for (const auto& arg : to_args()) {
    out += " ";
    out += std::all_of(arg.begin(), arg.end(), plain) ? arg : ssh::shell_quote(arg);
  }
  return out;
}

std::vector<fault> generate_faults(const scenario& s, std::uint64_t seed, std::uint32_t count,
                                   sim_time within) {
  const auto hosts =
      s.host_slots.empty() ? s.hosts : static_cast<std::uint32_t>(s.host_slots.size());
  std::uint64_t ranks = 0;
  if (!s.apps.empty()) {
    for (const auto& app : s.apps) ranks += app.np;
  } else if (s.np) {
    ranks = *s.np;
  } else {
    for (std::uint32_t h = 0; h < hosts; ++h)
      ranks += s.host_slots.empty() ? s.slots : s.host_slots[h];
  }
  if (hosts == 0 || ranks == 0) usage("--random-faults: the scenario has no hosts or ranks");
  prng rng(seed ^ 0x6661756c7473ull);  // "faults": not the world's stream for the same seed
  const std::int64_t span = std::max<std::int64_t>(1, within.count());
  std::vector<fault> plan;
  std::vector<bool> partitioned(hosts, false);
  for (std::uint32_t i = 0; i < count; ++i) {
    fault f;
    switch (rng.below(7)) {
      case 0:
        f.kind = fault_kind::host_crash;
        f.target = static_cast<std::uint32_t>(rng.below(hosts));
        f.at = sim_time(rng.between(0, span));
        break;
      case 1:
        f.kind = fault_kind::partition;
        f.target = static_cast<std::uint32_t>(rng.below(hosts));
        if (partitioned[f.target]) continue;  // one partition per host
        partitioned[f.target] = true;
        f.at = sim_time(rng.between(0, span));
        f.until = f.at + sim_time(rng.between(std::chrono::nanoseconds(100ms).count(),
                                              std::chrono::nanoseconds(8s).count()));
        break;
      case 2:
        f.kind = fault_kind::spawn_failure;
        f.target = static_cast<std::uint32_t>(rng.below(ranks));
        break;
      case 3:
        f.kind = fault_kind::agent_failure;
        f.target = static_cast<std::uint32_t>(rng.below(hosts));
        break;
      case 4:
        f.kind = fault_kind::silent_host;
        f.target = static_cast<std::uint32_t>(rng.below(hosts));
        break;
      case 5: {
        // During the set-up: before the agents' hellos (an agent hop is 20 ms by default).
        f.kind = fault_kind::launcher_signal;
        static constexpr int signals[] = {SIGINT, SIGTERM};
        f.target = static_cast<std::uint32_t>(signals[rng.below(2)]);
        f.at = sim_time(rng.between(1, std::chrono::nanoseconds(50ms).count()));
        break;
      }
      default: {
        f.kind = fault_kind::launcher_signal;
        static constexpr int signals[] = {SIGINT, SIGTERM, SIGUSR1};
        f.target = static_cast<std::uint32_t>(signals[rng.below(3)]);
        f.at = sim_time(rng.between(1, span));
        break;
      }
    }
    plan.push_back(f);
  }
  return plan;
}

allocation make_allocation(const scenario& s) {
  allocation a;
  a.source = allocation_source::api;
  const auto count =
      s.host_slots.empty() ? s.hosts : static_cast<std::uint32_t>(s.host_slots.size());
  if (count == 0) usage("the simulated cluster needs at least one host");
  a.hosts.reserve(count);
  for (std::uint32_t h = 0; h < count; ++h) {
    host entry;
    entry.name = "node" + std::to_string(h);
    entry.slots = s.host_slots.empty() ? s.slots : s.host_slots[h];
    a.hosts.push_back(std::move(entry));
  }
  return a;
}

void check_targets(const scenario& s, std::uint32_t hosts, std::uint32_t ranks) {
  check_topologies(s, hosts);
  for (const auto& [rank, script] : s.scripts)
    if (rank >= ranks)
      usage("--rank " + std::to_string(rank) + ": no such rank (the job has " +
            std::to_string(ranks) + " ranks)");
  std::vector<bool> partitioned;
  for (const auto& f : s.faults) {
    if (f.kind == fault_kind::launcher_signal) continue;
    const bool call = f.kind == fault_kind::forged_call || f.kind == fault_kind::duplicate_call ||
                      f.kind == fault_kind::late_call || f.kind == fault_kind::lost_call;
    if (call && !s.connect_back)
      usage("fault '" + to_string(f) + "': a caller's fault needs --connect-back");
    if (f.kind == fault_kind::ssh_failure && s.connect_back)
      usage("fault '" + to_string(f) + "': no ssh with --connect-back");
    const bool on_host = f.kind == fault_kind::host_crash || f.kind == fault_kind::partition ||
                         f.kind == fault_kind::agent_failure || f.kind == fault_kind::silent_host ||
                         f.kind == fault_kind::ssh_failure || call;
    if (on_host && f.target >= hosts)
      usage("fault '" + to_string(f) + "': no host " + std::to_string(f.target) +
            " (the cluster has " + std::to_string(hosts) + " hosts)");
    if (!on_host && f.target >= ranks)
      usage("fault '" + to_string(f) + "': no rank " + std::to_string(f.target) + " (the job has " +
            std::to_string(ranks) + " ranks)");
    if (f.kind != fault_kind::partition) continue;
    if (partitioned.empty()) partitioned.resize(hosts);
    if (partitioned[f.target])
      usage("fault '" + to_string(f) + "': node" + std::to_string(f.target) +
            " has a partition already (one per host)");
    partitioned[f.target] = true;
  }
}

void check(const scenario& s) {
  const auto map = map_job(make_job(s), make_allocation(s));
  check_targets(s, static_cast<std::uint32_t>(map.allocation().hosts.size()), map.size());
}

job_spec make_job(const scenario& s) {
  job_spec j;
  if (s.apps.empty()) j.apps.push_back(app_context{{"app"}, s.np, {}, {}});
  for (std::size_t i = 0; i < s.apps.size(); ++i)
    j.apps.push_back(app_context{{"app" + std::to_string(i)}, s.apps[i].np, {}, {}});
  j.mapping = s.mapping;
  return j;
}

}  // namespace pm::sim
