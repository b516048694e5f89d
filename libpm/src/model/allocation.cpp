#include "pm/allocation.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pm/error.hpp"

namespace pm {

const char* to_string(allocation_source source) noexcept {
  switch (source) {
    case allocation_source::implicit_local:
      return "implicit_local";
    case allocation_source::host_list:
      return "host_list";
    case allocation_source::hostfile:
      return "hostfile";
    case allocation_source::slurm:
      return "slurm";
    case allocation_source::pbs:
      return "pbs";
    case allocation_source::api:
      return "api";
  }
  return "unknown";
}

std::uint64_t allocation::total_slots() const noexcept {
  std::uint64_t total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total;
}

std::optional<std::uint32_t> allocation::find(std::string_view name) const noexcept {
  for (std::uint32_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].name == name) return i;
  }
  return std::nullopt;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(errc::parse, "cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace pm
