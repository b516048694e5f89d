// A small driver of the controller for its unit tests: feeds events 1 ms apart, keeps every
// action, and says them as describe_action.hpp does.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "pm/controller.hpp"
#include "support/describe_action.hpp"

namespace pm::test {

/// One app of `np` ranks (nullopt: one per slot) on these hosts.
inline pm::rank_map make_map(std::vector<pm::host> hosts,
                             std::optional<std::uint32_t> np = std::nullopt,
                             pm::map_by by = pm::map_by::slot) {
  pm::job_spec j;
  j.apps.push_back(pm::app_context{{"app"}, np, {}, {}});
  j.mapping.by = by;
  return pm::map_job(j, pm::allocation{std::move(hosts), pm::allocation_source::host_list});
}

struct controller_harness {
  using strings = std::vector<std::string>;
  pm::rank_map map;
  pm::controller ctl;
  std::vector<pm::action> actions;
  pm::job_time now{0};

  explicit controller_harness(pm::rank_map m, pm::controller_options o = {})
      : map(std::move(m)), ctl(map, o) {}
  /// Two hosts "a" and "b" with 4 slots each, one rank per slot.
  explicit controller_harness(pm::controller_options o = {})
      : controller_harness(make_map({{"a", 4}, {"b", 4}}), o) {}

  strings feed(const pm::event& e) {
    std::vector<pm::action> out;
    now += std::chrono::milliseconds(1);
    ctl.handle(now, e, out);
    actions.insert(actions.end(), out.begin(), out.end());
    strings text;
    for (const auto& a : out) text.push_back(describe(a));
    return text;
  }
  /// Starts the job and every process it has so far.
  void start_all() {
    feed(pm::job_start{});
    start(0, ctl.size());
  }
  void start(std::uint32_t from, std::uint32_t to) {
    for (std::uint32_t p = from; p < to; ++p) feed(pm::rank_started{p, 1000 + p});
  }
  void close_streams(std::uint32_t rank) {
    feed(pm::stream_closed{rank, pm::stream_kind::out, 0});
    feed(pm::stream_closed{rank, pm::stream_kind::err, 0});
  }
  /// Output first, then the exit: the usual order.
  strings end(std::uint32_t rank, pm::exit_status st) {
    close_streams(rank);
    return feed(pm::rank_exited{rank, st});
  }
  template <class T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& a : actions) {
      if (auto* p = std::get_if<T>(&a)) out.push_back(*p);
    }
    return out;
  }
  std::optional<pm::job_report> finished_report() const {
    auto f = all<pm::finish>();
    if (f.empty()) return std::nullopt;
    EXPECT_EQ(f.size(), 1u);
    return f[0].report;
  }
};

}  // namespace pm::test
