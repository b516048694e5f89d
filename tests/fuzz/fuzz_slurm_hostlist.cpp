// A Slurm hostlist expression (SLURM_JOB_NODELIST: "node[01-04,07],gpu[1-2]").
#include "fuzz_support.hpp"
#include "hostlist_size.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  if (!worth_expanding(text_of(data, size))) return 0;
  std::vector<std::string> names;
  if (!attempt([&] { names = pm::expand_hostlist(text_of(data, size)); })) return 0;
  check(!names.empty(), "a hostlist expanded to no hosts");
  for (const auto& n : names) check(!n.empty(), "a hostlist expanded to an empty name");
  return 0;
}
