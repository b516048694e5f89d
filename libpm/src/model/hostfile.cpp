// Open MPI 4.1 hostfiles: "[user@]name [slots=N] [max_slots=M] [username=U] [port=P]", '#'
// comments, blank lines.
//
// The rules below were checked against mpirun 4.1 (--display-map --do-not-launch):
//   a / a            -> 2 slots (a bare line adds one)
//   a slots=2 / a    -> 3 slots (a bare line after a counted one still adds one)
//   a / a slots=2    -> error (Open MPI: "multiple definitions of the slot count")
//   a max_slots=4    -> slots 4, max 4 (the limit doubles as the count)
//   a slots = 2      -> 2 (blanks around '=' are fine)
// and for ssh (mpirun 4.1.4 with a plm_rsh_agent that prints its argv):
//   bob@a            -> "bob@a" to the agent
//   a username=bob   -> the same; user_name= and user-name= too; user= is a parse error
//   alice@a username=bob -> bob (we refuse the contradiction instead)
//   a port=2222      -> "-p 2222" to the agent; port=0 and port=99999 are passed on unchecked
//                       (we refuse them); port=abc is an error
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
using model::find_in;
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

    if (fields[0].find('=') != std::string_view::npos) {
      throw error(errc::parse, text::printable(where + "expected a host name before '" +
                                               std::string(fields[0]) + "'"));
    }
    const auto [user, name, has_at] = model::split_user_at_host(fields[0]);
    if (has_at && user.empty()) {
      throw error(errc::parse,
                  text::printable(where + "empty user name in '" + std::string(fields[0]) + "'"));
    }
    if (has_at && !model::valid_user_name(user)) {
      throw error(errc::parse,
                  text::printable(where + "invalid user name '" + std::string(user) + "'"));
    }
    if (name.empty()) {
      throw error(errc::parse,
                  text::printable(where + "empty host name in '" + std::string(fields[0]) + "'"));
    }
    if (!model::valid_host_name(name)) {
      throw error(errc::parse,
                  text::printable(where + "invalid host name '" + std::string(name) + "'"));
    }
    std::optional<std::uint32_t> slots, max_slots;
    std::optional<std::string_view> username;
    std::optional<std::uint16_t> port;
    constexpr std::string_view expected =
        " (expected slots=N, max_slots=N, username=NAME or port=N)";
    for (std::size_t f = 1; f < fields.size(); ++f) {
      const auto eq = fields[f].find('=');
      if (eq == std::string_view::npos) {
        throw error(errc::parse, text::printable(where + "unexpected '" + std::string(fields[f]) +
                                                 "'" + std::string(expected)));
      }
      const auto key = fields[f].substr(0, eq);
      const auto value = fields[f].substr(eq + 1);
      // `name` is a structured binding, which clang 14 cannot capture: captured by copy.
      auto given_twice = [&, host_name = name] {
        return error(errc::parse,
                     text::printable(where + "'" + std::string(key) + "' given twice for '" +
                                     std::string(host_name) + "'"));
      };
      // Open MPI's lexer also takes user_name= and user-name= (not user=: a parse error there).
      if (key == "username" || key == "user_name" || key == "user-name") {
        if (!model::valid_user_name(value)) {
          throw error(errc::parse, text::printable(where + "invalid " + std::string(key) +
                                                   " value '" + std::string(value) +
                                                   "' (expected a user name: letters, digits, "
                                                   "'.', '_', '-')"));
        }
        if (username) throw given_twice();
        username = value;
        continue;
      }
      if (key == "port") {
        const auto p = model::port_number(value);
        if (!p) {
          throw error(errc::parse,
                      text::printable(where + "invalid port value '" + std::string(value) +
                                      "' (expected a port number 1..65535)"));
        }
        if (port) throw given_twice();
        port = *p;
        continue;
      }
      // count= and cpu= are older spellings Open MPI's lexer still takes for slots=.
      const bool is_slots = key == "slots" || key == "count" || key == "cpu";
      const bool is_max = key == "max_slots" || key == "max-slots";
      if (!is_slots && !is_max) {
        throw error(errc::parse, text::printable(where + "unknown key '" + std::string(key) + "'" +
                                                 std::string(expected)));
      }
      auto n = model::positive_count(value);
      if (!n) {
        throw error(errc::parse,
                    text::printable(where + "invalid " + std::string(key) + " value '" +
                                    std::string(value) + "' (expected a positive integer)"));
      }
      auto& target = is_slots ? slots : max_slots;
      if (target) throw given_twice();
      target = *n;
    }
    if (username && has_at && *username != user) {
      throw error(errc::parse, text::printable(where + "user '" + std::string(user) +
                                               "' and username=" + std::string(*username) +
                                               " disagree for '" + std::string(name) + "'"));
    }
    host reach;  // how ssh reaches the host, as this line says
    reach.user = std::string(username ? *username : user);
    reach.port = port.value_or(0);

    host* h = nullptr;
    if (auto idx = find_in(index, name)) {
      h = &out.hosts[*idx];
      if (const auto conflict = model::reach_conflict(*h, reach); !conflict.empty()) {
        throw error(errc::parse, text::printable(where + "host '" + std::string(name) +
                                                 "' is listed again " + conflict));
      }
      if (slots) {
        throw error(errc::parse,
                    text::printable(where + "host '" + std::string(name) +
                                    "' is listed again; give its slots on one line only"));
      }
      // A repeated line without slots= adds one slot; the count is now known.
      if (h->slots == UINT32_MAX) {
        throw error(errc::parse, text::printable(where + "host '" + std::string(name) +
                                                 "' adds up to more than " +
                                                 std::to_string(UINT32_MAX) + " slots (overflow)"));
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
      fresh.user = std::move(reach.user);
      fresh.port = reach.port;
      index.emplace(fresh.name, static_cast<std::uint32_t>(out.hosts.size()));
      out.hosts.push_back(std::move(fresh));
      h = &out.hosts.back();
    }
    if (h->max_slots != 0 && h->max_slots < h->slots) {
      throw error(errc::parse, text::printable(where + "max_slots=" + std::to_string(h->max_slots) +
                                               " is below slots=" + std::to_string(h->slots) +
                                               " for '" + std::string(name) + "'"));
    }
  }
  if (out.hosts.empty()) {
    throw error(errc::parse,
                text::printable("hostfile " + std::string(filename) + ": no hosts in it"));
  }
  return out;
}

}  // namespace pm
