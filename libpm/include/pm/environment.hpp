// A process environment as a value, so that the pure layers never call getenv.
#pragma once

#include <map>
#include <string>

#include "pm/export.hpp"

namespace pm {

/// Variables by name. Ordered, so that everything built from it is deterministic.
using env_map = std::map<std::string, std::string, std::less<>>;

/// The calling process's environment (the one impure reader; everything else takes an env_map).
PM_API env_map current_environment();

}  // namespace pm
