// The agent machine asks its driver about the host's files (sys/host_files.hpp).
#pragma once

#include "sys/host_files.hpp"

namespace pm::agent {
using sys::file_facts;
using sys::host_files;
}  // namespace pm::agent
