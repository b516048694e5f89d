// What the launcher machine is told of a job that job_runner drives: the request without its live
// parts (an embedder's transport, the agent pmrun started early), this run's nonce, seed and PMIx
// namespace, which ranks read stdin, and the callbacks it may call inside its step.
#pragma once

#include <cstdint>
#include <string>

#include "launch/launcher.hpp"
#include "pm/launcher.hpp"

namespace pm::driver {

/// A fresh random 64-bit number (one getrandom() call).
std::uint64_t fresh_nonce();

/// The machine's configuration for `request`; `agent_path` is this machine's pmd.
launch::launch_config launch_config_for(const job_request& request, const job_callbacks& callbacks,
                                        std::uint64_t nonce, std::string agent_path);

}  // namespace pm::driver
