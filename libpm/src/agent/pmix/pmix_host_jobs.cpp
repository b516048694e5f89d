// A job's namespace in the embedded PMIx server (pmix_host.hpp): its registration (the job,
// node, app and rank facts Open MPI reads, and the job's directories), a local rank's registration
// as a client with the environment it is started with (rank_env), and the namespace's end.
#include <pmix.h>
#include <pmix_server.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/pmix_host_impl.hpp"
#include "pm/error.hpp"

namespace pm::agent::pmix {

namespace {

// Waits on the host thread for a PMIx callback that arrives on PMIx's progress thread, at most
// answer_bound: a progress thread that is stuck (issue 20: it once sat in a blocking receive of a
// connection's handshake) gives an error line instead of a host that waits for ever. The state
// lives on the heap, shared with the callback, which may still come after the host gave up.
class waiter {
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    pmix_status_t rc = PMIX_SUCCESS;
  };

 public:
  waiter() : s_(std::make_shared<state>()) {}
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;
  ~waiter() { delete held_; }  // cbdata() given to a call that was never made

  /// What the PMIx call takes as its cbdata (with waiter::done as its callback).
  void* cbdata() {
    delete held_;
    held_ = new std::shared_ptr<state>(s_);
    return held_;
  }
  static void done(pmix_status_t rc, void* cbdata) {
    const std::unique_ptr<std::shared_ptr<state>> held(
        static_cast<std::shared_ptr<state>*>(cbdata));
    state& s = **held;
    std::lock_guard lock(s.mu);
    s.rc = rc;
    s.done = true;
    s.cv.notify_all();
  }
  /// `started` is what the PMIx call returned: PMIX_SUCCESS means "the callback will come".
  /// Throws pm::error naming `what` when it did not come within answer_bound.
  pmix_status_t wait(pmix_status_t started, const char* what) {
    if (started != PMIX_SUCCESS) {
      delete held_;  // no callback will come to free it
      held_ = nullptr;
      return started == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : started;
    }
    held_ = nullptr;  // the callback's now
    std::unique_lock lock(s_->mu);
    if (!s_->cv.wait_for(lock, answer_bound, [&] { return s_->done; })) {
      throw pm::error(pm::errc::system, std::string("PMIx: ") + what + " gave no answer within " +
                                            std::to_string(answer_bound.count()) +
                                            " s (its progress thread is stuck)");
    }
    return s_->rc;
  }

 private:
  std::shared_ptr<state> s_;
  std::shared_ptr<state>* held_ = nullptr;
};

std::string join(const std::vector<std::string>& words, char sep) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += sep;
    out += w;
  }
  return out;
}

std::string join_ranks(const std::vector<std::uint32_t>& ranks) {
  std::string out;
  for (const auto r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

// A regex from PMIx_generate_regex / _ppn, loaded as PMIX_REGEX: it may be a binary blob, not a
// string (shared/PMIX.md).
void add_regex(info_list& list, const char* key, const std::string& input, bool ppn) {
  char* regex = nullptr;
  const pmix_status_t rc =
      ppn ? PMIx_generate_ppn(input.c_str(), &regex) : PMIx_generate_regex(input.c_str(), &regex);
  if (rc != PMIX_SUCCESS) fail(ppn ? "PMIx_generate_ppn" : "PMIx_generate_regex", rc);
  try {
    list.add(key, regex, PMIX_REGEX);
  } catch (...) {
    ::free(regex);
    throw;
  }
  ::free(regex);
}

// A bound rank's place as PRRTE registers it: PMIX_CPUSET in PMIx's "hwloc:<list>" form and the
// locality string ("SK0:L30:...:CR1:HWT1", from the server's own topology) that Open MPI
// compares between local peers. Both from PMIx's generators, so that they read them back.
void add_locality(info_list& list, const std::string& cpus) {
  pmix_cpuset_t set;
  PMIX_CPUSET_CONSTRUCT(&set);
  const std::string text = "hwloc:" + cpus;
  pmix_status_t rc = PMIx_Parse_cpuset_string(text.c_str(), &set);
  if (rc != PMIX_SUCCESS) fail("PMIx_Parse_cpuset_string(" + text + ")", rc);
  char* cpuset = nullptr;
  char* locality = nullptr;
  rc = PMIx_server_generate_cpuset_string(&set, &cpuset);
  if (rc == PMIX_SUCCESS) rc = PMIx_server_generate_locality_string(&set, &locality);
  PMIx_Cpuset_destruct(&set);
  const std::unique_ptr<char, void (*)(void*)> own_cpuset(cpuset, ::free);
  const std::unique_ptr<char, void (*)(void*)> own_locality(locality, ::free);
  if (rc != PMIX_SUCCESS || cpuset == nullptr || locality == nullptr) {
    fail("PMIx_server_generate_cpuset/locality_string(" + text + ")",
         rc != PMIX_SUCCESS ? rc : PMIX_ERR_NOMEM);
  }
  list.add_string(PMIX_CPUSET, cpuset);
  list.add_string(PMIX_LOCALITY_STRING, locality);
}

}  // namespace

void server::register_job(const job_info& job) {
  check_job_info(job);
  if (!impl_->running) throw pm::error(pm::errc::system, "PMIx: the server is stopped");
  if (impl_->jobs.contains(job.nspace)) {
    throw pm::error(pm::errc::usage, "PMIx namespace '" + job.nspace + "' is registered already");
  }
  pmix_nspace_t ns;
  PMIX_LOAD_NSPACE(ns, job.nspace.c_str());

  job_state state;
  state.info = job;
  state.dir = job_tmpdir(job.nspace);
  // It may exist: pmd makes it before the server starts (the ranks' Open MPI needs it at once).
  if (::mkdir(state.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw pm::error(pm::errc::system,
                    "PMIx: cannot create " + state.dir + ": " + std::strerror(errno));
  }
  struct dir_guard {
    std::vector<std::string> paths;
    ~dir_guard() {
      for (const auto& p : paths) remove_tree(p);
    }
  } guard{{state.dir}};
  if (!impl_->shm_dir.empty()) {
    state.shm_dir = impl_->shm_dir + "/" + job.nspace;
    if (::mkdir(state.shm_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      throw pm::error(pm::errc::system,
                      "PMIx: cannot create " + state.shm_dir + ": " + std::strerror(errno));
    }
    guard.paths.push_back(state.shm_dir);
  }

  // Derived facts.
  const auto job_size = static_cast<std::uint32_t>(job.ranks.size());
  const auto num_nodes = static_cast<std::uint32_t>(job.node_names.size());
  std::uint32_t num_apps = 0;
  for (const auto& r : job.ranks) num_apps = std::max(num_apps, r.app + 1);
  std::vector<std::vector<std::uint32_t>> on_node(num_nodes);
  std::vector<std::uint32_t> app_size(num_apps), app_leader(num_apps, 0), app_rank(job_size);
  for (std::uint32_t rank = 0; rank < job_size; ++rank) {
    const rank_info& r = job.ranks[rank];
    on_node[r.node].push_back(rank);
    if (app_size[r.app] == 0) app_leader[r.app] = rank;
    app_rank[rank] = app_size[r.app]++;
  }
  // A host that runs none of the ranks (no_node) registers the namespace with no local ones.
  const bool runs_ranks = job.node_index != no_node;
  static const std::vector<std::uint32_t> none;
  const std::vector<std::uint32_t>& local = runs_ranks ? on_node[job.node_index] : none;

  // 1. Whatever PMIx's plugins want the job to have (network keys, envars): nothing on a
  //    plain Debian machine, but a fabric plugin may add some.
  info_list list;
  {
    // Filled on PMIx's progress thread; kept alive by the callback if the host gave up waiting.
    struct setup_result {
      std::mutex mu;
      info_list infos;
      std::vector<std::string> env;
      std::string error;
    };
    struct carrier {
      std::shared_ptr<setup_result> res;
      void* done;  // the waiter's cbdata
    };
    auto res = std::make_shared<setup_result>();
    waiter w;
    auto* c = new carrier{res, w.cbdata()};
    auto cb = [](pmix_status_t rc, pmix_info_t info[], size_t ninfo, void* provided,
                 pmix_op_cbfunc_t cbfunc, void* cbdata) {
      const std::unique_ptr<carrier> held(static_cast<carrier*>(provided));
      {
        setup_result& r = *held->res;
        std::lock_guard lock(r.mu);
        try {  // nothing may throw into libpmix
          for (size_t i = 0; rc == PMIX_SUCCESS && i < ninfo; ++i) {
            const pmix_info_t& in = info[i];
            if (in.value.type == PMIX_ENVAR &&
                (PMIX_CHECK_KEY(&in, PMIX_SET_ENVAR) || PMIX_CHECK_KEY(&in, PMIX_ADD_ENVAR))) {
              const pmix_envar_t& e = in.value.data.envar;
              if (e.envar != nullptr) {
                r.env.push_back(std::string(e.envar) + "=" + (e.value != nullptr ? e.value : ""));
              }
            } else {
              r.infos.add_copy(in);
            }
          }
        } catch (const std::exception& ex) {
          r.error = ex.what();
        }
      }
      if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);
      waiter::done(rc, held->done);
    };
    const pmix_status_t started = PMIx_server_setup_application(ns, nullptr, 0, cb, c);
    if (started != PMIX_SUCCESS) delete c;  // no callback will come
    const pmix_status_t rc = w.wait(started, "PMIx_server_setup_application");
    if (rc != PMIX_SUCCESS) fail("PMIx_server_setup_application", rc);
    std::lock_guard lock(res->mu);
    if (!res->error.empty()) throw pm::error(pm::errc::system, res->error);
    state.setup_env = res->env;
    info_array extra;
    res->infos.convert(extra);
    for (std::size_t i = 0; i < extra.size(); ++i) list.add_copy(extra.data()[i]);
  }

  // 2. Job level (what Open MPI 4.1 reads, as PRRTE and Slurm register it).
  list.add_string(PMIX_JOBID, job.nspace);
  list.add_u32(PMIX_JOB_SIZE, job_size);
  list.add_u32(PMIX_UNIV_SIZE, std::max(job.universe_size, job_size));
  list.add_u32(PMIX_MAX_PROCS, std::max(job.universe_size, job_size));
  list.add_u32(PMIX_NUM_NODES, num_nodes);
  list.add_u32(PMIX_JOB_NUM_APPS, num_apps);
  list.add_bool(PMIX_SPAWNED, job.spawned);
  if (job.parent) {
    pmix_proc_t parent;
    PMIX_PROC_LOAD(&parent, job.parent->nspace.c_str(), job.parent->rank);
    list.add(PMIX_PARENT_ID, &parent, PMIX_PROC);
  }
  add_regex(list, PMIX_NODE_MAP, join(job.node_names, ','), false);
  {
    std::string ppn;
    for (std::uint32_t n = 0; n < num_nodes; ++n) {
      if (n > 0) ppn += ';';
      ppn += join_ranks(on_node[n]);
    }
    add_regex(list, PMIX_PROC_MAP, ppn, true);
  }
  // 3. This node: without local peers, local ranks fall back to TCP between them. A node
  //    without ranks has none of this (the per-rank keys below name every rank's node).
  if (runs_ranks) {
    list.add_string(PMIX_HOSTNAME, job.node_names[job.node_index]);
    list.add_u32(PMIX_NODEID, job.node_index);
    list.add_u32(PMIX_LOCAL_SIZE, static_cast<std::uint32_t>(local.size()));
    list.add_u32(PMIX_NODE_SIZE, static_cast<std::uint32_t>(local.size()));
  }
  if (!local.empty()) {
    list.add_string(PMIX_LOCAL_PEERS, join_ranks(local));
    list.add_rank(PMIX_LOCALLDR, local.front());
  }
  // 4. Apps.
  for (std::uint32_t a = 0; a < num_apps; ++a) {
    info_list app;
    app.add_u32(PMIX_APPNUM, a);  // first: it names the app
    app.add_u32(PMIX_APP_SIZE, app_size[a]);
    app.add_rank(PMIX_APPLDR, app_leader[a]);
    info_array arr;
    app.convert(arr);
    list.add_array(PMIX_APP_INFO_ARRAY, arr);
  }
  // 5. Every rank, local or not (all or none: PMIx 4.2 derives node ids and local ranks only
  //    when none are given). PMIX_LOCAL_RANK and PMIX_NODE_RANK are required by Open MPI.
  for (std::uint32_t rank = 0; rank < job_size; ++rank) {
    const rank_info& r = job.ranks[rank];
    info_list pr;
    pr.add_rank(PMIX_RANK, rank);  // first: it names the rank
    pr.add_u16(PMIX_LOCAL_RANK, r.local_rank);
    pr.add_u16(PMIX_NODE_RANK, r.node_rank);
    pr.add_u32(PMIX_APPNUM, r.app);
    pr.add_rank(PMIX_APP_RANK, app_rank[rank]);
    pr.add_rank(PMIX_GLOBAL_RANK, rank);
    pr.add_string(PMIX_HOSTNAME, job.node_names[r.node]);
    pr.add_u32(PMIX_NODEID, r.node);
    if (!r.cpus.empty() && runs_ranks && r.node == job.node_index) add_locality(pr, r.cpus);
    info_array arr;
    pr.convert(arr);
    list.add_array(PMIX_PROC_INFO_ARRAY, arr);
  }
  info_array info;
  list.convert(info);
  {
    waiter w;
    const pmix_status_t rc =
        w.wait(PMIx_server_register_nspace(ns, static_cast<int>(local.size()), info.data(),
                                           info.size(), waiter::done, w.cbdata()),
               "PMIx_server_register_nspace");
    if (rc != PMIX_SUCCESS) fail("PMIx_server_register_nspace", rc);
  }
  {
    waiter w;
    const pmix_status_t rc =
        w.wait(PMIx_server_setup_local_support(ns, nullptr, 0, waiter::done, w.cbdata()),
               "PMIx_server_setup_local_support");
    if (rc != PMIX_SUCCESS) {
      waiter d;
      PMIx_server_deregister_nspace(ns, waiter::done, d.cbdata());
      d.wait(PMIX_SUCCESS, "PMIx_server_deregister_nspace");
      fail("PMIx_server_setup_local_support", rc);
    }
  }
  guard.paths.clear();
  impl_->jobs.emplace(job.nspace, std::move(state));
}

std::vector<std::string> server::rank_env(const std::string& nspace, std::uint32_t rank) {
  auto it = impl_->jobs.find(nspace);
  if (it == impl_->jobs.end()) {
    throw pm::error(pm::errc::usage, "PMIx namespace '" + nspace + "' is not registered");
  }
  const job_state& job = it->second;
  if (rank >= job.info.ranks.size() || job.info.node_index == no_node ||
      job.info.ranks[rank].node != job.info.node_index) {
    throw pm::error(pm::errc::usage, "PMIx job '" + nspace + "': rank " + std::to_string(rank) +
                                         " is not one of this node's ranks");
  }
  pmix_proc_t p;
  PMIX_PROC_LOAD(&p, nspace.c_str(), rank);
  auto& clients = it->second.clients;
  if (std::find(clients.begin(), clients.end(), rank) != clients.end()) {
    // Registered before: a rank started again alone (--enable-recovery). Its earlier process's
    // client goes first, so that the next one connects afresh as the same rank.
    waiter d;
    PMIx_server_deregister_client(&p, waiter::done, d.cbdata());
    d.wait(PMIX_SUCCESS, "PMIx_server_deregister_client");
  } else {
    clients.push_back(rank);
  }
  {
    waiter w;
    const pmix_status_t rc = w.wait(PMIx_server_register_client(&p, ::geteuid(), ::getegid(),
                                                                nullptr, waiter::done, w.cbdata()),
                                    "PMIx_server_register_client");
    if (rc != PMIX_SUCCESS) fail("PMIx_server_register_client", rc);
  }
  char** env = nullptr;
  const pmix_status_t rc = PMIx_server_setup_fork(&p, &env);
  std::vector<std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    out.emplace_back(*e);
    ::free(*e);
  }
  ::free(env);
  if (rc != PMIX_SUCCESS) fail("PMIx_server_setup_fork", rc);
  out.insert(out.end(), job.setup_env.begin(), job.setup_env.end());
  // Open MPI 4.1.4 direct launch (shared/PMIX.md): without schizo=^orte and ess=pmi every rank
  // thinks it is a singleton; without the tmpdir base it leaves /tmp/ompi.<host>.<uid>/jf.*.
  out.emplace_back("OMPI_MCA_schizo=^orte,slurm,flux,jsm");
  out.emplace_back("OMPI_MCA_ess=pmi");
  out.emplace_back("OMPI_MCA_orte_tmpdir_base=" + job.dir);
  out.emplace_back("OMPI_MCA_btl_vader_backing_directory=" +
                   (job.shm_dir.empty() ? job.dir : job.shm_dir));
  return out;
}

void server::deregister_job(const std::string& nspace) {
  auto it = impl_->jobs.find(nspace);
  if (it == impl_->jobs.end()) return;
  if (impl_->running) {
    pmix_nspace_t ns;
    PMIX_LOAD_NSPACE(ns, nspace.c_str());
    waiter w;
    PMIx_server_deregister_nspace(ns, waiter::done, w.cbdata());
    try {
      w.wait(PMIX_SUCCESS, "PMIx_server_deregister_nspace");
    } catch (const pm::error&) {  // the namespace's directories go all the same
    }
  }
  remove_tree(it->second.dir);
  if (!it->second.shm_dir.empty()) remove_tree(it->second.shm_dir);
  impl_->jobs.erase(it);
}

}  // namespace pm::agent::pmix
