// What PMIx_server_setup_fork will tell a rank, known before the server runs (docs/pmix.md,
// "Started when a rank connects").
//
// pmd starts its PMIx server only when a rank connects to it, so that a job that never calls PMIx
// pays nothing (PMIx_server_init costs about 20 ms). The ranks must still be told at exec where
// the server will be: every variable setup_fork gives is fixed by things pmd chooses (its
// private directories, the port it listens on for the server, its pid, the host's name) and by
// the PMIx release pmd was built with, as long as the server keeps its job data in its "hash"
// store (the shared-memory stores are named after files the server makes at init). When the
// server starts, pmd compares what setup_fork says with this and warns on a difference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pm::agent::pmix {

/// Where a node's PMIx server will be, as pmd chose it.
struct server_place {
  std::string dir;              ///< private directory (0700); PMIx's tmpdir is dir + "/pmix"
  std::string shm_dir;          ///< private directory for Open MPI's shared memory (empty: none)
  std::string hostname;         ///< this node's name in the job (PMIX_HOSTNAME)
  std::uint16_t port = 0;       ///< where pmd accepts the ranks' PMIx connections (127.0.0.1)
  std::int64_t server_pid = 0;  ///< the process that will run the server (pmd)
};

/// The PMIx release the server is built with ("4.2.2rc2"): setup_fork passes it as PMIX_VERSION.
const char* pmix_release() noexcept;

/// The store the server must use for the prediction to hold ("PMIX_MCA_gds" in its environment).
inline constexpr const char* server_store = "hash";

/// The variables a rank of `nspace` gets ("NAME=value", winning over the job's): PMIx's, as
/// setup_fork gives them for a server at `place` using the hash store, then what Open MPI 4.1
/// needs for a direct launch (schizo/ess, its session and shared-memory directories).
std::vector<std::string> predicted_rank_env(const server_place& place, const std::string& nspace,
                                            std::uint32_t rank);

/// What pmd knows of its host for Open MPI's settings.
struct host_kind {
  bool oversubscribed = false;  ///< more of the job's ranks here than cores
  bool rdma = false;            ///< an RDMA device is there (agent::has_rdma_devices)
  bool gpus = false;            ///< a GPU is there (the host's summary, or agent::has_gpu_devices)
};

/// Open MPI settings pmd gives its ranks where no layer set them (env/compose.hpp, "defaults"):
/// yield when idle on an oversubscribed host, as mpirun does; on a host with neither RDMA devices
/// nor GPUs ob1 over self, vader and tcp, which spares each rank opening and probing every other
/// transport component (MPI_Init about 2x faster, docs/pmix.md). Not with GPUs: naming ob1 and
/// tcp would shut out the CUDA/ROCm-aware transports (UCX, smcuda) Open MPI picks there.
std::vector<std::string> host_settings(const host_kind& host);

/// The job's directory under the private one (Open MPI's session directory base), and its
/// shared-memory directory (empty when place.shm_dir is).
std::string job_dir(const server_place& place, const std::string& nspace);
std::string job_shm_dir(const server_place& place, const std::string& nspace);

}  // namespace pm::agent::pmix
