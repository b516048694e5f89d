#include "agent/child_relay.hpp"

#include <algorithm>
#include <utility>

#include "model/overloaded.hpp"
#include "text/printable.hpp"

namespace pm::agent {

std::size_t child_relay::index(std::uint32_t host) const {
  const auto it = std::lower_bound(hosts_.begin(), hosts_.end(), host);
  return it != hosts_.end() && *it == host ? static_cast<std::size_t>(it - hosts_.begin()) : none;
}

void child_relay::remove(std::size_t i) {
  const auto at = static_cast<std::ptrdiff_t>(i);
  std::erase_if(stderr_tails_, [&](const auto& t) { return t.first == hosts_[i]; });
  hosts_.erase(hosts_.begin() + at);
  hops_.erase(hops_.begin() + at);
}

std::string& child_relay::stderr_tail(std::uint32_t host) {
  for (auto& [h, tail] : stderr_tails_) {
    if (h == host) return tail;
  }
  return stderr_tails_.emplace_back(host, std::string()).second;
}

namespace {

// The launcher's bytes for a child: followed, and a heartbeat owed goes in after them when they
// end between two frames.
void to_child(link::relay_tap& down, bool& owed, std::string& bytes) {
  down.pass(bytes, nullptr);
  if (owed && down.between_frames()) {
    const auto beat = link::relay_tap::heartbeat_frame();
    bytes.append(reinterpret_cast<const char*>(beat.data()), beat.size());
    owed = false;
  }
}

}  // namespace

bool child_relay::on_message(const link::message& m, std::vector<child_action>& out) {
  if (const auto* o = std::get_if<link::child_open>(&m)) {
    if (index(o->host) != none || o->argv.empty()) {
      out.push_back(send{link::child_closed{o->host, -1, 0, "a second start of the same host"}});
      return true;
    }
    const auto at = std::lower_bound(hosts_.begin(), hosts_.end(), o->host) - hosts_.begin();
    hosts_.insert(hosts_.begin() + at, o->host);
    hop h;
    h.stopping = kill_at_.has_value();
    hops_.insert(hops_.begin() + at, h);
    out.push_back(start_child{o->host, o->argv, kill_at_.has_value()});
    return true;
  }
  if (const auto* d = std::get_if<link::child_data>(&m)) {
    const auto i = index(d->host);
    if (i != none && !hops_[i].stopping) {
      write_child w{d->host, d->bytes};
      to_child(hops_[i].down, hops_[i].beat_owed, w.bytes);
      out.push_back(std::move(w));
    }
    return true;
  }
  if (const auto* c = std::get_if<link::child_close>(&m)) {
    const auto i = index(c->host);
    if (i != none) {
      hops_[i].stopping = true;
      out.push_back(stop_child{c->host});
    }
    return true;
  }
  return false;
}

bool child_relay::on_message(link::message& m, std::vector<child_action>& out) {
  auto* d = std::get_if<link::child_data>(&m);
  if (d == nullptr) return on_message(std::as_const(m), out);
  const auto i = index(d->host);
  if (i != none && !hops_[i].stopping) {
    write_child w{d->host, std::move(d->bytes)};
    to_child(hops_[i].down, hops_[i].beat_owed, w.bytes);
    out.push_back(std::move(w));
  }
  return true;
}

void child_relay::tick(time now, std::chrono::milliseconds every, std::chrono::milliseconds silence,
                       std::vector<child_action>& out) {
  if (hosts_.empty() || kill_at_) return;
  // Silent children first: each is ended (its ssh stopped) and reported now, not when ssh ends.
  if (silence.count() > 0) {
    for (std::size_t i = 0; i < hosts_.size();) {
      auto& h = hops_[i];
      const std::chrono::milliseconds quiet(ms_of(now) - h.heard_ms);  // (unsigned: wraps)
      if (hops_[i].stopping || !h.up.framed() || h.up.lost_track() || quiet < silence) {
        ++i;
        continue;
      }
      const auto host = hosts_[i];
      remove(i);
      out.push_back(stop_child{host});
      link::child_closed closed{host, -1, 0, {}};
      closed.silent_ms = static_cast<std::uint32_t>(std::max<std::int64_t>(1, quiet.count()));
      out.push_back(send{std::move(closed)});
    }
  }
  if (every.count() <= 0 || now < next_beat_) return;
  next_beat_ = now + every - every / 4;
  const auto beat = link::relay_tap::heartbeat_frame();
  for (std::size_t i = 0; i < hosts_.size(); ++i) {
    auto& h = hops_[i];
    // After the launcher's hello (a heartbeat before it would break the child's link).
    if (hops_[i].stopping || !h.down.framed() || h.down.lost_track()) continue;
    if (!h.down.between_frames()) {
      h.beat_owed = true;
      continue;
    }
    out.push_back(write_child{
        hosts_[i], std::string(reinterpret_cast<const char*>(beat.data()), beat.size())});
  }
}

void child_relay::handle(time now, child_event e, std::vector<child_action>& out) {
  std::visit(
      overloaded{
          [&](child_start_failed& f) {
            if (const auto i = index(f.host); i != none) remove(i);
            out.push_back(send{link::child_closed{f.host, -1, 0, std::move(f.reason)}});
          },
          [&](child_output& o) {
            const auto i = index(o.host);
            if (i == none) return;
            auto& h = hops_[i];
            h.heard_ms = ms_of(now);
            h.up.pass(o.bytes, &h.held);
            if (o.bytes.empty()) return;  // heartbeats alone: they end here
            out.push_back(send{link::child_data{o.host, std::move(o.bytes)}});
          },
          [&](child_said& s) {
            const auto i = index(s.host);
            if (i == none) return;
            auto& tail = stderr_tail(s.host);
            tail += s.bytes;
            if (tail.size() > kept_stderr) tail.erase(0, tail.size() - kept_stderr);
          },
          [&](const child_ended& x) {
            const auto i = index(x.host);
            if (i == none) return;
            std::string said;
            for (const auto& [h, tail] : stderr_tails_) {
              if (h == x.host) said = text::last_line(tail);
            }
            link::child_closed closed{x.host, x.signo != 0 ? -1 : x.code, x.signo, std::move(said)};
            remove(i);
            out.push_back(send{std::move(closed)});
          },
      },
      e);
}

void child_relay::end_all(time now, std::vector<child_action>& out) {
  if (!kill_at_) {
    kill_at_ = now + end_sequence.grace;
    for (std::size_t i = 0; i < hosts_.size(); ++i) {
      hops_[i].stopping = true;
      out.push_back(close_child_input{hosts_[i]});
    }
    return;
  }
  if (now < *kill_at_) return;
  for (const auto host : hosts_) out.push_back(kill_child{host, end_sequence.last_signal});
}

}  // namespace pm::agent
