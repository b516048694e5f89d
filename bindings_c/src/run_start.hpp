// How a run starts, shared by pm_run_start (this machine's transport) and pm_dvm_run_start (the
// agents of a DVM, bindings_c/src/dvm.cpp).
#pragma once

#include <functional>
#include <memory>

#include "pm/launcher.hpp"
#include "pm/pm.h"

namespace boost::asio {
class io_context;
}

namespace pm::c {

/// Makes the transport that reaches the job's hosts, on the run's io_context; null: the local one.
using remote_factory = std::function<std::shared_ptr<pm::transport>(boost::asio::io_context&,
                                                                    const pm::remote_launch&)>;

/// Starts `map` as pm_run_start does, through `remote` when it is set.
int start_run(const char* fn, pm_run** out, const pm_map& map, const pm_run_options* options,
              const remote_factory& remote);

/// Runs `run` to its end; a copy of its final report.
pm_report* finish_run(const char* fn, pm_run& run);

}  // namespace pm::c
