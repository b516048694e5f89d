// The real machines' hwloc XML files (tests/data/topologies, docs/gpus.md) for the topology tests:
// where they are, and hwloc-calc's answers about them.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace pm::test {

/// The folder of machine topologies: $PM_TOPOLOGIES, else the copy in tests/data/topologies
/// (hwloc's own test machines, BSD-licensed: COPYING.hwloc there), so that a clean clone in CI runs
/// them.
inline std::filesystem::path topologies_dir() {
  if (const char* dir = std::getenv("PM_TOPOLOGIES")) return dir;
  return std::filesystem::path(PM_SOURCE_DIR) / "tests" / "data" / "topologies";
}

/// Every XML in it, sorted by name (empty when the folder is missing).
inline std::vector<std::filesystem::path> topology_files() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(topologies_dir(), ec)) {
    if (e.path().extension() == ".xml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// What a command printed on stdout, trailing newline removed; nullopt-like empty + ok=false
/// when it failed.
inline std::string run_command(const std::string& command, bool* ok = nullptr) {
  std::string out;
  FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
  if (!p) {
    if (ok) *ok = false;
    return out;
  }
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) out.append(buffer, n);
  const int status = ::pclose(p);
  if (ok) *ok = status == 0;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

inline bool have_hwloc_calc() {
  return !run_command("command -v hwloc-calc").empty();
}

/// hwloc-calc's answer for one XML file: `hwloc-calc --if xml --input FILE ARGS`.
inline std::string hwloc_calc(const std::filesystem::path& xml, const std::string& args) {
  return run_command("hwloc-calc --if xml --input '" + xml.string() + "' " + args);
}

/// "0,4,12" → {0, 4, 12}; "" → {}.
inline std::vector<unsigned> numbers(const std::string& list) {
  std::vector<unsigned> out;
  std::size_t at = 0;
  while (at < list.size()) {
    const auto comma = list.find(',', at);
    out.push_back(static_cast<unsigned>(std::stoul(list.substr(at, comma - at))));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

/// A cpu list with ranges, as the report and PMIx write it: "0-1,24" → {0, 1, 24}; "" → {}.
inline std::vector<unsigned> cpu_ranges(const std::string& list) {
  std::vector<unsigned> out;
  std::size_t at = 0;
  while (at < list.size()) {
    const auto comma = std::min(list.find(',', at), list.size());
    const std::string part = list.substr(at, comma - at);
    const auto dash = part.find('-');
    const auto lo = static_cast<unsigned>(std::stoul(part.substr(0, dash)));
    const auto hi =
        dash == std::string::npos ? lo : static_cast<unsigned>(std::stoul(part.substr(dash + 1)));
    for (unsigned c = lo; c <= hi; ++c) out.push_back(c);
    at = comma + 1;
  }
  return out;
}

}  // namespace pm::test
