// What a host discovery command prints (restart_policy::host_discovery): one `host[:slots]` a
// line, as Horovod's --host-discovery-script; blank lines and `#` comments are skipped.
#include <string>

#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {

std::vector<host> parse_discovered_hosts(std::string_view text) {
  std::string list;
  std::size_t number = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto end = text.find('\n', pos);
    auto line =
        text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    ++number;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (line.find_first_of(" \t,") != std::string_view::npos) {
      throw error(errc::parse, text::printable("line " + std::to_string(number) + ": '" +
                                               std::string(line) + "' is not host[:slots]"));
    }
    list += (list.empty() ? "" : ",") + std::string(line);
  }
  if (list.empty()) return {};
  return parse_host_list(list, "--host-discovery-script").hosts;
}

}  // namespace pm
