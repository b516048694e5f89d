// -H/--host: "a,b:4,bob@c:2" (mpirun's syntax).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "model/parse_util.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {
using model::find_in;

allocation parse_host_list(std::string_view text, std::string_view option) {
  allocation out;
  std::unordered_map<std::string, std::uint32_t> index;  // name -> position: linear find is O(n^2)
  out.source = allocation_source::host_list;
  const std::string opt(option);
  const std::string whole = "'" + std::string(text) + "'";
  if (text.empty()) throw error(errc::parse, text::printable(opt + ": empty host list"));
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item.empty())
      throw error(errc::parse, text::printable(opt + " " + whole + ": empty host name"));
    std::string_view name = item;
    std::uint32_t slots = 1;
    if (item.find("::") != std::string_view::npos ||
        std::count(item.begin(), item.end(), ':') >= 3) {
      // "::1", "2001:db8::1": not a name with a slot count (which would read as ":1").
      throw error(errc::parse,
                  text::printable(opt + " " + whole + ": invalid host name '" + std::string(item) +
                                  "' (IPv6 addresses are not accepted; use a host name)"));
    }
    if (auto colon = item.find(':'); colon != std::string_view::npos) {
      name = item.substr(0, colon);
      const auto count = item.substr(colon + 1);
      auto parsed = model::positive_count(count);
      if (!parsed) {
        throw error(errc::parse,
                    text::printable(opt + " " + whole + ": invalid slot count '" +
                                    std::string(count) + "' (expected a positive integer)"));
      }
      slots = *parsed;
    }
    // bob@node1: ssh logs in as bob (mpirun takes the same spelling).
    const auto [user, host_name, has_at] = model::split_user_at_host(name);
    if (has_at && user.empty()) {
      throw error(errc::parse, text::printable(opt + " " + whole + ": empty user name in '" +
                                               std::string(name) + "'"));
    }
    if (has_at && !model::valid_user_name(user)) {
      throw error(errc::parse, text::printable(opt + " " + whole + ": invalid user name '" +
                                               std::string(user) + "'"));
    }
    name = host_name;
    if (name.empty())
      throw error(errc::parse, text::printable(opt + " " + whole + ": empty host name"));
    if (!model::valid_host_name(name)) {
      throw error(errc::parse, text::printable(opt + " " + whole + ": invalid host name '" +
                                               std::string(name) + "'"));
    }
    host fresh{std::string(name), slots};
    fresh.user = std::string(user);
    if (auto i = find_in(index, name)) {
      auto& same = out.hosts[*i];
      if (const auto conflict = model::reach_conflict(same, fresh); !conflict.empty()) {
        throw error(errc::parse,
                    text::printable(opt + " " + whole + ": host '" + std::string(name) +
                                    "' is listed again " + conflict));
      }
      // A repeated host adds up, as in mpirun; past 2^32 - 1 it would wrap (to 0 for
      // a:4294967295,a:1, which fuzz_host_list found): refused instead.
      if (slots > UINT32_MAX - same.slots) {
        throw error(errc::parse, text::printable(opt + " " + whole + ": host '" +
                                                 std::string(name) + "' adds up to more than " +
                                                 std::to_string(UINT32_MAX) + " slots (overflow)"));
      }
      same.slots += slots;
    } else {
      index.emplace(std::string(name), static_cast<std::uint32_t>(out.hosts.size()));
      out.hosts.push_back(std::move(fresh));
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace pm
