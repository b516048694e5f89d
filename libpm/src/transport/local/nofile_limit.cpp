#include "transport/local/nofile_limit.hpp"

namespace pm::local {
namespace {

std::optional<rlimit> original;

}  // namespace

void raise_nofile_limit() noexcept {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  const rlimit found = lim;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) == 0) original = found;
}

std::optional<rlimit> original_nofile_limit() noexcept {
  return original;
}

}  // namespace pm::local
