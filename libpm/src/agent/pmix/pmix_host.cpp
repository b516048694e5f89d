// The embedded PMIx server (pmix_host.hpp, docs/pmix.md). Facts it relies on were measured with
// PMIx 4.2.2 and Open MPI 4.1.4 (shared/PMIX.md); each is named where it is used.
#include "agent/pmix/pmix_host.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pmix.h>
#include <pmix_server.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

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

[[noreturn]] void fail(const std::string& what, pmix_status_t rc) {
  throw pm::error(pm::errc::system, "PMIx: " + what + " failed: " + PMIx_Error_string(rc));
}

pmix_status_t to_pmix(status s) noexcept {
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

proc from_pmix(const pmix_proc_t& p) {
  return proc{std::string(p.nspace, ::strnlen(p.nspace, PMIX_MAX_NSLEN)), p.rank};
}

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

// Completions check it before calling into PMIx: after stop() they do nothing.
struct liveness {
  std::mutex mu;
  bool alive = true;
};

void release_bytes(void* p) {
  delete static_cast<std::vector<char>*>(p);
}

completion op_completion(std::shared_ptr<liveness> live, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return completion([live = std::move(live), cbfunc, cbdata](status s) {
    std::lock_guard lock(live->mu);
    if (live->alive && cbfunc != nullptr) cbfunc(to_pmix(s), cbdata);
  });
}

data_completion modex_completion(std::shared_ptr<liveness> live, pmix_modex_cbfunc_t cbfunc,
                                 void* cbdata) {
  return data_completion(
      [live = std::move(live), cbfunc, cbdata](status s, std::vector<char> bytes) {
        std::lock_guard lock(live->mu);
        if (!live->alive || cbfunc == nullptr) return;
        // PMIx reads the bytes until it calls release_bytes.
        auto* held = new std::vector<char>(std::move(bytes));
        cbfunc(to_pmix(s), held->data(), held->size(), cbdata, release_bytes, held);
      });
}

pmix_proc_state_t to_pmix(proc_state s) noexcept {
  switch (s) {
    case proc_state::undefined:
      return PMIX_PROC_STATE_UNDEF;
    case proc_state::running:
      return PMIX_PROC_STATE_RUNNING;
    case proc_state::terminated:
      return PMIX_PROC_STATE_TERMINATED;
    case proc_state::exited_nonzero:
      return PMIX_PROC_STATE_TERM_NON_ZERO;
    case proc_state::killed_by_signal:
      return PMIX_PROC_STATE_ABORTED_BY_SIG;
    case proc_state::killed_by_cmd:
      return PMIX_PROC_STATE_KILLED_BY_CMD;
    case proc_state::failed_to_start:
      return PMIX_PROC_STATE_FAILED_TO_START;
    case proc_state::comm_lost:
      return PMIX_PROC_STATE_COMM_FAILED;
  }
  return PMIX_PROC_STATE_UNDEF;
}

// The values of a query's answer in PMIx's form: one pmix_info_t per value, with the key asked
// (as PMIx's own examples and tools read it). Owned here until PMIx calls release_infos.
struct query_answer {
  pmix_info_t* info = nullptr;
  std::size_t n = 0;
  ~query_answer() { PMIX_INFO_FREE(info, n); }
};

void release_infos(void* p) {
  delete static_cast<query_answer*>(p);
}

char* copy_string(const std::string& s) {
  char* out = ::strdup(s.c_str());
  if (out == nullptr) throw std::bad_alloc();
  return out;
}

void load_value(pmix_info_t& info, const query_value& v) {
  PMIX_LOAD_KEY(info.key, v.key.c_str());
  pmix_value_t& val = info.value;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          val.type = PMIX_STRING;
          val.data.string = copy_string(x);
        } else if constexpr (std::is_same_v<T, std::uint32_t>) {
          val.type = PMIX_UINT32;
          val.data.uint32 = x;
        } else if constexpr (std::is_same_v<T, std::size_t>) {
          val.type = PMIX_SIZE;
          val.data.size = x;
        } else if constexpr (std::is_same_v<T, bool>) {
          val.type = PMIX_BOOL;
          val.data.flag = x;
        } else {
          // PMIX_DATA_ARRAY of pmix_proc_info_t (PMIx frees the strings with the array).
          pmix_data_array_t* arr = nullptr;
          PMIX_DATA_ARRAY_CREATE(arr, x.size(), PMIX_PROC_INFO);
          if (arr == nullptr) throw std::bad_alloc();
          val.type = PMIX_DATA_ARRAY;
          val.data.darray = arr;  // freed with the info from here on
          if (!x.empty() && arr->array == nullptr) throw std::bad_alloc();
          auto* table = static_cast<pmix_proc_info_t*>(arr->array);
          for (std::size_t i = 0; i < x.size(); ++i) {
            const proc_entry& e = x[i];
            PMIX_PROC_LOAD(&table[i].proc, e.who.nspace.c_str(), e.who.rank);
            table[i].hostname = copy_string(e.hostname);
            table[i].executable_name = copy_string(e.executable);
            table[i].pid = static_cast<pid_t>(e.pid);
            table[i].exit_code = e.exit_code;
            table[i].state = to_pmix(e.state);
          }
        }
      },
      v.value);
}

}  // namespace

// check_job_info, make_job_info and the completions are in job_info.cpp and completion.cpp:
// they need no PMIx, and pmd uses them without loading it.

// ---- the server ----

struct job_state {
  job_info info;
  std::string dir;                     // Open MPI's session directory base
  std::string shm_dir;                 // Open MPI's shared-memory segments (empty: in dir)
  std::vector<std::string> setup_env;  // from PMIx_server_setup_application
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

namespace {

// The one server of this process, for the upcalls (fence and modex carry no server object).
std::atomic<server::impl*> current{nullptr};
std::mutex start_mu;  // start() and stop() of different servers never overlap
// libpmix 4.2.2 cannot start a server again after PMIx_server_finalize: its listener thread
// aborts ("bit out of range 0 - FD_SETSIZE on fd_set", measured). One per process, then.
bool started_once = false;  // guarded by start_mu

// ---- upcalls: on PMIx's progress thread; copy, queue, return ----
// They are C callbacks: nothing may throw out of them. Until a request's completion exists, a
// failure is returned to PMIx as a status; after that, the completion carries it.

// Tools that connected to the server's TCP port before it was shut (on_tool_connected) are named
// with this prefix; whatever they ask is refused at once, the host never sees it.
constexpr std::string_view untrusted_prefix = "pm-untrusted.";
bool untrusted(const pmix_proc_t* p) noexcept {
  return p != nullptr &&
         std::strncmp(p->nspace, untrusted_prefix.data(), untrusted_prefix.size()) == 0;
}

void notify(void (*pick)(callbacks&, const proc&), bool wanted, const pmix_proc_t* p) noexcept {
  server::impl* s = current.load();
  if (s == nullptr || !wanted) return;
  try {
    s->post([who = from_pmix(*p), pick](callbacks& on) { pick(on, who); });
  } catch (...) {  // out of memory: the host misses a notice, PMIx is not affected
  }
}

pmix_status_t on_connected(const pmix_proc_t* p, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);  // nothing for the host to decide
  server::impl* s = current.load();
  notify([](callbacks& on, const proc& who) { on.client_connected(who); },
         s != nullptr && s->opts.on.client_connected, p);
  return PMIX_SUCCESS;
}

pmix_status_t on_finalized(const pmix_proc_t* p, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  // Queued before the rank is released: a host that sees the rank exit next finds the notice
  // already waiting (pmd ends a job whose rank left without finalizing).
  server::impl* s = current.load();
  notify([](callbacks& on, const proc& who) { on.client_finalized(who); },
         s != nullptr && s->opts.on.client_finalized, p);
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);
  return PMIX_SUCCESS;
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

pmix_status_t on_abort(const pmix_proc_t* p, void*, int exit_status, const char msg[],
                       pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  // No handler: release the caller now (PMIX_OPERATION_SUCCEEDED: cbfunc will not be called).
  if (s == nullptr || !s->opts.on.abort) return PMIX_OPERATION_SUCCEEDED;
  std::shared_ptr<abort_request> r;
  try {
    r = std::make_shared<abort_request>();
    r->caller = from_pmix(*p);
    r->exit_status = exit_status;
    if (msg != nullptr) r->message = msg;
    for (size_t i = 0; procs != nullptr && i < nprocs; ++i) {
      r->targets.push_back(from_pmix(procs[i]));
    }
    r->release = op_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<abort_request, completion>(
      s, std::move(r), &abort_request::release,
      [](callbacks& on, abort_request&& req) { on.abort(std::move(req)); });
}

pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                       size_t ninfo, char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                       void* cbdata) {
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.fence) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<fence_request> r;
  try {
    r = std::make_shared<fence_request>();
    for (size_t i = 0; i < nprocs; ++i) r->participants.push_back(from_pmix(procs[i]));
    // "Collect" is the presence of PMIX_COLLECT_DATA (true), not the size of the data
    // (shared/PMIX.md).
    for (size_t i = 0; i < ninfo; ++i) {
      if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA)) r->collect = PMIX_INFO_TRUE(&info[i]);
    }
    if (data != nullptr) r->data.assign(data, data + ndata);
    r->done = modex_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<fence_request, data_completion>(
      s, std::move(r), &fence_request::done,
      [](callbacks& on, fence_request&& req) { on.fence(std::move(req)); });
}

pmix_status_t on_direct_modex(const pmix_proc_t* p, const pmix_info_t[], size_t,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.direct_modex) return PMIX_ERR_NOT_FOUND;
  std::shared_ptr<modex_request> r;
  try {
    r = std::make_shared<modex_request>();
    r->target = from_pmix(*p);
    r->done = modex_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<modex_request, data_completion>(
      s, std::move(r), &modex_request::done,
      [](callbacks& on, modex_request&& req) { on.direct_modex(std::move(req)); });
}

pmix_status_t on_query(pmix_proc_t* p, pmix_query_t* queries, size_t nqueries,
                       pmix_info_cbfunc_t cbfunc, void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.query || cbfunc == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<query_request> r;
  try {
    r = std::make_shared<query_request>();
    if (p != nullptr) r->requester = from_pmix(*p);
    for (size_t i = 0; i < nqueries; ++i) {
      query q;
      for (char** k = queries[i].keys; k != nullptr && *k != nullptr; ++k) q.keys.emplace_back(*k);
      for (size_t j = 0; j < queries[i].nqual; ++j) {
        const pmix_info_t& qual = queries[i].qualifiers[j];
        if (PMIX_CHECK_KEY(&qual, PMIX_NSPACE) && qual.value.type == PMIX_STRING &&
            qual.value.data.string != nullptr) {
          q.nspace = qual.value.data.string;
        } else if (PMIX_CHECK_KEY(&qual, PMIX_NSPACE) && qual.value.type == PMIX_PROC_NSPACE &&
                   qual.value.data.nspace != nullptr) {
          q.nspace = std::string(*qual.value.data.nspace,
                                 ::strnlen(*qual.value.data.nspace, PMIX_MAX_NSLEN));
        } else if (PMIX_CHECK_KEY(&qual, PMIX_RANK) && qual.value.type == PMIX_PROC_RANK) {
          q.rank = qual.value.data.rank;
        } else if (PMIX_CHECK_KEY(&qual, PMIX_HOSTNAME) && qual.value.type == PMIX_STRING &&
                   qual.value.data.string != nullptr) {
          q.hostname = qual.value.data.string;
        }
      }
      r->queries.push_back(std::move(q));
    }
    r->done = query_completion(
        [live = s->live, cbfunc, cbdata](status st, std::vector<query_value> values) {
          std::lock_guard lock(live->mu);
          if (!live->alive) return;
          auto* answer = new (std::nothrow) query_answer;
          pmix_status_t rc = to_pmix(st);
          if (answer == nullptr) {
            rc = PMIX_ERR_NOMEM;
          } else if ((st == status::success || st == status::partial_success) && !values.empty()) {
            try {
              PMIX_INFO_CREATE(answer->info, values.size());
              if (answer->info == nullptr) throw std::bad_alloc();
              answer->n = values.size();
              for (std::size_t i = 0; i < values.size(); ++i)
                load_value(answer->info[i], values[i]);
            } catch (...) {
              rc = PMIX_ERR_NOMEM;
            }
          }
          if (rc != PMIX_SUCCESS && rc != PMIX_QUERY_PARTIAL_SUCCESS && answer != nullptr) {
            delete answer;
            answer = nullptr;
          }
          // PMIx reads the values until it calls release_infos.
          cbfunc(rc, answer != nullptr ? answer->info : nullptr, answer != nullptr ? answer->n : 0,
                 cbdata, answer != nullptr ? release_infos : nullptr, answer);
        });
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<query_request, query_completion>(
      s, std::move(r), &query_request::done,
      [](callbacks& on, query_request&& req) { on.query(std::move(req)); });
}

// A tool attaches (PMIx_tool_init): PMIx 4.2.2 refuses tools when the host has no answer here.
// Who may connect at all was decided before libpmix read a byte: the host's relay asks the kernel
// who made each connection (docs/pmix.md, "Who reaches the server"); the uid a tool writes into
// its handshake is not looked at. Nor can a tool be refused here: libpmix 4.2.2's refusal path
// crashes the server (cnct_cbfunc reads the name it was not given, and process_cbfunc unlinks
// the tool's namespace from a list it never joined). So every tool gets a name of its own (one
// per connection, as PRRTE names them), answered at once on the progress thread; one that
// connected before the server's TCP port was shut (options::listener_path) is named
// "pm-untrusted.*", its connection was shut already, and whatever it asks is refused.
void on_tool_connected(pmix_info_t*, size_t, pmix_tool_connection_cbfunc_t cbfunc, void* cbdata) {
  static std::atomic<unsigned> tools{0};
  if (cbfunc == nullptr) return;
  server::impl* s = current.load();
  const bool trusted = s == nullptr || s->opts.listener_path.empty() || s->confined.load();
  pmix_proc_t tool;
  char name[PMIX_MAX_NSLEN + 1];
  std::snprintf(name, sizeof name, "%s.%ld.%u", trusted ? "pm-tool" : "pm-untrusted",
                static_cast<long>(::getpid()), tools.fetch_add(1));
  PMIX_PROC_LOAD(&tool, name, 0);
  if (!trusted && s != nullptr) {
    s->note(
        "PMIx: a tool connected to the server's TCP port before it was shut; it was cut off "
        "and is refused whatever it asks");
  }
  cbfunc(PMIX_SUCCESS, &tool, cbdata);
}

// A rank registers a handler for a system event (PMIX_EVENT_NODE_DOWN, which server::notify
// sends for a lost host): libpmix refuses that unless the host has this upcall. The server itself
// delivers what the host notifies, so there is nothing to set up: done at once.
pmix_status_t on_register_events(pmix_status_t*, size_t, const pmix_info_t*, size_t,
                                 pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}
pmix_status_t on_deregister_events(pmix_status_t*, size_t, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

// ---- spawn, publish/lookup, connect (docs/pmix.md, "Spawn, publish/lookup, connect") ----

// A published pmix_value_t as bytes the host keeps without knowing PMIx's types, and back: PMIx's
// own packing (strings, ints, byte objects, ... round-trip: PmixHost.PublishLookupWaits).
std::vector<char> pack_value(const pmix_value_t& v) {
  pmix_data_buffer_t buf;
  PMIX_DATA_BUFFER_CONSTRUCT(&buf);
  const pmix_status_t rc =
      PMIx_Data_pack(nullptr, &buf, const_cast<pmix_value_t*>(&v), 1, PMIX_VALUE);
  pmix_byte_object_t bo;
  PMIX_BYTE_OBJECT_CONSTRUCT(&bo);
  if (rc == PMIX_SUCCESS) PMIx_Data_unload(&buf, &bo);
  PMIX_DATA_BUFFER_DESTRUCT(&buf);
  std::vector<char> out;
  try {
    if (bo.bytes != nullptr) out.assign(bo.bytes, bo.bytes + bo.size);
  } catch (...) {
    PMIX_BYTE_OBJECT_DESTRUCT(&bo);
    throw;
  }
  PMIX_BYTE_OBJECT_DESTRUCT(&bo);
  if (rc != PMIX_SUCCESS) fail("PMIx_Data_pack", rc);
  return out;
}

pmix_status_t unpack_value(const std::vector<char>& bytes, pmix_value_t* out) noexcept {
  pmix_byte_object_t bo;
  PMIX_BYTE_OBJECT_CONSTRUCT(&bo);
  bo.bytes = static_cast<char*>(::malloc(bytes.empty() ? 1 : bytes.size()));
  if (bo.bytes == nullptr) return PMIX_ERR_NOMEM;
  std::memcpy(bo.bytes, bytes.data(), bytes.size());
  bo.size = bytes.size();
  pmix_data_buffer_t buf;
  PMIX_DATA_BUFFER_CONSTRUCT(&buf);
  PMIx_Data_load(&buf, &bo);  // the buffer owns the bytes now
  std::int32_t n = 1;
  const pmix_status_t rc = PMIx_Data_unpack(nullptr, &buf, out, &n, PMIX_VALUE);
  PMIX_DATA_BUFFER_DESTRUCT(&buf);
  return rc;
}

std::string string_of(const pmix_value_t& v) {
  return v.type == PMIX_STRING && v.data.string != nullptr ? std::string(v.data.string)
                                                           : std::string();
}

std::vector<std::string> split_hosts(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Open MPI 4.1 sends mapping, binding, personality and prefix directives too: not honoured.
pmix_status_t on_spawn(const pmix_proc_t* p, const pmix_info_t job_info[], size_t ninfo,
                       const pmix_app_t apps[], size_t napps, pmix_spawn_cbfunc_t cbfunc,
                       void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.spawn || cbfunc == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<spawn_request> r;
  try {
    r = std::make_shared<spawn_request>();
    if (p != nullptr) r->requester = from_pmix(*p);
    std::string job_wdir;
    std::vector<std::string> job_hosts;
    for (size_t i = 0; i < ninfo; ++i) {
      if (PMIX_CHECK_KEY(&job_info[i], PMIX_WDIR)) job_wdir = string_of(job_info[i].value);
      if (PMIX_CHECK_KEY(&job_info[i], PMIX_HOST)) {
        job_hosts = split_hosts(string_of(job_info[i].value));
      }
    }
    for (size_t a = 0; a < napps; ++a) {
      const pmix_app_t& in = apps[a];
      spawn_app app;
      // pmix_app_t.argv starts with the command (Open MPI 4.1's dpm.c puts it there); cmd wins.
      for (char** v = in.argv; v != nullptr && *v != nullptr; ++v) app.argv.emplace_back(*v);
      if (in.cmd != nullptr) {
        if (app.argv.empty()) {
          app.argv.emplace_back(in.cmd);
        } else {
          app.argv.front() = in.cmd;
        }
      }
      for (char** e = in.env; e != nullptr && *e != nullptr; ++e) app.env.emplace_back(*e);
      app.wdir = in.cwd != nullptr ? in.cwd : "";
      app.max_procs = in.maxprocs > 0 ? static_cast<std::uint32_t>(in.maxprocs) : 0;
      app.hosts = job_hosts;
      for (size_t i = 0; in.info != nullptr && i < in.ninfo; ++i) {
        if (PMIX_CHECK_KEY(&in.info[i], PMIX_WDIR) && app.wdir.empty()) {
          app.wdir = string_of(in.info[i].value);
        }
        if (PMIX_CHECK_KEY(&in.info[i], PMIX_HOST)) {
          app.hosts = split_hosts(string_of(in.info[i].value));
        }
      }
      if (app.wdir.empty()) app.wdir = job_wdir;
      r->apps.push_back(std::move(app));
    }
    r->done =
        spawn_completion([live = s->live, cbfunc, cbdata](status st, const std::string& nspace) {
          std::lock_guard lock(live->mu);
          if (!live->alive) return;
          pmix_nspace_t ns;
          PMIX_LOAD_NSPACE(ns, st == status::success ? nspace.c_str() : nullptr);
          cbfunc(to_pmix(st), ns, cbdata);
        });
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<spawn_request, spawn_completion>(
      s, std::move(r), &spawn_request::done,
      [](callbacks& on, spawn_request&& req) { on.spawn(std::move(req)); });
}

pmix_status_t on_publish(const pmix_proc_t* p, const pmix_info_t info[], size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.publish) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<publish_request> r;
  try {
    r = std::make_shared<publish_request>();
    r->publisher = from_pmix(*p);
    for (size_t i = 0; i < ninfo; ++i) {
      // Directives (PMIX_RANGE, PMIX_PERSISTENCE, the PMIX_USERID PMIx adds) are not data.
      if (PMIX_CHECK_RESERVED_KEY(info[i].key)) continue;
      r->values.push_back({std::string(info[i].key, ::strnlen(info[i].key, PMIX_MAX_KEYLEN)),
                           pack_value(info[i].value)});
    }
    r->done = op_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<publish_request, completion>(
      s, std::move(r), &publish_request::done,
      [](callbacks& on, publish_request&& req) { on.publish(std::move(req)); });
}

pmix_status_t on_lookup(const pmix_proc_t* p, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.lookup || cbfunc == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<lookup_request> r;
  try {
    r = std::make_shared<lookup_request>();
    r->requester = from_pmix(*p);
    for (char** k = keys; k != nullptr && *k != nullptr; ++k) r->keys.emplace_back(*k);
    for (size_t i = 0; i < ninfo; ++i) {
      // PMIX_WAIT is an int ("at least N of the keys", 0 all) or a bool: any but false waits
      // for all of them.
      if (PMIX_CHECK_KEY(&info[i], PMIX_WAIT)) {
        r->wait = info[i].value.type != PMIX_BOOL || info[i].value.data.flag;
      } else if (PMIX_CHECK_KEY(&info[i], PMIX_TIMEOUT)) {
        const pmix_value_t& v = info[i].value;
        const long t = v.type == PMIX_INT      ? v.data.integer
                       : v.type == PMIX_INT32  ? v.data.int32
                       : v.type == PMIX_UINT32 ? static_cast<long>(v.data.uint32)
                                               : 0;
        r->timeout_s = t > 0 ? static_cast<std::uint32_t>(t) : 0;
      }
    }
    r->done = lookup_completion(
        [live = s->live, cbfunc, cbdata](status st, std::vector<found_value> values) {
          std::lock_guard lock(live->mu);
          if (!live->alive) return;
          pmix_status_t rc = to_pmix(st);
          pmix_pdata_t* data = nullptr;
          std::size_t n = 0;
          if (rc == PMIX_SUCCESS && !values.empty()) {
            PMIX_PDATA_CREATE(data, values.size());
            if (data == nullptr) rc = PMIX_ERR_NOMEM;
          }
          for (std::size_t i = 0; rc == PMIX_SUCCESS && data != nullptr && i < values.size(); ++i) {
            const found_value& f = values[i];
            PMIX_PROC_LOAD(&data[i].proc, f.publisher.nspace.c_str(), f.publisher.rank);
            PMIX_LOAD_KEY(data[i].key, f.key.c_str());
            rc = unpack_value(f.value, &data[i].value);
            ++n;
          }
          // PMIx copies the data before the callback returns.
          cbfunc(rc, rc == PMIX_SUCCESS ? data : nullptr, rc == PMIX_SUCCESS ? n : 0, cbdata);
          if (data != nullptr) PMIX_PDATA_FREE(data, values.size());
        });
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<lookup_request, lookup_completion>(
      s, std::move(r), &lookup_request::done,
      [](callbacks& on, lookup_request&& req) { on.lookup(std::move(req)); });
}

pmix_status_t on_unpublish(const pmix_proc_t* p, char** keys, const pmix_info_t[], size_t,
                           pmix_op_cbfunc_t cbfunc, void* cbdata) {
  if (untrusted(p)) return PMIX_ERR_NO_PERMISSIONS;
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.unpublish) return PMIX_ERR_NOT_SUPPORTED;
  std::shared_ptr<unpublish_request> r;
  try {
    r = std::make_shared<unpublish_request>();
    r->requester = from_pmix(*p);
    for (char** k = keys; k != nullptr && *k != nullptr; ++k) r->keys.emplace_back(*k);
    r->done = op_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  return queue_request<unpublish_request, completion>(
      s, std::move(r), &unpublish_request::done,
      [](callbacks& on, unpublish_request&& req) { on.unpublish(std::move(req)); });
}

// PMIx calls these only when some participant is not local (pmix_server_ops.c, trk->local).
pmix_status_t queue_connect(bool disconnect, const pmix_proc_t procs[], size_t nprocs,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) {
  server::impl* s = current.load();
  if (s == nullptr || !(disconnect ? s->opts.on.disconnect : s->opts.on.connect)) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  std::shared_ptr<connect_request> r;
  try {
    r = std::make_shared<connect_request>();
    for (size_t i = 0; i < nprocs; ++i) r->participants.push_back(from_pmix(procs[i]));
    r->done = op_completion(s->live, cbfunc, cbdata);
  } catch (...) {
    return PMIX_ERR_NOMEM;
  }
  if (disconnect) {
    return queue_request<connect_request, completion>(
        s, std::move(r), &connect_request::done,
        [](callbacks& on, connect_request&& req) { on.disconnect(std::move(req)); });
  }
  return queue_request<connect_request, completion>(
      s, std::move(r), &connect_request::done,
      [](callbacks& on, connect_request&& req) { on.connect(std::move(req)); });
}

pmix_status_t on_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return queue_connect(false, procs, nprocs, cbfunc, cbdata);
}
pmix_status_t on_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return queue_connect(true, procs, nprocs, cbfunc, cbdata);
}

// Static: libpmix keeps the pointer until PMIx_server_finalize. What is not set here PMIx
// answers with "not supported" (docs/pmix.md).
pmix_server_module_t module_table() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = on_connected;
  m.client_finalized = on_finalized;
  m.abort = on_abort;
  m.fence_nb = on_fence;
  m.direct_modex = on_direct_modex;
  m.query = on_query;
  m.spawn = on_spawn;
  m.publish = on_publish;
  m.lookup = on_lookup;
  m.unpublish = on_unpublish;
  m.connect = on_connect;
  m.disconnect = on_disconnect;
  m.tool_connected = on_tool_connected;
  m.register_events = on_register_events;
  m.deregister_events = on_deregister_events;
  return m;
}
pmix_server_module_t the_module = module_table();

std::string default_tmp_root() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? std::string(t) : std::string("/tmp");
}

// Never follows a link, never removes another user's entries (agent/private_dir.hpp).
void remove_tree(const std::string& path) {
  pm::agent::remove_private_tree(path);
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
  if (!p.opts.tool_address.empty()) point_rendezvous_files(pmix_dir, p.opts.tool_address);
}

}  // namespace

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

void server::local_modex(const proc& target, std::function<void(status, std::vector<char>)> done) {
  struct request {
    server::impl* s;
    std::function<void(status, std::vector<char>)> done;
  };
  auto* r = new request{impl_.get(), std::move(done)};
  pmix_proc_t p;
  PMIX_PROC_LOAD(&p, target.nspace.c_str(), target.rank);
  // The answer comes on PMIx's progress thread: copy the bytes, run `done` on the host thread.
  auto cb = [](pmix_status_t rc, char* data, size_t ndata, void* cbdata) {
    std::unique_ptr<request> req(static_cast<request*>(cbdata));
    try {
      std::vector<char> bytes;
      if (rc == PMIX_SUCCESS && data != nullptr) bytes.assign(data, data + ndata);
      const status st = rc == PMIX_SUCCESS         ? status::success
                        : rc == PMIX_ERR_NOT_FOUND ? status::not_found
                        : rc == PMIX_ERR_TIMEOUT   ? status::timeout
                        : rc == PMIX_ERR_UNREACH   ? status::unreachable
                                                   : status::error;
      req->s->post([fn = std::move(req->done), st, b = std::move(bytes)](callbacks&) mutable {
        fn(st, std::move(b));
      });
    } catch (...) {  // out of memory: the asking rank gets no answer from here; its host's
    }                // completion fails it when the job ends
  };
  const pmix_status_t rc = PMIx_server_dmodex_request(&p, cb, r);
  if (rc != PMIX_SUCCESS) {
    std::unique_ptr<request> req(r);
    req->done(status::error, {});
  }
}

int event_code(pm::notice_kind kind) noexcept {
  switch (kind) {
    case pm::notice_kind::rank_exited:
      return PMIX_ERR_EXIT_NONZERO_TERM;
    case pm::notice_kind::rank_signaled:
      return PMIX_ERR_PROC_ABORTED_BY_SIG;
    case pm::notice_kind::rank_spawn_failed:
      return PMIX_ERR_PROC_FAILED_TO_START;
    case pm::notice_kind::host_lost:
      return PMIX_EVENT_NODE_DOWN;
    case pm::notice_kind::rank_aborted:
      return PMIX_ERR_PROC_REQUESTED_ABORT;
    case pm::notice_kind::job_ending:
      return PMIX_ERR_JOB_CANCELED;
    case pm::notice_kind::rank_unfinalized:
      return PMIX_ERR_PROC_TERM_WO_SYNC;
  }
  return PMIX_ERROR;
}

void server::notify(const event_notice& n) {
  if (!impl_->running) return;
  using pm::notice_kind;
  // Held until PMIx calls back (4.2.2 copies the array at once, but does not promise to).
  auto held = std::make_unique<info_array>();
  {
    info_list list;
    pmix_proc_t one;
    if (n.ranks.size() == 1) {
      PMIX_PROC_LOAD(&one, n.nspace.c_str(), n.ranks.front());
      list.add(PMIX_EVENT_AFFECTED_PROC, &one, PMIX_PROC);
    } else if (!n.ranks.empty()) {
      pmix_data_array_t procs;
      PMIX_DATA_ARRAY_CONSTRUCT(&procs, n.ranks.size(), PMIX_PROC);
      auto* p = static_cast<pmix_proc_t*>(procs.array);
      for (std::size_t i = 0; i < n.ranks.size(); ++i) {
        PMIX_PROC_LOAD(&p[i], n.nspace.c_str(), n.ranks[i]);
      }
      try {
        list.add(PMIX_EVENT_AFFECTED_PROCS, &procs, PMIX_DATA_ARRAY);
      } catch (...) {
        PMIx_Data_array_destruct(&procs);
        throw;
      }
      PMIx_Data_array_destruct(&procs);
    }
    // The code a shell would show: a signal S as 128 + S (the text names the signal).
    if (n.kind != notice_kind::host_lost) {
      const int code = n.kind == notice_kind::rank_signaled ? 128 + n.code : n.code;
      list.add(PMIX_EXIT_CODE, &code, PMIX_INT);
    }
    if (!n.host.empty()) list.add_string(PMIX_HOSTNAME, n.host);
    if (!n.text.empty()) list.add_string(PMIX_EVENT_TEXT_MESSAGE, n.text);
    // Never to default handlers: Open MPI 4.1's calls MPI_Abort on any event it gets.
    list.add_bool(PMIX_EVENT_NON_DEFAULT, true);
    if (n.kind == notice_kind::rank_aborted || n.kind == notice_kind::job_ending ||
        n.kind == notice_kind::rank_unfinalized) {
      list.add_bool(PMIX_EVENT_TERMINATE_JOB, true);
    }
    list.convert(*held);
  }
  // The source is the affected rank (PMIx sends nothing back to a source, and a wildcard source
  // would match every rank); a job's end has none.
  pmix_proc_t source;
  PMIX_PROC_LOAD(&source, n.nspace.c_str(),
                 n.ranks.empty() ? PMIX_RANK_UNDEF : static_cast<pmix_rank_t>(n.ranks.front()));
  auto* data = held.get();
  const pmix_status_t rc = PMIx_Notify_event(
      event_code(n.kind), &source, PMIX_RANGE_NAMESPACE, data->data(), data->size(),
      [](pmix_status_t, void* cbdata) { delete static_cast<info_array*>(cbdata); }, data);
  if (rc == PMIX_SUCCESS) {
    held.release();  // the callback deletes it
  } else if (rc != PMIX_OPERATION_SUCCEEDED) {
    fail("PMIx_Notify_event", rc);
  }
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
