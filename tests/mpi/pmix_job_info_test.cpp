// The embedded PMIx server's pure parts: the job description built from a rank map, its checks,
// and the completion objects' once-only, never-forgotten rule (pmix_host.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "link/messages.hpp"
#include "pm/allocation.hpp"
#include "pm/error.hpp"
#include "pm/rank_map.hpp"

namespace {

namespace px = pm::agent::pmix;

pm::rank_map two_app_map() {
  // -H a:2,b:3 -np 3 app0 : -np 2 app1, by slot: a gets 0,1; b gets 2,3,4.
  pm::job_spec job;
  job.apps.push_back({{"app0"}, 3u, {}, {}});
  job.apps.push_back({{"app1"}, 2u, {}, {}});
  return pm::map_job(job, pm::parse_host_list("a:2,b:3"));
}

TEST(PmixJobInfo, FromRankMap) {
  const px::job_info job = px::make_job_info(two_app_map(), "ns1", 1);
  EXPECT_EQ(job.nspace, "ns1");
  EXPECT_EQ(job.node_index, 1u);
  EXPECT_EQ(job.universe_size, 5u);
  EXPECT_EQ(job.node_names, (std::vector<std::string>{"a", "b"}));
  const std::vector<px::rank_info> want = {
      {0, 0, 0, 0}, {0, 0, 1, 1}, {0, 1, 0, 0}, {1, 1, 1, 1}, {1, 1, 2, 2}};
  EXPECT_EQ(job.ranks, want);
  EXPECT_NO_THROW(px::check_job_info(job));
}

TEST(PmixJobInfo, NodesAreTheUsedHostsOnly) {
  pm::job_spec spec;
  spec.apps.push_back({{"app"}, 2u, {}, {}});
  spec.mapping.by = pm::map_by::node;
  // Three hosts, two ranks round robin: c is not used and is no node of the job.
  const px::job_info job =
      px::make_job_info(pm::map_job(spec, pm::parse_host_list("a,b,c")), "ns", 0);
  EXPECT_EQ(job.node_names, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[1].node, 1u);
  EXPECT_EQ(job.ranks[1].local_rank, 0u);
}

std::string problem(const px::job_info& job) {
  try {
    px::check_job_info(job);
  } catch (const pm::error& e) {
    EXPECT_EQ(e.code(), pm::errc::usage);
    return e.what();
  }
  return "";
}

TEST(PmixJobInfo, ChecksNameEveryProblem) {
  const px::job_info good = px::make_job_info(two_app_map(), "ns1", 0);
  ASSERT_EQ(problem(good), "");

  auto bad = good;
  bad.nspace = "a/b";
  EXPECT_NE(problem(bad).find("namespace 'a/b'"), std::string::npos);
  bad.nspace = "";
  EXPECT_NE(problem(bad).find("namespace ''"), std::string::npos);
  bad.nspace = std::string(201, 'x');
  EXPECT_NE(problem(bad), "");

  bad = good;
  bad.node_index = 2;
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': this node's index 2 is not below the 2 nodes");
  bad = good;
  bad.ranks[4].node = 7;
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': rank 4 is on node 7, not one of the 2 nodes");
  bad = good;
  bad.ranks[1].local_rank = 0;
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': two ranks have local rank 0 on node a");
  bad = good;
  bad.ranks[4].app = 3;
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': app 2 has no ranks");
  bad = good;
  bad.node_names[1] = "b,c";
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': node name 'b,c' is empty or has a separator in it");
  bad = good;
  bad.ranks.clear();
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': no ranks");
  bad = good;
  bad.node_names.push_back("c");
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': node c has no ranks");
  bad = good;
  bad.parent = px::proc{"x y", 0};
  EXPECT_EQ(problem(bad), "PMIx job 'ns1': parent namespace 'x y' is not a valid namespace");
}

TEST(PmixJobInfo, AHostWithoutRanksMayKnowTheJob) {
  auto job = px::make_job_info(two_app_map(), "ns1", 0);
  job.node_index = px::no_node;
  job.spawned = true;
  job.parent = px::proc{"ns0", 0};
  EXPECT_EQ(problem(job), "");
  // The link does not carry spawned and parent (yet).
  const auto back = px::job_info_of(px::pmix_job_of(job));
  EXPECT_EQ(back.node_index, px::no_node);
  EXPECT_FALSE(back.spawned);
  EXPECT_FALSE(back.parent);
}

TEST(PmixCompletion, SpawnAndLookupCompletionsCarryTheirAnswersAndForgottenOnesFail) {
  std::vector<std::pair<px::status, std::string>> spawned;
  {
    px::spawn_completion s([&](px::status st, std::string ns) { spawned.emplace_back(st, ns); });
    s(px::status::success, "child");
    s(px::status::error);  // a second call does nothing
    px::spawn_completion forgotten(
        [&](px::status st, std::string ns) { spawned.emplace_back(st, ns); });
  }
  EXPECT_EQ(spawned, (std::vector<std::pair<px::status, std::string>>{
                         {px::status::success, "child"}, {px::status::error, ""}}));
  std::vector<px::status> looked;
  std::vector<px::found_value> found;
  {
    px::lookup_completion l([&](px::status st, std::vector<px::found_value> v) {
      looked.push_back(st);
      found = std::move(v);
    });
    l(px::status::success, {{"k", px::proc{"ns", 1}, {'v'}}});
    px::lookup_completion forgotten(
        [&](px::status st, std::vector<px::found_value>) { looked.push_back(st); });
  }
  EXPECT_EQ(looked, (std::vector<px::status>{px::status::success, px::status::error}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].key, "k");
  EXPECT_EQ(found[0].publisher, (px::proc{"ns", 1}));
  EXPECT_EQ(found[0].value, std::vector<char>{'v'});
}

TEST(PmixCompletion, CalledOnceWithTheStatusGiven) {
  std::vector<px::status> seen;
  px::completion c([&](px::status s) { seen.push_back(s); });
  EXPECT_TRUE(c);
  c(px::status::success);
  EXPECT_FALSE(c);
  c(px::status::error);  // a second call does nothing
  EXPECT_EQ(seen, std::vector<px::status>{px::status::success});
}

TEST(PmixCompletion, ForgottenOneCompletesWithError) {
  std::vector<px::status> seen;
  {
    px::completion c([&](px::status s) { seen.push_back(s); });
    px::completion moved = std::move(c);  // the moved-from one owes nothing
  }
  EXPECT_EQ(seen, std::vector<px::status>{px::status::error});
  // Assigning over a pending one completes it first.
  seen.clear();
  px::completion a([&](px::status s) { seen.push_back(s); });
  a = px::completion(
      [&](px::status s) { seen.push_back(s == px::status::success ? px::status::not_found : s); });
  EXPECT_EQ(seen, std::vector<px::status>{px::status::error});
  a(px::status::success);
  EXPECT_EQ(seen, (std::vector<px::status>{px::status::error, px::status::not_found}));
}

TEST(PmixCompletion, DataCompletionCarriesBytes) {
  std::vector<char> got;
  px::status st = px::status::error;
  {
    px::data_completion d([&](px::status s, std::vector<char> bytes) {
      st = s;
      got = std::move(bytes);
    });
    d(px::status::success, {'a', 'b'});
  }
  EXPECT_EQ(st, px::status::success);
  EXPECT_EQ(got, (std::vector<char>{'a', 'b'}));
  {
    px::data_completion forgotten([&](px::status s, std::vector<char>) { st = s; });
  }
  EXPECT_EQ(st, px::status::error);
}

TEST(PmixCompletion, QueryCompletionCarriesValuesAndAForgottenOneFails) {
  std::vector<px::query_value> got;
  px::status st = px::status::error;
  {
    px::query_completion q([&](px::status s, std::vector<px::query_value> values) {
      st = s;
      got = std::move(values);
    });
    q(px::status::success, {{px::query_keys::namespaces, std::string("ns")},
                            {px::query_keys::job_size, std::uint32_t{3}}});
    q(px::status::error);  // a second call does nothing
  }
  EXPECT_EQ(st, px::status::success);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(std::get<std::string>(got[0].value), "ns");
  EXPECT_EQ(std::get<std::uint32_t>(got[1].value), 3u);
  {
    px::query_completion forgotten([&](px::status s, std::vector<px::query_value>) { st = s; });
  }
  EXPECT_EQ(st, px::status::error);
}

}  // namespace
