// libpm's version: the one place it is defined (CMake reads it from here).
#pragma once

#define PM_VERSION_MAJOR 0
#define PM_VERSION_MINOR 1
#define PM_VERSION_PATCH 0
#define PM_VERSION_STRING "0.1.0"

namespace pm {

/// The version of the libpm that is linked (compare with PM_VERSION_* for the headers').
const char* version_string() noexcept;

}  // namespace pm
