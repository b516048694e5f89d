// Linux's cpu list form ("0-3,8,10-11"): what /proc/<pid>/status says in Cpus_allowed_list, what
// taskset -c takes, and how a rank's binding travels on the link and appears in reports.
#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"

namespace pm::topo {

std::string cpu_list(std::span<const std::uint32_t> cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<std::uint32_t> parse_cpu_list(std::string_view text) {
  // Bounded: a list from another host names at most this many cpus (hwloc's largest machines
  // have a few thousand).
  constexpr std::uint32_t most = 1u << 16;
  std::vector<std::uint32_t> out;
  const auto bad = [&] {
    throw pm::error(errc::parse, "bad cpu list '" + std::string(text.substr(0, 64)) + "'");
  };
  const auto number = [&](std::string_view s) {
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n >= most) bad();
    return n;
  };
  std::size_t at = 0;
  while (at < text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const auto item = text.substr(at, comma - at);
    const auto dash = item.find('-');
    const auto first = number(item.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (last < first || (!out.empty() && first <= out.back())) bad();
    for (auto c = first; c <= last; ++c) out.push_back(c);
    at = comma + 1;
    if (comma + 1 == text.size()) bad();  // a trailing comma
  }
  return out;
}

}  // namespace pm::topo
