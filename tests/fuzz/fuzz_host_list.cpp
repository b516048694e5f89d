// A -H/--host list ("a,b:4,bob@c"): parsed, resolved against this machine, mapped; then the
// same list as the selection from a hostfile that holds its hosts (Open MPI's -H with --hostfile).
#include "allocation_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  pm::allocation a;
  if (!attempt([&] { a = pm::parse_host_list(text_of(data, size), "-H"); })) return 0;
  check_hosts(a);
  pm::allocation_inputs inputs;
  inputs.host_list = a;
  resolve_and_map(inputs);

  // The hostfile the list selects from: the same hosts, more slots.
  pm::allocation file = a;
  file.source = pm::allocation_source::hostfile;
  for (auto& h : file.hosts) h.slots = h.slots < 1000 ? h.slots + 1 : h.slots;
  inputs.hostfile = std::move(file);
  resolve_and_map(inputs);
  return 0;
}
