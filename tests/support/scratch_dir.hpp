// Small helpers of the pmrun restart and recovery tests: a private scratch directory removed with
// all in it, a count of a text's occurrences, a JSON file read whole.
#pragma once

#include <stdlib.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace pm::test {

/// /tmp/<prefix>-XXXXXX, removed when the object goes (also when the test fails).
struct scratch_dir {
  std::filesystem::path dir;
  explicit scratch_dir(const std::string& prefix) {
    std::string t = "/tmp/" + prefix + "-XXXXXX";
    dir = ::mkdtemp(t.data());
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

/// How often `part` occurs in `text` (overlapping occurrences counted).
inline std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace pm::test
