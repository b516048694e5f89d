#include "pm/notice.hpp"

#include <array>

namespace pm {

namespace {

constexpr std::array<std::string_view, 7> names = {
    "rank_exited",  "rank_signaled", "rank_spawn_failed", "host_lost",
    "rank_aborted", "job_ending",    "rank_unfinalized"};

}  // namespace

std::string_view to_string(notice_kind k) noexcept {
  const auto i = static_cast<std::size_t>(k);
  return i < names.size() ? names[i] : std::string_view("?");
}

std::optional<notice_kind> notice_kind_from(std::string_view name) noexcept {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<notice_kind>(i);
  }
  return std::nullopt;
}

}  // namespace pm
