#include "dvm/slot_ledger.hpp"

#include <algorithm>

namespace pm::dvm_parts {

slot_ledger::slot_ledger(allocation hosts) : hosts_(std::move(hosts)) {
  for (auto& h : hosts_.hosts) h.local = false;
  lost_.assign(hosts_.hosts.size(), false);
}

std::uint32_t slot_ledger::used(const std::string& name) const {
  std::uint32_t n = 0;
  for (const auto& [job, slots] : claims_) {
    if (auto it = slots.find(name); it != slots.end()) n += it->second;
  }
  return n;
}

allocation slot_ledger::whole() const {
  allocation out = hosts_;
  out.hosts.clear();
  for (std::size_t i = 0; i < hosts_.hosts.size(); ++i) {
    if (!lost_[i]) out.hosts.push_back(hosts_.hosts[i]);
  }
  return out;
}

allocation slot_ledger::free() const {
  allocation out = whole();
  std::vector<host> kept;
  for (auto h : out.hosts) {
    const auto u = used(h.name);
    h.slots = h.slots > u ? h.slots - u : 0;
    if (h.max_slots != 0) h.max_slots = h.max_slots > u ? h.max_slots - u : 0;
    // A host with nothing free stays out: the mapper would place on it otherwise.
    if (h.slots > 0) kept.push_back(std::move(h));
  }
  out.hosts = std::move(kept);
  return out;
}

std::uint32_t slot_ledger::free_slots() const {
  std::uint32_t n = 0;
  for (const auto& h : free().hosts) n += h.slots;
  return n;
}

std::optional<std::string> slot_ledger::claim(std::uint64_t job,
                                              const std::map<std::string, std::uint32_t>& slots,
                                              bool share) {
  std::map<std::string, std::uint32_t> taken;
  for (const auto& [name, count] : slots) {
    const auto found = hosts_.find(name);
    if (!found) return "'" + name + "' is no host of this DVM";
    if (lost_[*found]) return "host " + name + " was lost";
    const auto& h = hosts_.hosts[*found];
    const auto u = used(name);
    const auto room = h.slots > u ? h.slots - u : 0;
    if (count > room && !share) {
      return "host " + name + " has " + std::to_string(room) + " free slots, not " +
             std::to_string(count);
    }
    if (const auto n = std::min(count, room); n > 0) taken[name] = n;
  }
  auto& mine = claims_[job];
  for (const auto& [name, count] : taken) mine[name] += count;
  return std::nullopt;
}

void slot_ledger::release(std::uint64_t job) {
  claims_.erase(job);
}

std::map<std::string, std::uint32_t> slot_ledger::held(std::uint64_t job) const {
  auto it = claims_.find(job);
  return it == claims_.end() ? std::map<std::string, std::uint32_t>{} : it->second;
}

bool slot_ledger::lose(const std::string& name) {
  const auto found = hosts_.find(name);
  if (!found) return false;
  lost_[*found] = true;
  return true;
}

bool slot_ledger::lost(const std::string& name) const {
  const auto found = hosts_.find(name);
  return found && lost_[*found];
}

}  // namespace pm::dvm_parts
