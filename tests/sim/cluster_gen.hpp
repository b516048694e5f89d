// A generated cluster for the simulator's properties: some hosts, each with some slots, and a rank
// count that fits them.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <vector>

#include "pm/sim/scenario.hpp"

namespace pm::sim::generate {

/// 1..max_hosts hosts of 1..max_slots slots each, and 1..(their slots) ranks.
inline void hosts_and_ranks(scenario& s, std::uint32_t max_hosts, std::uint32_t max_slots) {
  const auto hosts = *rc::gen::inRange<std::uint32_t>(1, max_hosts + 1);
  s.host_slots = *rc::gen::container<std::vector<std::uint32_t>>(
      hosts, rc::gen::inRange<std::uint32_t>(1, max_slots + 1));
  std::uint32_t total = 0;
  for (auto n : s.host_slots) total += n;
  s.np = *rc::gen::inRange<std::uint32_t>(1, total + 1);
}

}  // namespace pm::sim::generate
