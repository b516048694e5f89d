// PBS/Torque: PBS_NODEFILE lists a host once per slot.
#include <optional>
#include <string>
#include <unordered_map>

#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
using model::find_in;

allocation parse_pbs_nodefile(std::string_view text, std::string_view filename) {
  allocation out;
  std::unordered_map<std::string, std::uint32_t> index;  // name -> position: linear find is O(n^2)
  out.source = allocation_source::pbs;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    auto line = model::trim(
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (line.empty()) continue;
    if (!model::valid_host_name(line)) {
      throw error(errc::parse, text::printable("PBS_NODEFILE " + std::string(filename) + ":" +
                                               std::to_string(line_no) + ": invalid host name '" +
                                               std::string(line) + "'"));
    }
    if (auto i = find_in(index, line)) {
      if (out.hosts[*i].slots == UINT32_MAX) {  // a line per slot: 2^32 lines would wrap
        throw error(errc::parse, text::printable("PBS_NODEFILE " + std::string(filename) + ":" +
                                                 std::to_string(line_no) + ": host '" +
                                                 std::string(line) + "' adds up to more than " +
                                                 std::to_string(UINT32_MAX) + " slots (overflow)"));
      }
      ++out.hosts[*i].slots;
    } else {
      index.emplace(std::string(line), static_cast<std::uint32_t>(out.hosts.size()));
      out.hosts.push_back(host{std::string(line), 1});
    }
  }
  if (out.hosts.empty())
    throw error(errc::parse,
                text::printable("PBS_NODEFILE " + std::string(filename) + ": no hosts in it"));
  return out;
}

std::optional<allocation> managed_allocation(const env_map& env, const file_reader& read) {
  if (auto slurm = slurm_allocation(env)) return slurm;
  if (auto it = env.find("PBS_NODEFILE"); it != env.end() && !it->second.empty()) {
    return parse_pbs_nodefile(read(it->second), it->second);
  }
  return std::nullopt;
}

}  // namespace pm
