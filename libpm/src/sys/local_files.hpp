// This machine's answers to a program search's questions (host_files.hpp), with stat and access:
// pmd's for its agent machine, resolve_executable's for the launcher's and transports' checks.
#pragma once

#include "sys/host_files.hpp"

namespace pm::sys {

class local_files final : public host_files {
 public:
  file_facts look(const std::string& path) const override;
  std::string working_directory() const override;
};

}  // namespace pm::sys
