// The embedded PMIx server (pmix_host.hpp, docs/pmix.md): its start and stop, the queue of work
// its upcalls leave for the host thread, and its directories. The upcalls are in
// pmix_host_upcalls.cpp and pmix_host_spawn.cpp, a job's registration in pmix_host_jobs.cpp, what
// the host relays into it in pmix_host_relay.cpp. Facts it relies on were measured with PMIx 4.2.2
// and Open MPI 4.1.4 (shared/PMIX.md); each is named where it is used.
#include "agent/pmix/pmix_host.hpp"

#include <pmix.h>
#include <pmix_server.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "agent/pmix/pmix_host_impl.hpp"
#include "agent/pmix/private_listener.hpp"
#include "agent/private_dir.hpp"
#include "pm/error.hpp"

namespace pm::agent::pmix {

static_assert(wildcard_rank == PMIX_RANK_WILDCARD);
static_assert(std::string_view(query_keys::namespaces) == PMIX_QUERY_NAMESPACES);
static_assert(std::string_view(query_keys::namespace_info) == PMIX_QUERY_NAMESPACE_INFO);
static_assert(std::string_view(query_keys::proc_table) == PMIX_QUERY_PROC_TABLE);
static_assert(std::string_view(query_keys::local_proc_table) == PMIX_QUERY_LOCAL_PROC_TABLE);
static_assert(std::string_view(query_keys::job_size) == PMIX_JOB_SIZE);
static_assert(std::string_view(query_keys::num_psets) == PMIX_QUERY_NUM_PSETS);
static_assert(std::string_view(query_keys::pset_names) == PMIX_QUERY_PSET_NAMES);
static_assert(std::string_view(query_keys::spawn_support) == PMIX_QUERY_SPAWN_SUPPORT);
static_assert(std::string_view(query_keys::debug_support) == PMIX_QUERY_DEBUG_SUPPORT);
static_assert(std::string_view(query_keys::supported_keys) == PMIX_QUERY_SUPPORTED_KEYS);

namespace {

// Blocks every signal in the calling thread for a scope: threads libpmix starts meanwhile
// inherit the full mask.
class all_signals_blocked {
 public:
  all_signals_blocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  all_signals_blocked(const all_signals_blocked&) = delete;
  all_signals_blocked& operator=(const all_signals_blocked&) = delete;
  ~all_signals_blocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

std::mutex start_mu;  // start() and stop() of different servers never overlap
// libpmix 4.2.2 cannot start a server again after PMIx_server_finalize: its listener thread
// aborts ("bit out of range 0 - FD_SETSIZE on fd_set", measured). One per process, then.
bool started_once = false;  // guarded by start_mu

std::string default_tmp_root() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? std::string(t) : std::string("/tmp");
}

// pmd's own listener takes libpmix's place (agent/pmix/private_listener); what it cut off is said.
void confine(server::impl& p, const std::vector<inet_listener>& before,
             const std::string& pmix_dir) {
  const std::size_t cut = replace_listener(before, p.opts.listener_path, p.decoys);
  if (cut > 0) {
    p.note("PMIx: cut off " + std::to_string(cut) +
           " connection(s) made to the server's TCP port before it was replaced");
  }
  p.confined.store(true);
  if (!p.opts.tool_address.empty()) {
    point_rendezvous_files(pmix_dir, p.opts.tool_address, p.opts.agent_pid);
  }
}

}  // namespace

// The one server of this process, for the upcalls (fence and modex carry no server object).
std::atomic<server::impl*> current{nullptr};

// Never follows a link, never removes another user's entries (agent/private_dir.hpp).
void remove_tree(const std::string& path) {
  pm::agent::remove_private_tree(path);
}

server::server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

server::~server() {
  stop();
}

std::unique_ptr<server> server::start(options opts) {
  std::lock_guard start_lock(start_mu);
  if (started_once) {
    throw pm::error(pm::errc::system,
                    "PMIx: a server was started in this process already (libpmix allows one)");
  }
  auto p = std::make_unique<impl>();
  p->opts = std::move(opts);
  if (p->opts.hostname.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) {
      throw pm::error(pm::errc::system,
                      std::string("PMIx: cannot read the host name: ") + std::strerror(errno));
    }
    p->opts.hostname = name;
  }
  if (!p->opts.dir.empty()) {
    // Made by the host (pmd), which told the ranks where it is before the server started.
    p->dir = p->opts.dir;
    p->shm_dir = p->opts.shm_dir;
  } else {
    // The private directory: several servers on one host (several jobs, several users) never
    // meet, and removing it removes everything PMIx and Open MPI put there.
    const std::string root = p->opts.tmp_root.empty() ? default_tmp_root() : p->opts.tmp_root;
    std::string templ = root + "/pm-pmix." + std::to_string(::getpid()) + ".XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw pm::error(pm::errc::system, "PMIx: cannot create a private directory in " + root +
                                            ": " + std::strerror(errno));
    }
    p->dir = templ;  // mkdtemp makes it 0700
    // Open MPI's shared-memory segments (vader) go to /dev/shm by default and stay there when a
    // rank is killed (measured: every aborted job left one file per rank). A private directory on
    // the same tmpfs keeps them as fast and lets us remove them.
    if (const std::string shm_root = p->opts.shm_root.empty() ? "/dev/shm" : p->opts.shm_root;
        shm_root != "none") {
      std::string shm = shm_root + "/pm-pmix." + std::to_string(::getpid()) + ".XXXXXX";
      if (::mkdtemp(shm.data()) != nullptr) p->shm_dir = shm;  // no tmpfs: segments in dir
    }
  }
  p->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->efd < 0) {
    const int e = errno;
    remove_tree(p->dir);
    if (!p->shm_dir.empty()) remove_tree(p->shm_dir);
    throw pm::error(pm::errc::system, std::string("PMIx: eventfd: ") + std::strerror(e));
  }
  try {
    // PMIx widens the mode of its tmpdir to 0755: give it a subdirectory, so that the 0700
    // directory above keeps other users out.
    const std::string pmix_dir = p->dir + "/pmix";
    if (::mkdir(pmix_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      throw pm::error(pm::errc::system,
                      "PMIx: cannot create " + pmix_dir + ": " + std::strerror(errno));
    }
    info_list list;
    list.add_string(PMIX_SERVER_TMPDIR, pmix_dir);
    list.add_string(PMIX_SYSTEM_TMPDIR, pmix_dir);
    list.add_bool(PMIX_SERVER_TOOL_SUPPORT, p->opts.tool_support);
    list.add_bool(PMIX_SERVER_SHARE_TOPOLOGY, p->opts.share_topology);
    list.add_string(PMIX_HOSTNAME, p->opts.hostname);
    info_array info;
    list.convert(info);
    current.store(p.get());
    started_once = true;  // even a failed init leaves libpmix unable to start again
    const std::vector<inet_listener> before =
        p->opts.listener_path.empty() ? std::vector<inet_listener>() : inet_listeners();
    const auto t0 = std::chrono::steady_clock::now();
    pmix_status_t rc;
    {
      all_signals_blocked mask;
      rc = PMIx_server_init(&the_module, info.data(), info.size());
    }
    p->init_time = std::chrono::steady_clock::now() - t0;
    if (rc != PMIX_SUCCESS) fail("PMIx_server_init", rc);
    if (!p->opts.listener_path.empty()) {
      // Tests only: widen the moment in which the server's TCP port is open, so that a test can
      // connect in it (PmrunMpi.ConnectionsMadeToTheServersPortBeforeItIsReplacedAreCutOff). It
      // delays the owner's own server; it opens nothing.
      if (const char* d = std::getenv("PM_TEST_PMIX_CONFINE_DELAY_MS"); d != nullptr) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::strtol(d, nullptr, 10)));
      }
      try {
        confine(*p, before, pmix_dir);
      } catch (...) {
        PMIx_server_finalize();
        for (const int fd : p->decoys) ::close(fd);
        throw;
      }
    }
  } catch (...) {
    current.store(nullptr);
    ::close(p->efd);
    remove_tree(p->dir);
    if (!p->shm_dir.empty()) remove_tree(p->shm_dir);
    throw;
  }
  p->running = true;
  return std::unique_ptr<server>(new server(std::move(p)));
}

int server::event_fd() const noexcept {
  return impl_->efd;
}

std::size_t server::run_pending() {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto n = ::read(impl_->efd, &count, sizeof count);
  std::vector<std::function<void(callbacks&)>> work;
  {
    std::lock_guard lock(impl_->mu);
    work.swap(impl_->queue);
  }
  for (auto& w : work) w(impl_->opts.on);
  return work.size();
}

void server::stop() {
  if (!impl_ || !impl_->running) return;
  std::lock_guard start_lock(start_mu);
  impl_->running = false;
  // Requests nobody will answer now: fail them while PMIx can still hear it.
  auto drain = [&] {
    std::vector<std::function<void(callbacks&)>> work;
    std::lock_guard lock(impl_->mu);
    work.swap(impl_->queue);
    return work;  // destroyed by the caller: unanswered completions send status::error
  };
  drain();
  {
    std::lock_guard lock(impl_->live->mu);
    impl_->live->alive = false;
  }
  PMIx_server_finalize();
  current.store(nullptr);
  drain();
  for (const int fd : impl_->decoys) ::close(fd);
  impl_->decoys.clear();
  impl_->jobs.clear();
  ::close(impl_->efd);
  impl_->efd = -1;
  remove_tree(impl_->dir);
  if (!impl_->shm_dir.empty()) remove_tree(impl_->shm_dir);
}

const std::string& server::tmpdir() const noexcept {
  return impl_->dir;
}

std::string server::job_tmpdir(const std::string& nspace) const {
  return impl_->dir + "/" + nspace;
}

std::chrono::nanoseconds server::init_time() const noexcept {
  return impl_->init_time;
}

std::vector<std::string> server::take_notices() {
  std::vector<std::string> out;
  std::lock_guard lock(impl_->mu);
  out.swap(impl_->notes);
  return out;
}

}  // namespace pm::agent::pmix
