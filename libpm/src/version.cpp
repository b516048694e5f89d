#include "pm/version.hpp"

namespace pm {

const char* version_string() noexcept { return PM_VERSION_STRING; }

}  // namespace pm
