// The embedded PMIx server's upcalls for a job's ranks and tools (pmix_host.hpp): a rank connects
// and finalizes, aborts, joins a fence, asks another host's rank's modex data, queries; a tool
// connects; event registrations. And the module table PMIx_server_init is given, with the spawn,
// publish/lookup and connect upcalls of pmix_host_spawn.cpp.
#include <pmix.h>
#include <pmix_server.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/pmix_host_impl.hpp"

namespace pm::agent::pmix {

namespace {

void release_bytes(void* p) {
  delete static_cast<std::vector<char>*>(p);
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

// ---- upcalls: on PMIx's progress thread; copy, queue, return ----
// They are C callbacks: nothing may throw out of them. Until a request's completion exists, a
// failure is returned to PMIx as a status; after that, the completion carries it.

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
  // The rank is released only once the host has heard the notice (on the host's thread, right
  // after its callback): a host that sees the rank exit next has it already (pmd ends a job whose
  // rank left without finalizing). Released first, the notice could be lost with the server's
  // process (pmd-helper killed right after the rank's MPI_Finalize returned) while the rank ran
  // on and then exited as if it had never finalized.
  // The release is an op_completion: after stop() it calls nothing into PMIx, and work that
  // stop() drops unrun releases the rank with an error instead of leaving it blocked.
  server::impl* s = current.load();
  if (s == nullptr || !s->opts.on.client_finalized) {
    if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
  }
  std::shared_ptr<completion> release;
  try {
    release = std::make_shared<completion>(op_completion(s->live, cbfunc, cbdata));
  } catch (...) {  // out of memory: the host misses the notice, the rank is released now
    if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
  }
  try {
    s->post([who = from_pmix(*p), release](callbacks& on) {
      on.client_finalized(who);
      (*release)();
    });
  } catch (...) {
    (*release)();  // out of memory: as above
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
  // Named after the agent users see (pmd), where the server runs in a helper of it.
  const long agent = s != nullptr && s->opts.agent_pid > 0 ? static_cast<long>(s->opts.agent_pid)
                                                           : static_cast<long>(::getpid());
  std::snprintf(name, sizeof name, "%s.%ld.%u", trusted ? "pm-tool" : "pm-untrusted", agent,
                tools.fetch_add(1));
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

}  // namespace

pmix_server_module_t the_module = module_table();

}  // namespace pm::agent::pmix
