// Where pmd finds a module it loads on demand (libpm-pmix.so, libpm-topology.so): the file named by
// its environment variable, else the first of `dirs` (':'-separated, relative to pmd's own bin
// directory: the build tree's and the installed lib directory) that holds it, else its bare name
// (the loader's search path).
#pragma once

#include <string>

namespace pmd {

std::string module_path(const char* env_variable, const std::string& dirs, const char* file);

}  // namespace pmd
