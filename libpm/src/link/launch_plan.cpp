#include "link/launch_plan.hpp"

#include "pm/error.hpp"

namespace pm::link {

namespace {

void check(const launch_plan_options& o) {
  if (o.shape == launch_shape::tree && o.fanout == 0) {
    throw error(errc::usage, "a tree launch needs a fan-out of at least 1");
  }
}

}  // namespace

launch_step plan_step(std::uint32_t host, const launch_plan_options& o) {
  check(o);
  if (o.shape == launch_shape::flat || host < o.fanout) {
    return launch_step{by_launcher, host, 1};
  }
  // Breadth first: the launcher's children are 0..k-1; host p's children are k + p*k .. k + p*k +
  // k-1. So host i >= k has parent (i - k) / k and is child (i - k) % k.
  const std::uint64_t k = o.fanout;
  const std::uint64_t i = host;
  launch_step s;
  s.parent = static_cast<std::uint32_t>((i - k) / k);
  s.child = static_cast<std::uint32_t>((i - k) % k);
  std::uint32_t depth = 2;
  for (std::uint64_t p = s.parent; p >= k; p = (p - k) / k) ++depth;
  s.depth = depth;
  return s;
}

launch_plan plan_launch(std::uint32_t hosts, const launch_plan_options& o) {
  check(o);
  launch_plan plan;
  plan.hosts.reserve(hosts);
  for (std::uint32_t h = 0; h < hosts; ++h) {
    launch_step s;
    if (o.shape == launch_shape::flat || h < o.fanout) {
      s = launch_step{by_launcher, h, 1};
    } else {
      s.parent = (h - o.fanout) / o.fanout;
      s.child = (h - o.fanout) % o.fanout;
      s.depth = plan.hosts[s.parent].depth + 1;  // parents come first
    }
    plan.hosts.push_back(s);
  }
  return plan;
}

std::uint32_t launch_plan::depth() const noexcept {
  std::uint32_t d = 0;
  for (const auto& s : hosts) d = s.depth > d ? s.depth : d;
  return d;
}

std::vector<std::uint32_t> launch_plan::children_of(std::uint32_t parent) const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h].parent == parent) out.push_back(h);
  }
  return out;
}

}  // namespace pm::link
