#include "transport/srun/caller_gate.hpp"

#include "model/host_name.hpp"
#include "text/printable.hpp"
#include "transport/srun/connect_back.hpp"

namespace pm::srun {

void caller_gate::expect(std::uint32_t host, std::string_view node) {
  const auto key = model::host_key(node);
  by_node_[key] = entry{host, true, false};
  node_of_[host] = key;
}

void caller_gate::forget(std::uint32_t host) {
  const auto it = node_of_.find(host);
  if (it == node_of_.end()) return;
  auto& e = by_node_[it->second];
  e.expected = false;
  e.called = false;
}

bool caller_gate::called(std::uint32_t host) const {
  const auto it = node_of_.find(host);
  if (it == node_of_.end()) return false;
  const auto e = by_node_.find(it->second);
  return e != by_node_.end() && e->second.called;
}

caller_gate::verdict caller_gate::judge(std::string_view bytes) {
  verdict v;
  std::string problem;
  const auto g = parse_greeting(bytes, problem);
  if (!problem.empty()) {
    v.kind = verdict::refuse;
    v.why = problem;  // fixed texts (connect_back.cpp)
    v.reason = problem;
    return v;
  }
  if (!g) return v;  // more
  v.kind = verdict::refuse;
  const std::string node = text::untrusted(g->node);
  const auto refuse = [&](std::string why, const char* reason) {
    v.why = std::move(why);
    v.reason = reason;
    return v;
  };
  if (!same_token(g->token, token_)) {
    return refuse("wrong token (claims to be node '" + node + "')", "wrong token");
  }
  const auto it = by_node_.find(model::host_key(g->node));
  if (it == by_node_.end()) {
    return refuse("node '" + node + "' is not a host of this job", "not a host of this job");
  }
  auto& e = it->second;
  if (e.called) return refuse("node '" + node + "' has its agent already", "a second agent");
  if (!e.expected) return refuse("node '" + node + "' expects no agent now", "a late agent");
  e.called = true;
  v.kind = verdict::accept;
  v.host = e.host;
  return v;
}

}  // namespace pm::srun
