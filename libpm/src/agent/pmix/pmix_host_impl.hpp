// The embedded PMIx server's insides (pmix_host.hpp), shared by the files that implement it:
// the server's state (server::impl, job_state), the one server of the process the upcalls find,
// and the PMIx helpers more than one of them uses. pm_pmix only: it includes <pmix.h>.
#pragma once

#include <pmix.h>
#include <pmix_server.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "pm/error.hpp"

namespace pm::agent::pmix {

// check_job_info, make_job_info and the completions are in job_info.cpp and completion.cpp:
// they need no PMIx, and pmd uses them without loading it.

[[noreturn]] inline void fail(const std::string& what, pmix_status_t rc) {
  throw pm::error(pm::errc::system, "PMIx: " + what + " failed: " + PMIx_Error_string(rc));
}

inline pmix_status_t to_pmix(status s) noexcept {
  switch (s) {
    case status::success:
      return PMIX_SUCCESS;
    case status::error:
      return PMIX_ERROR;
    case status::not_supported:
      return PMIX_ERR_NOT_SUPPORTED;
    case status::not_found:
      return PMIX_ERR_NOT_FOUND;
    case status::unreachable:
      return PMIX_ERR_UNREACH;
    case status::timeout:
      return PMIX_ERR_TIMEOUT;
    case status::partial_success:
      return PMIX_QUERY_PARTIAL_SUCCESS;
  }
  return PMIX_ERROR;
}

inline proc from_pmix(const pmix_proc_t& p) {
  return proc{std::string(p.nspace, ::strnlen(p.nspace, PMIX_MAX_NSLEN)), p.rank};
}

// pmix_data_array_t of pmix_info_t, destroyed with its contents.
struct info_array {
  pmix_data_array_t a{};
  info_array() = default;
  info_array(const info_array&) = delete;
  info_array& operator=(const info_array&) = delete;
  ~info_array() { PMIx_Data_array_destruct(&a); }
  pmix_info_t* data() const { return static_cast<pmix_info_t*>(a.array); }
  std::size_t size() const { return a.size; }
};

// A PMIx info list under construction (PMIx_Info_list_*: public in 4.2; every add copies).
class info_list {
 public:
  info_list() : p_(PMIx_Info_list_start()) {
    if (p_ == nullptr) fail("PMIx_Info_list_start", PMIX_ERR_NOMEM);
  }
  info_list(const info_list&) = delete;
  info_list& operator=(const info_list&) = delete;
  ~info_list() { PMIx_Info_list_release(p_); }

  void add(const char* key, const void* value, pmix_data_type_t type) {
    const pmix_status_t rc = PMIx_Info_list_add(p_, key, value, type);
    if (rc != PMIX_SUCCESS) fail(std::string("adding ") + key, rc);
  }
  void add_u32(const char* key, std::uint32_t v) { add(key, &v, PMIX_UINT32); }
  void add_u16(const char* key, std::uint16_t v) { add(key, &v, PMIX_UINT16); }
  void add_rank(const char* key, std::uint32_t v) {
    const pmix_rank_t r = v;
    add(key, &r, PMIX_PROC_RANK);
  }
  void add_bool(const char* key, bool v) { add(key, &v, PMIX_BOOL); }
  void add_string(const char* key, const std::string& v) { add(key, v.c_str(), PMIX_STRING); }
  void add_array(const char* key, info_array& arr) { add(key, &arr.a, PMIX_DATA_ARRAY); }
  void add_copy(const pmix_info_t& info) {
    const pmix_status_t rc = PMIx_Info_list_xfer(p_, &info);
    if (rc != PMIX_SUCCESS) fail("copying setup info", rc);
  }
  void convert(info_array& out) {
    const pmix_status_t rc = PMIx_Info_list_convert(p_, &out.a);
    // An empty list converts to "not found" in 4.2: an empty array is what we want then.
    if (rc != PMIX_SUCCESS && rc != PMIX_ERR_EMPTY && rc != PMIX_ERR_NOT_FOUND) {
      fail("PMIx_Info_list_convert", rc);
    }
  }

 private:
  void* p_;
};

// Completions check it before calling into PMIx: after stop() they do nothing.
struct liveness {
  std::mutex mu;
  bool alive = true;
};

inline completion op_completion(std::shared_ptr<liveness> live, pmix_op_cbfunc_t cbfunc,
                                void* cbdata) {
  return completion([live = std::move(live), cbfunc, cbdata](status s) {
    std::lock_guard lock(live->mu);
    if (live->alive && cbfunc != nullptr) cbfunc(to_pmix(s), cbdata);
  });
}

struct job_state {
  job_info info;
  std::string dir;                     // Open MPI's session directory base
  std::string shm_dir;                 // Open MPI's shared-memory segments (empty: in dir)
  std::vector<std::string> setup_env;  // from PMIx_server_setup_application
  std::vector<std::uint32_t> clients;  // ranks registered as clients (rank_env), unsorted
};

struct server::impl {
  options opts;
  std::string dir;
  std::string shm_dir;  // private directory on tmpfs for shared-memory segments, or empty
  int efd = -1;
  std::chrono::nanoseconds init_time{0};
  bool running = false;
  std::shared_ptr<liveness> live = std::make_shared<liveness>();
  std::mutex mu;  // guards queue and notes
  std::vector<std::function<void(callbacks&)>> queue;
  std::vector<std::string> notes;  // lines for the host (take_notices)
  std::map<std::string, job_state> jobs;
  // Set once the server's TCP listener was replaced (options::listener_path) and every
  // connection it took was shut: from then on, a tool can only have come through the host's
  // socket. Read on PMIx's progress thread.
  std::atomic<bool> confined{false};
  std::vector<int> decoys;  // ends of socket pairs given to libpmix instead of cut connections

  void note(std::string line) {
    try {
      std::lock_guard lock(mu);
      notes.push_back(std::move(line));
    } catch (...) {  // out of memory: the host misses a line
    }
  }

  // From the progress thread: queue work for the host thread and wake it.
  void post(std::function<void(callbacks&)> work) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(work));
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(efd, &one, sizeof one);
  }
};

// The one server of this process, for the upcalls (fence and modex carry no server object).
extern std::atomic<server::impl*> current;

// The module table PMIx_server_init is given (pmix_host_upcalls.cpp).
extern pmix_server_module_t the_module;

// Never follows a link, never removes another user's entries (agent/private_dir.hpp).
void remove_tree(const std::string& path);

// Tools that connected to the server's TCP port before it was shut (on_tool_connected) are named
// with this prefix; whatever they ask is refused at once, the host never sees it.
inline constexpr std::string_view untrusted_prefix = "pm-untrusted.";
inline bool untrusted(const pmix_proc_t* p) noexcept {
  return p != nullptr &&
         std::strncmp(p->nspace, untrusted_prefix.data(), untrusted_prefix.size()) == 0;
}

// Queues `r` for the host's callback `pick`; if that fails, completes it with an error.
template <class Request, class Completion>
pmix_status_t queue_request(server::impl* s, std::shared_ptr<Request> r, Completion Request::*done,
                            void (*pick)(callbacks&, Request&&)) noexcept {
  try {
    s->post([r, pick](callbacks& on) { pick(on, std::move(*r)); });
  } catch (...) {
    ((*r).*done)(status::error);
  }
  return PMIX_SUCCESS;
}

// The upcalls of pmix_host_spawn.cpp, for the module table.
pmix_status_t on_spawn(const pmix_proc_t* p, const pmix_info_t job_info[], size_t ninfo,
                       const pmix_app_t apps[], size_t napps, pmix_spawn_cbfunc_t cbfunc,
                       void* cbdata);
pmix_status_t on_publish(const pmix_proc_t* p, const pmix_info_t info[], size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t on_lookup(const pmix_proc_t* p, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata);
pmix_status_t on_unpublish(const pmix_proc_t* p, char** keys, const pmix_info_t info[],
                           size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t on_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                         size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t on_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                            size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);

}  // namespace pm::agent::pmix
