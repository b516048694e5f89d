// pmrun: placeholder until the command line lands.
#include <cstdio>

#include "pm/version.hpp"

int main() {
  std::printf("pmrun %s\n", pm::version_string());
  return 0;
}
