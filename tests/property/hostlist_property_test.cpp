// Properties of the allocation parsers beyond "any text gives a value or a pm::error" (that one is
// in allocation_parsers_property_test.cpp): generated well-formed inputs expand and round-trip
// exactly, every error names its source, and resolve_allocation keeps the slots it merges.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/host_name.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace {

std::string pad(std::uint64_t n, std::size_t width) {
  auto s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

// A literal piece of a host name (possibly empty): the characters Slurm and mpirun accept.
rc::Gen<std::string> literal() {
  return rc::gen::container<std::string>(
      rc::gen::elementOf(std::string("abcnodegpuXYZ0123456789-._")));
}

// A bracket group "[lo-hi]" or "[n]" and the numbers it stands for, padding kept.
struct group {
  std::string text;
  std::vector<std::string> numbers;
};

rc::Gen<group> bracket_group() {
  return rc::gen::exec([] {
    const auto width = *rc::gen::inRange<std::size_t>(1, 6);
    const auto lo = *rc::gen::inRange<std::uint64_t>(0, 2000);
    const auto len = *rc::gen::inRange<std::uint64_t>(1, 12);
    group g;
    const auto hi = lo + len - 1;
    g.text =
        len == 1 ? "[" + pad(lo, width) + "]" : "[" + pad(lo, width) + "-" + pad(hi, width) + "]";
    for (auto n = lo; n <= hi; ++n) g.numbers.push_back(pad(n, width));
    return g;
  });
}

// Runs f and returns the pm::error message, or "" when f returned; any other exception escapes
// and fails the property.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pm::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

RC_GTEST_PROP(HostlistProperty, PrefixRangeSuffixExpandsWithPaddingKept, ()) {
  const auto prefix = *literal();
  const auto suffix = *literal();
  const auto g = *bracket_group();
  const auto names = pm::expand_hostlist(prefix + g.text + suffix);
  RC_ASSERT(names.size() == g.numbers.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    RC_ASSERT(names[i] == prefix + g.numbers[i] + suffix);
}

RC_GTEST_PROP(HostlistProperty, SeveralGroupsMultiplyInSlurmOrder, ()) {
  const auto a = *bracket_group();
  const auto b = *bracket_group();
  const auto names = pm::expand_hostlist("r" + a.text + "-n" + b.text + "-ib");
  RC_ASSERT(names.size() == a.numbers.size() * b.numbers.size());
  std::size_t i = 0;
  for (const auto& x : a.numbers) {  // the first group varies slowest, as Slurm writes them
    for (const auto& y : b.numbers) RC_ASSERT(names[i++] == "r" + x + "-n" + y + "-ib");
  }
}

RC_GTEST_PROP(HostlistProperty, ACommaListIsTheConcatenationOfItsItems, ()) {
  const auto count = *rc::gen::inRange(1, 5);
  std::string expr;
  std::vector<std::string> expected;
  for (int i = 0; i < count; ++i) {
    // A letter first keeps every item non-empty; groups may join with commas inside brackets.
    const auto prefix = "h" + *literal();
    std::string item = prefix;
    std::vector<std::string> names;
    if (*rc::gen::arbitrary<bool>()) {
      const auto g1 = *bracket_group();
      const auto g2 = *bracket_group();
      // "[1-3,7]": two groups' bodies in one bracket.
      item += "[" + g1.text.substr(1, g1.text.size() - 2) + "," +
              g2.text.substr(1, g2.text.size() - 2) + "]";
      for (const auto& n : g1.numbers) names.push_back(prefix + n);
      for (const auto& n : g2.numbers) names.push_back(prefix + n);
    } else {
      names.push_back(prefix);
    }
    expr += (expr.empty() ? "" : ",") + item;
    expected.insert(expected.end(), names.begin(), names.end());
  }
  RC_ASSERT(pm::expand_hostlist(expr) == expected);
}

RC_GTEST_PROP(HostlistProperty, OversizedExpansionsAreRefusedQuickly, ()) {
  // Any range or product past the cap is an error, never an allocation of billions of strings.
  const auto lo = *rc::gen::inRange<std::uint64_t>(0, 1000);
  const auto extra = *rc::gen::inRange<std::uint64_t>(10'000'000, 900'000'000'000ull);
  const auto expr = "n[" + std::to_string(lo) + "-" + std::to_string(lo + extra) + "]";
  RC_ASSERT(error_of([&] { pm::expand_hostlist(expr); }) ==
            "SLURM_JOB_NODELIST '" + expr + "': expands to more than 10000000 hosts");
  const auto side = *rc::gen::inRange<std::uint64_t>(3163, 100000);  // side * side > 10^7
  const auto square = "r[1-" + std::to_string(side) + "]n[1-" + std::to_string(side) + "]";
  RC_ASSERT(error_of([&] { pm::expand_hostlist(square, "SLURM_STEP_NODELIST"); }) ==
            "SLURM_STEP_NODELIST '" + square + "': expands to more than 10000000 hosts");
}

RC_GTEST_PROP(HostlistProperty, EveryErrorNamesItsSource, ()) {
  // Text near the grammars: each parser's message starts with what the user must look at.
  const auto text =
      *rc::gen::container<std::string>(rc::gen::elementOf(std::string("an1[]-,:x()=#s \n09")));
  auto starts = [](const std::string& message, const std::string& head) {
    return message.empty() || message.rfind(head, 0) == 0;
  };
  RC_ASSERT(starts(error_of([&] { pm::parse_host_list(text, "--host"); }), "--host"));
  RC_ASSERT(starts(error_of([&] { pm::parse_hostfile(text, "hf"); }), "hostfile hf"));
  RC_ASSERT(
      starts(error_of([&] { pm::expand_hostlist(text, "SLURM_NODELIST"); }), "SLURM_NODELIST '"));
  RC_ASSERT(
      starts(error_of([&] { pm::parse_tasks_per_node(text, 3, "SLURM_STEP_TASKS_PER_NODE"); }),
             "SLURM_STEP_TASKS_PER_NODE '"));
  RC_ASSERT(starts(error_of([&] { pm::parse_pbs_nodefile(text, "nf"); }), "PBS_NODEFILE nf"));
}

RC_GTEST_PROP(HostlistProperty, TasksPerNodeRoundTrips, ()) {
  const auto runs = *rc::gen::nonEmpty(rc::gen::container<std::vector<std::pair<int, int>>>(
      rc::gen::pair(rc::gen::inRange(1, 200), rc::gen::inRange(1, 6))));
  std::string text;
  std::vector<std::uint32_t> expected;
  for (const auto& [count, repeat] : runs) {
    text += (text.empty() ? "" : ",") + std::to_string(count) +
            (repeat == 1 && *rc::gen::arbitrary<bool>() ? "" : "(x" + std::to_string(repeat) + ")");
    expected.insert(expected.end(), static_cast<std::size_t>(repeat),
                    static_cast<std::uint32_t>(count));
  }
  RC_ASSERT(pm::parse_tasks_per_node(text, expected.size()) == expected);
  // Any other node count is an error, never a silently cut or padded list.
  const auto wrong = *rc::gen::distinctFrom(rc::gen::inRange<std::size_t>(0, 40), expected.size());
  RC_ASSERT(!error_of([&] { pm::parse_tasks_per_node(text, wrong); }).empty());
}

RC_GTEST_PROP(HostlistProperty, HostfilesRoundTrip, ()) {
  const auto count = *rc::gen::inRange(1, 12);
  std::string text = "# generated\n";
  std::vector<pm::host> expected;
  for (int i = 0; i < count; ++i) {
    pm::host h;
    h.name = "n" + std::to_string(i) + "x" + *literal();  // distinct: n1x0 is never n10x
    const auto style = *rc::gen::inRange(0, 3);
    text += (*rc::gen::arbitrary<bool>() ? "  " : "") + h.name;
    if (style >= 1) {
      h.slots = *rc::gen::inRange<std::uint32_t>(1, 100);
      text += " slots=" + std::to_string(h.slots);
    }
    if (style == 2) {
      h.max_slots = h.slots + *rc::gen::inRange<std::uint32_t>(0, 5);
      text += " max_slots=" + std::to_string(h.max_slots);
    }
    h.slots_given = style >= 1;
    text += *rc::gen::arbitrary<bool>() ? "   # note\n" : "\n\n";
    expected.push_back(h);
  }
  const auto a = pm::parse_hostfile(text, "hf");
  RC_ASSERT(a.hosts == expected);
}

RC_GTEST_PROP(HostlistProperty, ResolveMergesSpellingsAndKeepsEverySlot, ()) {
  pm::local_host me;
  me.hostname = "node1";
  me.aliases = {"localhost", "node1.example.com", "10.1.2.3"};
  me.cores = 8;
  const std::vector<std::string> pool = {"node1",       "localhost", "127.0.0.1",      "10.1.2.3",
                                         "node1.other", "n2",        "n2.x.org",       "10.0.0.2",
                                         "10.0.0.3",    "n3",        "n3.example.com", "127.0.1.1"};
  const auto count = *rc::gen::inRange(1, 15);
  std::string text;
  for (int i = 0; i < count; ++i) {
    text += (text.empty() ? "" : ",") + *rc::gen::elementOf(pool) + ":" +
            std::to_string(*rc::gen::inRange(1, 50));
  }
  pm::allocation_inputs in;
  in.host_list = pm::parse_host_list(text);
  const auto a = pm::resolve_allocation(in, me);
  RC_ASSERT(a.total_slots() == in.host_list->total_slots());
  std::size_t local = 0;
  for (std::size_t i = 0; i < a.hosts.size(); ++i) {
    if (a.hosts[i].local) {
      ++local;
      RC_ASSERT(a.hosts[i].name == "node1");
    }
    for (std::size_t j = i + 1; j < a.hosts.size(); ++j)
      RC_ASSERT(!pm::model::same_host(a.hosts[i].name, a.hosts[j].name));
  }
  RC_ASSERT(local <= 1u);
}

RC_GTEST_PROP(HostlistProperty, SelectionFromSlurmKeepsItsOrderAndGrant, ()) {
  const auto nodes = *rc::gen::inRange(1, 20);
  std::string tasks;
  for (int i = 0; i < nodes; ++i)
    tasks += (tasks.empty() ? "" : ",") + std::to_string(*rc::gen::inRange(1, 9));
  const auto managed =
      *pm::slurm_allocation({{"SLURM_JOB_ID", "1"},
                             {"SLURM_JOB_NODELIST", "n[1-" + std::to_string(nodes) + "]"},
                             {"SLURM_TASKS_PER_NODE", tasks}});
  // -H: some of the nodes, in any order, with any count.
  std::string text;
  const auto picks = *rc::gen::inRange(1, 10);
  for (int i = 0; i < picks; ++i) {
    text += (text.empty() ? "" : ",") + std::string("n") +
            std::to_string(*rc::gen::inRange(1, nodes + 1)) + ":" +
            std::to_string(*rc::gen::inRange(1, 12));
  }
  pm::allocation_inputs in;
  in.managed = managed;
  in.host_list = pm::parse_host_list(text);
  pm::local_host me;
  me.hostname = "launcher";
  const auto a = pm::resolve_allocation(in, me);
  RC_ASSERT(a.hosts.size() == in.host_list->hosts.size());
  std::size_t last = 0;
  for (const auto& h : a.hosts) {
    const auto at = managed.find(h.name);
    RC_ASSERT(at.has_value());
    RC_ASSERT(*at >= last);  // the allocation's order
    last = *at;
    const auto asked = in.host_list->hosts[*in.host_list->find(h.name)].slots;
    RC_ASSERT(h.slots == std::min(asked, managed.hosts[*at].slots));
  }
}
