#include "agent/child_relay.hpp"

#include "model/printable.hpp"

namespace pm::agent {

namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

}  // namespace

bool child_relay::on_message(const link::message& m, std::vector<child_action>& out) {
  if (const auto* o = std::get_if<link::child_open>(&m)) {
    if (children_.contains(o->host) || o->argv.empty()) {
      out.push_back(send{link::child_closed{o->host, -1, 0, "a second start of the same host"}});
      return true;
    }
    children_[o->host].stopping = kill_at_.has_value();
    out.push_back(start_child{o->host, o->argv, kill_at_.has_value()});
    return true;
  }
  if (const auto* d = std::get_if<link::child_data>(&m)) {
    auto it = children_.find(d->host);
    if (it != children_.end() && !it->second.stopping) {
      out.push_back(write_child{d->host, d->bytes});
    }
    return true;
  }
  if (const auto* c = std::get_if<link::child_close>(&m)) {
    auto it = children_.find(c->host);
    if (it != children_.end()) {
      it->second.stopping = true;
      out.push_back(stop_child{c->host});
    }
    return true;
  }
  return false;
}

void child_relay::handle(child_event e, std::vector<child_action>& out) {
  std::visit(overloaded{
                 [&](child_start_failed& f) {
                   children_.erase(f.host);
                   out.push_back(send{link::child_closed{f.host, -1, 0, std::move(f.reason)}});
                 },
                 [&](child_output& o) {
                   if (!children_.contains(o.host)) return;
                   out.push_back(send{link::child_data{o.host, std::move(o.bytes)}});
                 },
                 [&](child_said& s) {
                   auto it = children_.find(s.host);
                   if (it == children_.end()) return;
                   auto& tail = it->second.stderr_tail;
                   tail += s.bytes;
                   if (tail.size() > kept_stderr) tail.erase(0, tail.size() - kept_stderr);
                 },
                 [&](const child_ended& x) {
                   auto it = children_.find(x.host);
                   if (it == children_.end()) return;
                   link::child_closed closed{x.host, x.signo != 0 ? -1 : x.code, x.signo,
                                             model::last_line(it->second.stderr_tail)};
                   children_.erase(it);
                   out.push_back(send{std::move(closed)});
                 },
             },
             e);
}

void child_relay::end_all(time now, std::vector<child_action>& out) {
  if (!kill_at_) {
    kill_at_ = now + end_sequence.grace;
    for (auto& [host, c] : children_) {
      c.stopping = true;
      out.push_back(close_child_input{host});
    }
    return;
  }
  if (now < *kill_at_) return;
  for (const auto& [host, c] : children_) out.push_back(kill_child{host, end_sequence.last_signal});
}

}  // namespace pm::agent
