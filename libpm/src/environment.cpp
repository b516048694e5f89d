#include "pm/environment.hpp"

#include <cstring>

extern char** environ;  // NOLINT: POSIX

namespace pm {

env_map current_environment() {
  env_map env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*entry, static_cast<std::size_t>(eq - *entry)), std::string(eq + 1));
  }
  return env;
}

}  // namespace pm
