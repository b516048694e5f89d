// The agent machine's questions about this host's files (agent/host_files.hpp), answered with
// stat and access.
#pragma once

#include "agent/host_files.hpp"

namespace pmd {

class local_files final : public pm::agent::host_files {
 public:
  pm::agent::file_facts look(const std::string& path) const override;
  std::string working_directory() const override;
};

}  // namespace pmd
