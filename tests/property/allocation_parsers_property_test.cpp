// The allocation parsers are total: any input gives a value or a pm::error (never another
// exception, never a crash); and hostlist ranges expand exactly, padding kept.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

rc::Gen<std::string> hostish() {
  // Strings made of the characters that matter to these grammars, plus anything at all.
  return rc::gen::oneOf(rc::gen::container<std::string>(rc::gen::element(
                            'a', 'n', '0', '1', '9', '-', ',', ':', '[', ']', '(', ')', 'x', '=',
                            ' ', '\t', '\r', '\n', '#', '.', '_', 's')),
                        rc::gen::container<std::string>(
                            rc::gen::elementOf(std::string("slots=max_slots=count=cpu= \n#"))),
                        rc::gen::arbitrary<std::string>());
}

// Runs f; a pm::error is a fine answer, anything else escapes and fails the property.
template <class F>
bool total(F&& f) {
  try {
    f();
    return true;
  } catch (const pm::error& e) {
    RC_ASSERT(std::string(e.what()).find('\n') == std::string::npos);  // one line
    return false;
  }
}

std::string pad(std::uint64_t n, std::size_t width) {
  auto s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

}  // namespace

RC_GTEST_PROP(AllocationParsersProperty, OnlyPmErrorIsEverThrown, ()) {
  const auto text = *hostish();
  const auto nodes = *rc::gen::inRange<std::size_t>(0, 6);
  total([&] { pm::parse_host_list(text); });
  total([&] { pm::parse_hostfile(text, "f"); });
  total([&] { pm::expand_hostlist(text); });
  total([&] { pm::parse_tasks_per_node(text, nodes); });
  total([&] { pm::parse_pbs_nodefile(text, "f"); });
  const auto other = *hostish();
  total([&] {
    pm::slurm_allocation({{"SLURM_JOB_ID", "1"},
                          {"SLURM_JOB_NODELIST", text},
                          {"SLURM_TASKS_PER_NODE", other},
                          {"SLURM_CPUS_PER_TASK", other}});
  });
  total([&] {
    pm::managed_allocation({{"PBS_NODEFILE", "f"}}, [&](const std::string&) { return text; });
  });
}

RC_GTEST_PROP(AllocationParsersProperty, ParsedHostsAreNeverEmpty, ()) {
  const auto text = *hostish();
  pm::allocation a;
  if (total([&] { a = pm::parse_hostfile(text, "f"); })) {
    RC_ASSERT(!a.hosts.empty());
    for (const auto& h : a.hosts) {
      RC_ASSERT(!h.name.empty());
      RC_ASSERT(h.slots >= 1u);
      RC_ASSERT(h.max_slots == 0u || h.max_slots >= h.slots);
    }
  }
  if (total([&] { a = pm::parse_host_list(text); })) {
    for (const auto& h : a.hosts) RC_ASSERT(!h.name.empty() && h.slots >= 1u);
  }
}

RC_GTEST_PROP(AllocationParsersProperty, RangesExpandWithPaddingKept, ()) {
  const auto lo = *rc::gen::inRange<std::uint64_t>(0, 100000);
  const auto len = *rc::gen::inRange<std::uint64_t>(1, 300);
  const auto width = *rc::gen::inRange<std::size_t>(1, 8);
  const auto hi = lo + len - 1;
  const auto names = pm::expand_hostlist("p[" + pad(lo, width) + "-" + pad(hi, width) + "]");
  RC_ASSERT(names.size() == hi - lo + 1);
  for (std::uint64_t i = 0; i < names.size(); ++i) {
    RC_ASSERT(names[i] == "p" + pad(lo + i, width));
  }
}

RC_GTEST_PROP(AllocationParsersProperty, HostListSlotsAddUp, ()) {
  const auto count = *rc::gen::inRange(1, 20);
  std::string text;
  std::uint64_t total_slots = 0;
  for (int i = 0; i < count; ++i) {
    const auto name = "h" + std::to_string(*rc::gen::inRange(0, 5));
    const auto slots = *rc::gen::inRange(1, 1000);
    text += (text.empty() ? "" : ",") + name + ":" + std::to_string(slots);
    total_slots += static_cast<std::uint64_t>(slots);
  }
  RC_ASSERT(pm::parse_host_list(text).total_slots() == total_slots);
}
