// A duration as the lines pmrun says show it: seconds, shortest form ("3", "0.5", "2.25").
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace pm::text {

inline std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace pm::text
