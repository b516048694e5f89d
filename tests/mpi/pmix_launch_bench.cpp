// Launch time of a real MPI job under the embedded PMIx server against mpirun (docs/pmix.md).
//
//   pmix_launch_bench [--reps R] [--ranks 1,4,8] [--lean] [--no-share-topology]
//   pmix_launch_bench [--reps R] --phases N     the server's own cost, N ranks of /bin/true
//
// For each rank count, R runs of each launcher, interleaved. The clock is CLOCK_MONOTONIC,
// which every process on the machine shares; each rank of mpi_hello prints the time at which it
// got past MPI_Init.
//   embedded: a child process of this program (the stand-in for pmd, started fresh each run
//             because libpmix allows one server per process) starts the server, registers the
//             job, spawns the ranks and waits for them. Measured from the child's exec, and from
//             just before PMIx_server_init, to the last rank past MPI_Init.
//   mpirun:   mpirun.openmpi --allow-run-as-root -np N, from its exec to the last rank past
//             MPI_Init.
// --lean sets OMPI_MCA_pml=ob1 and OMPI_MCA_btl=self,vader,tcp for both (no UCX/OFI probing).
// Ranks beyond the machine's cores get OMPI_MCA_mpi_yield_when_idle=1 for both (mpirun sets it
// itself when it oversubscribes).
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi/tiny_host.hpp"
#include "support/command.hpp"

namespace {

namespace px = pm::agent::pmix;

long long monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

// The latest "init_ns T" among the hello lines, and how many there were.
std::pair<long long, int> last_init(const std::string& text) {
  long long last = 0;
  int count = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("init_ns ");
    if (line.rfind("hello ", 0) != 0 || at == std::string::npos) continue;
    last = std::max(last, std::atoll(line.c_str() + at + 8));
    ++count;
  }
  return {last, count};
}

std::vector<std::string> bench_env(bool lean, unsigned ranks) {
  std::vector<std::string> add = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  if (lean) {
    add.emplace_back("OMPI_MCA_pml=ob1");
    add.emplace_back("OMPI_MCA_btl=self,vader,tcp");
  }
  if (ranks > std::thread::hardware_concurrency()) {
    add.emplace_back("OMPI_MCA_mpi_yield_when_idle=1");
  }
  return pm::test::merge_env(pm::test::own_environment(), add);
}

// The child: one embedded-server launch. Prints the server's start time, the time each phase
// took and the ranks' output. `program` empty: mpi_hello.
int child(unsigned ranks, bool lean, bool share_topology, const std::string& program) {
  const std::string hello = std::string(PM_MPI_DIR) + "/mpi_hello";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const long long start_ns = monotonic_ns();
  px::options opts;
  opts.share_topology = share_topology;
  auto server = px::server::start(opts);
  const long long started_ns = monotonic_ns();
  const auto job = pm::test::one_node_job("bench", ranks, host);
  server->register_job(job);
  const long long registered_ns = monotonic_ns();
  std::string output;
  bool ok = false;
  long long spawned_ns = 0, ended_ns = 0;
  {
    pm::test::tiny_host h(*server);
    if (program.empty()) {
      h.spawn(job, {hello, std::to_string(ranks)}, bench_env(lean, ranks));
    } else {
      h.spawn(job, {program}, bench_env(lean, ranks));
    }
    spawned_ns = monotonic_ns();
    ok = h.run(std::chrono::seconds(60));
    ended_ns = monotonic_ns();
    output = h.all_output();
    for (const auto& r : h.ranks()) ok = ok && r.exited && r.exit_code == 0;
  }
  server->deregister_job(job.nspace);
  const long long deregistered_ns = monotonic_ns();
  const long long init_ns = server->init_time().count();
  server->stop();
  const long long stopped_ns = monotonic_ns();
  std::printf(
      "server_start_ns %lld\nserver_init_ns %lld\nphase_start_ns %lld\nphase_register_ns %lld\n"
      "phase_spawn_ns %lld\nphase_run_ns %lld\nphase_deregister_ns %lld\nphase_stop_ns %lld\n%s",
      start_ns, init_ns, started_ns - start_ns, registered_ns - started_ns,
      spawned_ns - registered_ns, ended_ns - spawned_ns, deregistered_ns - ended_ns,
      stopped_ns - deregistered_ns, output.c_str());
  return ok ? 0 : 1;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

long long value_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key + " ");
  return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + key.size() + 1);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<unsigned> counts = {1, 4, 8};
  bool lean = false, share_topology = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--child" && i + 1 < argc) {
      const unsigned n = static_cast<unsigned>(std::atoi(argv[++i]));
      std::string program;
      for (int j = i + 1; j < argc; ++j) {
        const std::string b = argv[j];
        if (b == "--lean") lean = true;
        if (b == "--no-share-topology") share_topology = false;
        if (b == "--program" && j + 1 < argc) program = argv[++j];
      }
      return child(n, lean, share_topology, program);
    }
    if (a == "--phases") {
      // The server's own cost for a job that never calls PMIx: N ranks of /bin/true.
      const unsigned n = i + 1 < argc ? static_cast<unsigned>(std::atoi(argv[++i])) : 8;
      std::map<std::string, std::vector<double>> phases;
      for (int rep = 0; rep < reps; ++rep) {
        const auto res = pm::test::run_command(
            {"/proc/self/exe", "--child", std::to_string(n), "--program", "/bin/true"},
            std::chrono::seconds(60));
        std::istringstream in(res.out);
        std::string key;
        long long v = 0;
        while (in >> key >> v) {
          if (key.rfind("phase_", 0) == 0) phases[key.substr(6, key.size() - 9)].push_back(v / 1e6);
        }
      }
      std::printf("server phases for %u ranks of /bin/true, median of %d (ms):", n, reps);
      for (const char* k : {"start", "register", "spawn", "run", "deregister", "stop"}) {
        std::printf(" %s %.2f", k, median(phases[k]));
      }
      std::printf("\n");
      return 0;
    }
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--ranks" && i + 1 < argc) {
      counts.clear();
      std::istringstream in(argv[++i]);
      std::string word;
      while (std::getline(in, word, ',')) counts.push_back(static_cast<unsigned>(std::stoul(word)));
    } else if (a == "--lean") {
      lean = true;
    } else if (a == "--no-share-topology") {
      share_topology = false;
    } else {
      std::fprintf(stderr,
                   "usage: pmix_launch_bench [--reps R] [--ranks 1,4,8] [--lean] "
                   "[--no-share-topology]\n");
      return 2;
    }
  }
  const std::string self = "/proc/self/exe";
  char exe[4096] = {};
  if (::readlink(self.c_str(), exe, sizeof exe - 1) <= 0) return 2;
  const std::string hello = std::string(PM_MPI_DIR) + "/mpi_hello";
  const std::string mpirun = "/usr/bin/mpirun.openmpi";

  std::printf("pmix_launch_bench: %d runs each, %s MCA settings, topology %s, %u cores; medians\n",
              reps, lean ? "lean (pml=ob1, btl=self,vader,tcp)" : "default",
              share_topology ? "shared" : "not shared", std::thread::hardware_concurrency());
  std::printf("%5s  %12s  %12s  %12s  %12s  %7s\n", "ranks", "init (ms)", "server->last",
              "exec->last", "mpirun", "ratio");
  int failures = 0;
  for (const unsigned n : counts) {
    std::vector<double> ours_server, ours_exec, theirs, inits;
    for (int rep = 0; rep < reps; ++rep) {
      {
        std::vector<std::string> args = {exe, "--child", std::to_string(n)};
        if (lean) args.emplace_back("--lean");
        if (!share_topology) args.emplace_back("--no-share-topology");
        const long long t0 = monotonic_ns();
        const auto res = pm::test::run_command(args, std::chrono::seconds(120));
        const auto [last, count] = last_init(res.out);
        if (res.exit_code != 0 || count != static_cast<int>(n)) {
          ++failures;
          std::fprintf(stderr, "embedded run of %u failed (exit %d):\n%s%s\n", n, res.exit_code,
                       res.out.c_str(), res.err.c_str());
        } else {
          ours_server.push_back((last - value_after(res.out, "server_start_ns")) / 1e6);
          ours_exec.push_back((last - t0) / 1e6);
          inits.push_back(value_after(res.out, "server_init_ns") / 1e6);
        }
      }
      {
        std::vector<std::string> args = {mpirun, "--allow-run-as-root"};
        if (n > std::thread::hardware_concurrency()) args.emplace_back("--oversubscribe");
        for (const auto& a : {std::string("-np"), std::to_string(n), hello, std::to_string(n)}) {
          args.push_back(a);
        }
        const auto env = bench_env(lean, n);
        const long long t0 = monotonic_ns();
        const auto res = pm::test::run_command(args, std::chrono::seconds(120), "", &env);
        const auto [last, count] = last_init(res.out);
        if (res.exit_code != 0 || count != static_cast<int>(n)) {
          ++failures;
          std::fprintf(stderr, "mpirun run of %u failed (exit %d):\n%s%s\n", n, res.exit_code,
                       res.out.c_str(), res.err.c_str());
        } else {
          theirs.push_back((last - t0) / 1e6);
        }
      }
    }
    const double ours = median(ours_exec), mpi = median(theirs);
    std::printf("%5u  %12.1f  %12.1f  %12.1f  %12.1f  %7.2f\n", n, median(inits),
                median(ours_server), ours, mpi, mpi > 0 ? ours / mpi : 0.0);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
