// The launcher's descriptor limit: raised for the launcher itself, the original kept for what it
// starts, so that ranks see the soft limit the user gave (as mpirun's ranks do).
#pragma once

#include <sys/resource.h>

#include <optional>

namespace pm::local {

/// Raises this process's RLIMIT_NOFILE soft limit to its hard limit (hundreds of ranks need more
/// than the usual 1024) and remembers the limit it found. Call it once, before starting anything.
void raise_nofile_limit() noexcept;

/// The limit raise_nofile_limit() found, when it raised it; nullopt otherwise. The local transport
/// starts pmd with it, and pmd hands it on to the ranks.
std::optional<rlimit> original_nofile_limit() noexcept;

}  // namespace pm::local
