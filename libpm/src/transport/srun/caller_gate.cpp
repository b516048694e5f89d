#include "transport/srun/caller_gate.hpp"

#include "model/host_name.hpp"
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
    v.why = problem;
    return v;
  }
  if (!g) return v;  // more
  v.kind = verdict::refuse;
  if (!same_token(g->token, token_)) {
    v.why = "wrong token (claims to be node '" + g->node + "')";
    return v;
  }
  const auto it = by_node_.find(model::host_key(g->node));
  if (it == by_node_.end()) {
    v.why = "node '" + g->node + "' is not a host of this job";
    return v;
  }
  auto& e = it->second;
  if (e.called) {
    v.why = "node '" + g->node + "' has its agent already";
    return v;
  }
  if (!e.expected) {
    v.why = "node '" + g->node + "' expects no agent now";
    return v;
  }
  e.called = true;
  v.kind = verdict::accept;
  v.host = e.host;
  return v;
}

}  // namespace pm::srun
