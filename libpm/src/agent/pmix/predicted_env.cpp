#include "agent/pmix/predicted_env.hpp"

#ifndef PM_PMIX_RELEASE
#define PM_PMIX_RELEASE "unknown"
#endif

namespace pm::agent::pmix {

const char* pmix_release() noexcept {
  return PM_PMIX_RELEASE;
}

std::string job_dir(const server_place& place, const std::string& nspace) {
  return place.dir + "/" + nspace;
}

std::string job_shm_dir(const server_place& place, const std::string& nspace) {
  return place.shm_dir.empty() ? std::string() : place.shm_dir + "/" + nspace;
}

std::vector<std::string> predicted_rank_env(const server_place& place, const std::string& nspace,
                                            std::uint32_t rank) {
  const std::string uri = "pmix-server." + std::to_string(place.server_pid) +
                          ";tcp4://127.0.0.1:" + std::to_string(place.port);
  const std::string tmp = place.dir + "/pmix";
  const std::string shm = job_shm_dir(place, nspace);
  return {
      "PMIX_NAMESPACE=" + nspace,
      "PMIX_RANK=" + std::to_string(rank),
      // One URI per protocol generation a client may speak; the server answers all of them.
      "PMIX_SERVER_URI41=" + uri,
      "PMIX_SERVER_URI4=" + uri,
      "PMIX_SERVER_URI3=" + uri,
      "PMIX_SERVER_URI2=" + uri,
      "PMIX_SERVER_URI21=" + uri,
      "PMIX_SECURITY_MODE=native",
      "PMIX_BFROP_BUFFER_TYPE=PMIX_BFROP_BUFFER_NON_DESC",
      std::string("PMIX_GDS_MODULE=") + server_store,
      "PMIX_SERVER_TMPDIR=" + tmp,
      "PMIX_SYSTEM_TMPDIR=" + tmp,
      "PMIX_HOSTNAME=" + place.hostname,
      std::string("PMIX_VERSION=") + pmix_release(),
      std::string("PMIX_MCA_gds=") + server_store,
      // Open MPI 4.1.4 direct launch (shared/PMIX.md): without schizo=^orte and ess=pmi every
      // rank thinks it is a singleton; without the tmpdir base it leaves
      // /tmp/ompi.<host>.<uid>/jf.* behind; its shared-memory segments go to a directory we
      // remove (in /dev/shm they stay after every killed rank).
      "OMPI_MCA_schizo=^orte,slurm,flux,jsm",
      "OMPI_MCA_ess=pmi",
      "OMPI_MCA_orte_tmpdir_base=" + job_dir(place, nspace),
      "OMPI_MCA_btl_vader_backing_directory=" + (shm.empty() ? job_dir(place, nspace) : shm),
  };
}

std::vector<std::string> host_settings(const host_kind& host) {
  std::vector<std::string> out;
  if (host.oversubscribed) out.emplace_back("OMPI_MCA_mpi_yield_when_idle=1");
  if (!host.rdma && !host.gpus) {
    out.emplace_back("OMPI_MCA_pml=ob1");
    out.emplace_back("OMPI_MCA_btl=self,vader,tcp");
  }
  return out;
}

}  // namespace pm::agent::pmix
