// The embedded PMIx server's upcalls for spawn, publish/lookup and connect (pmix_host.hpp;
// docs/pmix.md, "Spawn, publish/lookup, connect"): each request is copied and queued for the host,
// whose answer goes back to PMIx through the request's completion.
#include <pmix.h>
#include <pmix_server.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/pmix_host_impl.hpp"

namespace pm::agent::pmix {

namespace {

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

}  // namespace

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

pmix_status_t on_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return queue_connect(false, procs, nprocs, cbfunc, cbdata);
}
pmix_status_t on_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t[], size_t,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) {
  return queue_connect(true, procs, nprocs, cbfunc, cbdata);
}

}  // namespace pm::agent::pmix
