// Open MPI 4.1 hostfiles: "name [slots=N] [max_slots=M]", '#' comments, blank lines.
//
// The rules below were checked against mpirun 4.1 (--display-map --do-not-launch):
//   a / a            -> 2 slots (a bare line adds one)
//   a slots=2 / a    -> 3 slots (a bare line after a counted one still adds one)
//   a / a slots=2    -> error (Open MPI: "multiple definitions of the slot count")
//   a max_slots=4    -> slots 4, max 4 (the limit doubles as the count)
//   a slots = 2      -> 2 (blanks around '=' are fine)
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/parse_util.hpp"
#include "model/printable.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"

namespace pm {
namespace {
std::optional<std::uint32_t> find_in(const std::unordered_map<std::string, std::uint32_t>& index,
                                     std::string_view name) {
  const auto it = index.find(std::string(name));
  if (it == index.end()) return std::nullopt;
  return it->second;
}
}  // namespace
namespace {

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// "a slots = 2" -> "a slots=2": Open MPI's lexer reads '=' as its own token.
std::string join_equals(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (blank(c)) {
      std::size_t j = i;
      while (j < line.size() && blank(line[j])) ++j;
      const bool before_eq = j < line.size() && line[j] == '=';
      const bool after_eq = !out.empty() && out.back() == '=';
      if (!before_eq && !after_eq) out += ' ';
      i = j - 1;
      continue;
    }
    out += c;
  }
  return out;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && blank(line[i])) ++i;
    std::size_t j = i;
    while (j < line.size() && !blank(line[j])) ++j;
    if (j > i) fields.push_back(line.substr(i, j - i));
    i = j;
  }
  return fields;
}

}  // namespace

allocation parse_hostfile(std::string_view text, std::string_view filename) {
  allocation out;
  std::unordered_map<std::string, std::uint32_t> index;  // name -> position: linear find is O(n^2)
  out.source = allocation_source::hostfile;
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    auto raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (auto hash = raw.find('#'); hash != std::string_view::npos) raw = raw.substr(0, hash);
    const std::string line = join_equals(model::trim(raw));
    const auto fields = split_fields(line);
    if (fields.empty()) continue;
    const std::string where =
        "hostfile " + std::string(filename) + ":" + std::to_string(line_no) + ": ";

    const auto name = fields[0];
    if (name.find('=') != std::string_view::npos) {
      throw error(errc::parse, model::printable(where + "expected a host name before '" +
                                                std::string(name) + "'"));
    }
    if (!model::valid_host_name(name)) {
      throw error(errc::parse,
                  model::printable(where + "invalid host name '" + std::string(name) + "'"));
    }
    std::optional<std::uint32_t> slots, max_slots;
    for (std::size_t f = 1; f < fields.size(); ++f) {
      const auto eq = fields[f].find('=');
      if (eq == std::string_view::npos) {
        throw error(errc::parse, model::printable(where + "unexpected '" + std::string(fields[f]) +
                                                  "' (expected slots=N or max_slots=N)"));
      }
      const auto key = fields[f].substr(0, eq);
      const auto value = fields[f].substr(eq + 1);
      // count= and cpu= are older spellings Open MPI's lexer still takes for slots=.
      const bool is_slots = key == "slots" || key == "count" || key == "cpu";
      const bool is_max = key == "max_slots" || key == "max-slots";
      if (!is_slots && !is_max) {
        throw error(errc::parse, model::printable(where + "unknown key '" + std::string(key) +
                                                  "' (expected slots=N or max_slots=N)"));
      }
      auto n = model::positive_count(value);
      if (!n) {
        throw error(errc::parse,
                    model::printable(where + "invalid " + std::string(key) + " value '" +
                                     std::string(value) + "' (expected a positive integer)"));
      }
      auto& target = is_slots ? slots : max_slots;
      if (target) {
        throw error(errc::parse, model::printable(where + "'" + std::string(key) +
                                                  "' given twice for '" + std::string(name) + "'"));
      }
      target = *n;
    }

    host* h = nullptr;
    if (auto idx = find_in(index, name)) {
      h = &out.hosts[*idx];
      if (slots) {
        throw error(errc::parse,
                    model::printable(where + "host '" + std::string(name) +
                                     "' is listed again; give its slots on one line only"));
      }
      // A repeated line without slots= adds one slot; the count is now known.
      if (h->slots == UINT32_MAX) {
        throw error(errc::parse,
                    model::printable(where + "too many slots for '" + std::string(name) + "'"));
      }
      ++h->slots;
      h->slots_given = true;
      if (max_slots) h->max_slots = *max_slots;
    } else {
      host fresh;
      fresh.name = std::string(name);
      // max_slots alone: Open MPI takes the limit as the count too.
      fresh.slots = slots ? *slots : max_slots.value_or(1);
      fresh.max_slots = max_slots.value_or(0);
      fresh.slots_given = slots.has_value() || max_slots.has_value();
      index.emplace(fresh.name, static_cast<std::uint32_t>(out.hosts.size()));
      out.hosts.push_back(std::move(fresh));
      h = &out.hosts.back();
    }
    if (h->max_slots != 0 && h->max_slots < h->slots) {
      throw error(errc::parse,
                  model::printable(where + "max_slots=" + std::to_string(h->max_slots) +
                                   " is below slots=" + std::to_string(h->slots) + " for '" +
                                   std::string(name) + "'"));
    }
  }
  if (out.hosts.empty()) {
    throw error(errc::parse,
                model::printable("hostfile " + std::string(filename) + ": no hosts in it"));
  }
  return out;
}

}  // namespace pm
