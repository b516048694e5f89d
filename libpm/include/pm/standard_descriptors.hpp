// Descriptors 0, 1 and 2 that a process was started without (`prog >&-`, a daemon that closed
// them). The first socket, pipe or eventfd made afterwards takes the lowest free number: an
// io_context made then takes 1 for its own eventfd, and the ranks' output, meant for "standard
// output", would be written into it. pmrun and the C API call this first; a C++ embedder whose
// process may run without them calls it before it makes its io_context.
#pragma once

#include "pm/export.hpp"

namespace pm {

/// Opens /dev/null on each of 0, 1 and 2 that is closed (not close-on-exec: they are the standard
/// descriptors, inherited as such), as a daemon would. Open ones are left alone. Best effort:
/// never fails.
PM_API void open_missing_standard_descriptors() noexcept;

}  // namespace pm
