// The allocation parsers are total: any input gives a value or a pm::error, never a crash.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

rc::Gen<std::string> hostish() {
  // Strings made of the characters that matter to these grammars, plus anything.
  return rc::gen::oneOf(rc::gen::container<std::string>(
                            rc::gen::element('a', 'n', '0', '1', '9', '-', ',', ':', '[', ']', '(',
                                             ')', 'x', '=', ' ', '\n', '#', '.')),
                        rc::gen::arbitrary<std::string>());
}

template <class F>
void total(F&& f) {
  try {
    f();
  } catch (const pm::error&) {
  }
}

}  // namespace

RC_GTEST_PROP(AllocationParsers, NeverCrash, ()) {
  const auto text = *hostish();
  total([&] { pm::parse_host_list(text); });
  total([&] { pm::parse_hostfile(text, "f"); });
  total([&] { pm::expand_hostlist(text); });
  total([&] { pm::parse_tasks_per_node(text, 3); });
  total([&] { pm::parse_pbs_nodefile(text, "f"); });
}

RC_GTEST_PROP(AllocationParsers, RangesExpandWithPadding, ()) {
  const auto lo = *rc::gen::inRange(0, 500);
  const auto len = *rc::gen::inRange(1, 50);
  const auto width = *rc::gen::inRange(1, 5);
  auto pad = [&](int n) {
    auto s = std::to_string(n);
    return s.size() < static_cast<std::size_t>(width) ? std::string(width - s.size(), '0') + s : s;
  };
  const auto names = pm::expand_hostlist("p[" + pad(lo) + "-" + pad(lo + len - 1) + "]");
  RC_ASSERT(names.size() == static_cast<std::size_t>(len));
  RC_ASSERT(names.front() == "p" + pad(lo));
  RC_ASSERT(names.back() == "p" + pad(lo + len - 1));
}
