// A PBS node file (PBS_NODEFILE: a host per line, once per slot), parsed directly and through
// managed_allocation as pmrun reads it.
#include "allocation_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  const std::string_view text = text_of(data, size);
  pm::allocation a;
  if (attempt([&] { a = pm::parse_pbs_nodefile(text, "/var/spool/pbs/aux/1"); })) {
    check_hosts(a);
    check(a.source == pm::allocation_source::pbs, "a PBS allocation names another source");
  }
  const pm::file_reader read = [&](const std::string&) { return std::string(text); };
  std::optional<pm::allocation> managed;
  if (attempt([&] {
        managed = pm::managed_allocation({{"PBS_NODEFILE", "/var/spool/pbs/aux/1"}}, read);
      })) {
    check(managed.has_value(), "PBS_NODEFILE set but no PBS allocation");
    check_hosts(*managed);
    pm::allocation_inputs inputs;
    inputs.managed = std::move(managed);
    resolve_and_map(inputs);
  }
  return 0;
}
