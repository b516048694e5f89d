// An Open MPI hostfile (--hostfile, --machinefile): parsed, resolved against this machine,
// mapped.
#include "allocation_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  pm::allocation a;
  if (!attempt([&] { a = pm::parse_hostfile(text_of(data, size), "hostfile"); })) return 0;
  check_hosts(a);
  check(a.source == pm::allocation_source::hostfile, "a hostfile allocation names another source");
  pm::allocation_inputs inputs;
  inputs.hostfile = std::move(a);
  resolve_and_map(inputs);
  return 0;
}
