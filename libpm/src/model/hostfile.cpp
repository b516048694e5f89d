// Open MPI 4.1 hostfiles: "name [slots=N] [max_slots=M]", '#' comments, blank lines.
#include <string>
#include <vector>

#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace pm {

allocation parse_hostfile(std::string_view text, std::string_view filename) {
  allocation out;
  out.source = allocation_source::hostfile;
  std::vector<bool> had_slots;  // per host: a line gave slots= explicitly
  std::vector<int> bare_lines;  // per host: bare lines seen
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    auto line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    const std::string where =
        "hostfile " + std::string(filename) + ":" + std::to_string(line_no) + ": ";
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = model::trim(line);
    if (line.empty()) continue;
    // Split on blanks: the name, then key=value fields.
    std::vector<std::string_view> fields;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    const auto name = fields[0];
    if (!model::valid_host_name(name)) {
      throw error(errc::parse, where + "invalid host name '" + std::string(name) + "'");
    }
    std::optional<std::uint32_t> slots, max_slots;
    for (std::size_t f = 1; f < fields.size(); ++f) {
      const auto eq = fields[f].find('=');
      if (eq == std::string_view::npos) {
        throw error(errc::parse, where + "unexpected '" + std::string(fields[f]) +
                                     "' (expected slots=N or max_slots=N)");
      }
      const auto key = fields[f].substr(0, eq);
      const auto value = fields[f].substr(eq + 1);
      const bool is_slots = key == "slots" || key == "count" || key == "cpu";
      const bool is_max = key == "max_slots" || key == "max-slots";
      if (!is_slots && !is_max) {
        throw error(errc::parse, where + "unknown key '" + std::string(key) +
                                     "' (expected slots=N or max_slots=N)");
      }
      auto n = model::positive_count(value);
      if (!n) {
        throw error(errc::parse, where + "invalid " + std::string(key) + " value '" +
                                     std::string(value) + "' (expected a positive integer)");
      }
      (is_slots ? slots : max_slots) = *n;
    }
    if (slots && max_slots && *max_slots < *slots) {
      throw error(errc::parse, where + "max_slots=" + std::to_string(*max_slots) +
                                   " is below slots=" + std::to_string(*slots) + " for '" +
                                   std::string(name) + "'");
    }
    auto idx = out.find(name);
    if (!idx) {
      out.hosts.push_back(host{std::string(name), slots.value_or(1), max_slots.value_or(0),
                               slots.has_value(), false});
      had_slots.push_back(slots.has_value());
      bare_lines.push_back(slots ? 0 : 1);
      continue;
    }
    auto& h = out.hosts[*idx];
    if (slots || had_slots[*idx]) {
      throw error(errc::parse, where + "host '" + std::string(name) +
                                   "' is listed again; give its slots on one line only");
    }
    // A repeated bare line adds a slot each (Open MPI); the count is now given.
    ++bare_lines[*idx];
    h.slots = static_cast<std::uint32_t>(bare_lines[*idx]);
    h.slots_given = true;
    if (max_slots) h.max_slots = *max_slots;
  }
  if (out.hosts.empty()) {
    throw error(errc::parse, "hostfile " + std::string(filename) + ": no hosts in it");
  }
  return out;
}

}  // namespace pm
