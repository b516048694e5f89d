// slot_ledger: which slots of a DVM's hosts the jobs on it hold (docs/dvm.md, "Sharing the
// slots"). Pure: the DVM's server feeds it claims, ends and lost hosts, and reads what is free.
//
// A job claims a count of slots on each host it maps ranks to; a claim is all or nothing, and is
// refused when a host is lost or has fewer free slots than asked (without oversubscription: a job
// that oversubscribes claims only what is free and shares the rest). Slots come back when the
// job ends. A lost host is never free again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pm/allocation.hpp"

namespace pm::dvm_parts {

class slot_ledger {
 public:
  explicit slot_ledger(allocation hosts);

  /// The hosts that are not lost, each with the slots no job holds (max_slots likewise less what
  /// is held); none is this machine's (a DVM's agents are all reached the same way).
  allocation free() const;
  /// Every host that is not lost, with all its slots: what a job may wait for.
  allocation whole() const;
  std::uint32_t free_slots() const;

  /// Claims `slots` (host name -> count) for `job`, added to what it holds: nullopt when done,
  /// else one line why not. `share` (a job that oversubscribes): only what is free of each count,
  /// the rest shared.
  std::optional<std::string> claim(std::uint64_t job,
                                   const std::map<std::string, std::uint32_t>& slots,
                                   bool share = false);
  /// `job`'s slots come back.
  void release(std::uint64_t job);
  /// What `job` holds.
  std::map<std::string, std::uint32_t> held(std::uint64_t job) const;

  /// `name` is lost: never free again. False when it is no host of the DVM.
  bool lose(const std::string& name);
  bool lost(const std::string& name) const;
  /// Host names, in the allocation's order, and each one's slots held now.
  const allocation& hosts() const noexcept { return hosts_; }
  std::uint32_t used(const std::string& name) const;

 private:
  allocation hosts_;
  std::vector<bool> lost_;
  std::map<std::uint64_t, std::map<std::string, std::uint32_t>> claims_;
};

}  // namespace pm::dvm_parts
