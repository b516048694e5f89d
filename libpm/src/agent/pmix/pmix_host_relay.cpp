// What the host relays into the embedded PMIx server while a job runs (pmix_host.hpp): a local
// rank's modex data that a rank on another host asked for (local_modex), and the events the ranks
// are told of, a rank's exit, a lost host, the job's end (notify, event_code).
#include <pmix.h>
#include <pmix_server.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/pmix_host_impl.hpp"

namespace pm::agent::pmix {

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

}  // namespace pm::agent::pmix
