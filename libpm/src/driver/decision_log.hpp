// A test hook (tests/multihost/differential_test.cpp): the launcher machine's decisions
// (launch_config::decisions), one "HOST DECISION" line each (HOST `*` for the whole job),
// appended to the file PM_TEST_DECISION_LOG names (never through a link; created private).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace pm::driver {

/// Empty when PM_TEST_DECISION_LOG is unset or cannot be opened.
std::function<void(std::uint32_t host, const std::string& decision)>
decision_log_from_environment();

}  // namespace pm::driver
