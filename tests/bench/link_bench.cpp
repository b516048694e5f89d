// The agent link's control messages: what a batch of the messages a launch exchanges costs to
// encode and to decode (docs/agent-link.md, "Wire format"). A launcher with 10,000 hosts handles
// some 400,000 of them per job, most of them started, exited and stream_closed.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "link/messages.hpp"

namespace {

namespace link = pm::link;

// A spawn request of 8 ranks, each with the profile variables a rank gets.
link::spawn_request spawn_of_8() {
  link::spawn_request s;
  for (std::uint32_t r = 0; r < 8; ++r) {
    link::rank_spec spec{r, 0, {}, r == 0};
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK",
                             "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"})
      spec.env.push_back(std::string(name) + "=" + std::to_string(r * 7 + 29500));
    s.ranks.push_back(std::move(spec));
  }
  return s;
}

// What one host's link carries for 8 ranks: spawn, started, output ends, exits (since version 10
// one list each: the ranks of one spawn start in one turn, one signal ends them in another).
std::vector<link::message> batch(bool with_spawn) {
  std::vector<link::message> ms;
  if (with_spawn) ms.emplace_back(spawn_of_8());
  link::started started;
  link::stream_closed closed;
  link::exited exited;
  for (std::uint32_t r = 0; r < 8; ++r) {
    started.ranks.push_back({r, 40000 + r});
    closed.streams.push_back({r, pm::output_stream::out, 1000u * r});
    closed.streams.push_back({r, pm::output_stream::err, 0});
    exited.ranks.push_back({r, r % 3 == 2 ? pm::exit_status::signaled(9)
                                          : pm::exit_status::exited(static_cast<int>(r))});
  }
  ms.emplace_back(std::move(started));
  ms.emplace_back(std::move(closed));
  ms.emplace_back(link::ack{65536});
  ms.emplace_back(link::heartbeat{});
  ms.emplace_back(std::move(exited));
  return ms;
}

std::vector<std::vector<std::uint8_t>> bodies(const std::vector<link::message>& ms) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const auto& m : ms) out.push_back(link::encode(m));
  return out;
}

void decode_all(benchmark::State& state, const std::vector<std::vector<std::uint8_t>>& bs) {
  for (auto _ : state) {
    for (const auto& b : bs) {
      auto e = link::decode(b);
      benchmark::DoNotOptimize(e);
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * bs.size()));
}

// The per-rank messages alone (started, stream_closed, ack, heartbeat, exited): 34 bodies.
void BM_DecodeRankMessages(benchmark::State& state) {
  decode_all(state, bodies(batch(false)));
}
BENCHMARK(BM_DecodeRankMessages);

// The same with a spawn request of 8 ranks in front: 35 bodies.
void BM_DecodeHostBatch(benchmark::State& state) {
  decode_all(state, bodies(batch(true)));
}
BENCHMARK(BM_DecodeHostBatch);

void BM_DecodeSpawnOf8(benchmark::State& state) {
  decode_all(state, bodies({link::message(spawn_of_8())}));
}
BENCHMARK(BM_DecodeSpawnOf8);

// A job setup with PMIx facts for 64 ranks (once per host and job).
void BM_DecodeJobWithPmix(benchmark::State& state) {
  link::job_setup j;
  j.base = {"OMPI_MCA_btl=self,vader", "OMPI_MCA_pml=ob1"};
  j.apps = {link::app_spec{{"./app", "-v"}, "/work", {"A=1"}}};
  link::pmix_job p{"pmrun.1.a", 64, 0, {}, {}, {}, {}, {}, 0};
  for (std::uint32_t n = 0; n < 8; ++n) p.nodes.push_back("node" + std::to_string(n));
  for (std::uint32_t r = 0; r < 64; ++r) {
    p.rank_node.push_back(r / 8);
    p.rank_app.push_back(0);
    p.rank_local.push_back(r % 8);
  }
  j.pmix = p;
  decode_all(state, bodies({link::message(j)}));
}
BENCHMARK(BM_DecodeJobWithPmix);

void BM_EncodeHostBatch(benchmark::State& state) {
  const auto ms = batch(true);
  std::vector<std::uint8_t> out;
  for (auto _ : state) {
    out.clear();
    for (const auto& m : ms) link::append_message(out, m);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * ms.size()));
}
BENCHMARK(BM_EncodeHostBatch);

}  // namespace

BENCHMARK_MAIN();
