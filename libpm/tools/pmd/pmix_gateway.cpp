#include "pmix_gateway.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/host_facts.hpp"
#include "agent/private_dir.hpp"
#include "host_shape.hpp"
#include "module_path.hpp"
#include "pm/error.hpp"

namespace pmd {

namespace pmix = pm::agent::pmix;

namespace {

constexpr std::uint64_t tag_listener = 1;
constexpr std::uint64_t tag_server = 2;
constexpr std::uint64_t tag_timer = 3;
constexpr std::uint64_t tag_relay = std::uint64_t{1} << 56;

[[noreturn]] void fail(const std::string& what) {
  throw pm::error(pm::errc::system, "PMIx: " + what + ": " + std::strerror(errno));
}

std::string pmix_module_path() {
#ifdef PM_PMIX_MODULE_DIRS
  return module_path("PM_PMIX_MODULE", PM_PMIX_MODULE_DIRS, pmix::module_file);
#else
  return module_path("PM_PMIX_MODULE", "../lib", pmix::module_file);
#endif
}

std::string value_of(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      return e.substr(name.size() + 1);
    }
  }
  return {};
}

}  // namespace

pmix_gateway::pmix_gateway(const pm::link::pmix_job& job, pm::agent::pmix::server_place place,
                           pm::link::owned_fd listener, reporter report,
                           std::function<void()> await_agent)
    : job_(job),
      report_(std::move(report)),
      await_agent_(std::move(await_agent)),
      place_(std::move(place)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      listener_(std::move(listener)),
      timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      relay_(epoll_.get(), tag_relay,
             tcp_relay::options{::geteuid(), std::chrono::milliseconds(5000),
                                std::chrono::milliseconds(10000),
                                [this]() -> std::optional<std::string> {
                                  if (!ensure_server()) return std::nullopt;
                                  return server_path_;
                                },
                                [this](const std::string& line) { say(line); }}) {
  if (!epoll_) fail("epoll_create1");
  if (!timer_) fail("timerfd_create");
  for (std::uint32_t r = 0; r < job_.rank_node.size(); ++r) {
    if (job_.rank_node[r] == job_.node) local_ranks_.push_back(r);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_listener;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  ev.data.u64 = tag_timer;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, timer_.get(), &ev);
}

pmix_gateway::~pmix_gateway() {
  stop();  // pmd-helper calls it itself, then ends with _Exit
}

void pmix_gateway::stop() {
  if (stopped_) return;
  stopped_ = true;
  // First every relayed connection: PMIx's progress thread must not be waiting on a connection
  // whose end only this thread would deliver.
  relay_.close_all();
  // The refusals, counted: one line for all of them if there were more than were shown.
  std::string counts;
  std::uint64_t total = 0;
  for (const auto& [uid, count] : relay_.refused()) {
    total += count;
    counts +=
        (counts.empty() ? "" : ", ") + std::to_string(count) +
        (uid < 0 ? " whose owner the kernel could not name" : " from uid " + std::to_string(uid));
  }
  if (total > relay_.refused().size()) {
    std::fprintf(stderr, "pmd: PMIx: refused %llu connections in all: %s\n",
                 static_cast<unsigned long long>(total), counts.c_str());
  }
  // Unanswered requests fail (their completions' destructors) while the server still runs.
  pending_.clear();
  // Not finalized (above): abandoned to the process's end, which comes next.
  [[maybe_unused]] auto* abandoned = server_.release();
  // The module stays loaded: libpmix keeps atexit handlers and cannot be unloaded safely.
  dir_fd_.reset();
  shm_fd_.reset();
  std::string why;
  if (made_dir_ && !pm::agent::remove_private_tree(place_.dir, &why)) {
    std::fprintf(stderr, "pmd: PMIx: %s\n", why.c_str());
  }
  if (made_shm_ && !pm::agent::remove_private_tree(place_.shm_dir, &why)) {
    std::fprintf(stderr, "pmd: PMIx: %s\n", why.c_str());
  }
}

// Made when the server starts, each checked to be this user's alone and held open
// (agent/private_dir.hpp): nothing is made through a link or in a directory another user owns
// or may write to.
void pmix_gateway::make_dirs() {
  const std::string jd = pmix::job_dir(place_, job_.nspace);
  const std::string js = pmix::job_shm_dir(place_, job_.nspace);
  dir_fd_ = pm::agent::make_private_dir(place_.dir);
  made_dir_ = true;  // from here on, it is ours to remove
  if (::mkdirat(dir_fd_.get(), job_.nspace.c_str(), 0700) != 0) fail("cannot create " + jd);
  // No /dev/shm (a container without it): Open MPI's shared-memory transport then finds no
  // backing directory and its ranks talk over the next transport instead.
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return;
  shm_fd_ = pm::agent::make_private_dir(place_.shm_dir);
  made_shm_ = true;
  if (::mkdirat(shm_fd_.get(), job_.nspace.c_str(), 0700) != 0) fail("cannot create " + js);
}

void pmix_gateway::rank_bound(std::uint32_t rank, std::string cpus) {
  if (rank >= job_.rank_node.size()) return;  // a spawned job's: not bound
  if (server_ && first_registered_) {
    // Registered already without it (a spawn request that came after a rank's PMIx_Init).
    if (!told_late_binding_)
      say("PMIx: rank " + std::to_string(rank) +
          " was bound after the server registered the job: its cpuset "
          "and locality are not registered");
    told_late_binding_ = true;
    return;
  }
  bound_[rank] = std::move(cpus);
}

// A spawned job's namespace and its ranks on this host, with the running server; its
// directories are made in the private ones, held open: never through a link.
void pmix_gateway::register_spawned(const pm::agent::pmix_register_job& r) {
  const auto& nspace = r.job.nspace;
  if (::mkdirat(dir_fd_.get(), nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_dir(place_, nspace));
  }
  if (shm_fd_ && ::mkdirat(shm_fd_.get(), nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_shm_dir(place_, nspace));
  }
  std::string error = server_->register_job(r.job);
  if (!error.empty()) throw pm::error(pm::errc::system, error);
  for (const std::uint32_t rank : r.local_ranks) {
    std::vector<std::string> env;
    error = server_->rank_env(nspace, rank, env);
    if (!error.empty()) throw pm::error(pm::errc::system, error);
  }
}

template <class Completion>
pm::agent::pmix_request_id pmix_gateway::keep(Completion done) {
  const auto id = next_id_++;
  pending_.emplace(id, std::move(done));
  return id;
}

void pmix_gateway::execute(pm::agent::pmix_action& a) {
  namespace ag = pm::agent;
  if (auto* c = std::get_if<ag::pmix_complete>(&a)) {
    complete(*c);
  } else if (auto* m = std::get_if<ag::pmix_serve_modex>(&a)) {
    if (!ensure_server()) {
      report_(ag::pmix_local_modex_answered{m->link_id, false, {}});
      return;
    }
    server_->local_modex(
        m->target, [this, id = m->link_id](pmix::status st, std::vector<char> bytes) {
          report_(ag::pmix_local_modex_answered{id, st == pmix::status::success,
                                                std::string(bytes.begin(), bytes.end())});
        });
  } else if (auto* r = std::get_if<ag::pmix_register_job>(&a)) {
    if (!server_) return;
    try {
      register_spawned(*r);
    } catch (const std::exception& e) {
      say(std::string("PMIx: ") + e.what());
    }
  } else if (auto* x = std::get_if<ag::pmix_restart>(&a)) {
    restart(*x);
  } else if (const auto* again = std::get_if<ag::pmix_reregister>(&a)) {
    // --enable-recovery: the rank's next process connects as the same client (registered when
    // the server registers the job, if it has not yet).
    if (!server_ || !first_registered_) return;
    std::vector<std::string> env;
    const std::string error = server_->rank_env(again->nspace, again->rank, env);
    if (!error.empty()) say("PMIx: " + error);
  } else if (auto* h = std::get_if<ag::pmix_host_named>(&a)) {
    if (place_.hostname.empty()) place_.hostname = h->hostname;
  } else if (auto* n = std::get_if<ag::pmix_notify_ranks>(&a)) {
    if (!server_) return;
    const std::string problem = server_->notify(n->notice);
    if (!problem.empty()) say("PMIx: " + problem);
  }
}

// The request's own kind of completion, with what the relay handed back.
void pmix_gateway::complete(pm::agent::pmix_complete& c) {
  auto it = pending_.find(c.id);
  if (it == pending_.end()) return;
  pending done = std::move(it->second);
  pending_.erase(it);
  const auto take = [&]<class T>(std::type_identity<T>) {
    auto* p = std::get_if<T>(&c.payload);
    return p != nullptr ? std::move(*p) : T{};
  };
  std::visit(
      [&](auto& f) {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, pmix::completion>) {
          f(c.status);
        } else if constexpr (std::is_same_v<F, pmix::data_completion>) {
          f(c.status, take(std::type_identity<std::vector<char>>{}));
        } else if constexpr (std::is_same_v<F, pmix::spawn_completion>) {
          f(c.status, take(std::type_identity<std::string>{}));
        } else if constexpr (std::is_same_v<F, pmix::lookup_completion>) {
          f(c.status, take(std::type_identity<std::vector<pmix::found_value>>{}));
        } else {
          f(c.status, take(std::type_identity<std::vector<pmix::query_value>>{}));
        }
      },
      done);
}

void pmix_gateway::say(const std::string& text) {
  report_(pm::agent::pmix_server_said{text});
}

void pmix_gateway::on_ready() {
  if (stopped_) return;
  epoll_event events[32];
  const int n = ::epoll_wait(epoll_.get(), events, 32, 0);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t tag = events[i].data.u64;
    if (tag == tag_listener) {
      accept_all();
    } else if (tag == tag_server) {
      if (server_) {
        const std::string problem = server_->run_pending();
        if (!problem.empty()) say("PMIx: " + problem);
        take_server_notices();
      }
    } else if (tag == tag_timer) {
      std::uint64_t expirations = 0;
      [[maybe_unused]] const auto r = ::read(timer_.get(), &expirations, sizeof expirations);
      relay_.on_timer(tcp_relay::clock::now());
    } else if (relay_.owns(tag)) {
      relay_.on_event(tag, events[i].events);
    }
  }
  arm_timer();
}

// The timerfd fires at the relay's next deadline (a handshake not complete in time, a drained
// connection), or never.
void pmix_gateway::arm_timer() {
  itimerspec spec{};
  if (const auto at = relay_.next_deadline()) {
    const auto left = std::max(std::chrono::nanoseconds(1), *at - tcp_relay::clock::now());
    spec.it_value.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  }
  ::timerfd_settime(timer_.get(), 0, &spec, nullptr);
}

void pmix_gateway::take_server_notices() {
  if (!server_) return;
  for (const auto& line : server_->take_notices()) say(line);
}

// Every connection goes to the relay, which decides (tcp_relay.hpp): the server starts only
// once one of the job's owner sent a whole PMIx handshake.
void pmix_gateway::accept_all() {
  for (;;) {
    pm::link::owned_fd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return;  // EAGAIN, or an error the next readiness reports again
    relay_.add(std::move(c));
  }
}

// The namespaces served so far go (their clients with them: the ranks are gone); the new
// incarnation's first job is registered before the next client is let in, as the first one was.
void pmix_gateway::restart(pm::agent::pmix_restart& r) {
  // Anything the relay did not complete (it failed every request it knew) fails now.
  pending_.clear();
  if (server_) {
    for (const auto& nspace : r.dropped) {
      const std::string problem = server_->deregister_job(nspace);
      if (!problem.empty()) say("PMIx: " + problem);
    }
  }
  job_ = std::move(r.job);
  local_ranks_.clear();
  for (std::uint32_t rank = 0; rank < job_.rank_node.size(); ++rank) {
    if (job_.rank_node[rank] == job_.node) local_ranks_.push_back(rank);
  }
  if (place_.hostname.empty() && job_.node < job_.nodes.size()) {
    place_.hostname = job_.nodes[job_.node];
  }
  bound_.clear();
  told_late_binding_ = false;
  first_registered_ = false;
}

// A restarted job's namespace, in the private directories made when the server started.
void pmix_gateway::register_restarted() {
  if (::mkdirat(dir_fd_.get(), job_.nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_dir(place_, job_.nspace));
  }
  if (shm_fd_ && ::mkdirat(shm_fd_.get(), job_.nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_shm_dir(place_, job_.nspace));
  }
  register_first_job();
}

bool pmix_gateway::ensure_server() {
  if (server_) {
    if (first_registered_) return true;
    if (start_failure_) return false;
    try {
      register_restarted();
    } catch (const std::exception& e) {
      start_failure_ = e.what();
      say(std::string("PMIx server: ") + e.what());
      return false;
    }
    return true;
  }
  if (start_failure_) return false;
  try {
    start_server();
  } catch (const std::exception& e) {
    start_failure_ = e.what();
    say(std::string("PMIx server: ") + e.what());
    server_.reset();
    report_(pm::agent::pmix_server_failed{});
    return false;
  }
  // Spawned namespaces known already and events that came early reach it now, before the
  // connection that started it: a spawned job's rank would be refused as unknown.
  report_(pm::agent::pmix_server_up{});
  if (await_agent_) await_agent_();
  return true;
}

void pmix_gateway::start_server() {
  // Directories of this user's agents killed by SIGKILL (no time to remove them): looked for
  // when a server starts, so that only jobs that use PMIx pay for the look.
  // pmd named place_.dir in its $TMPDIR (pmix_helper.cpp): that is where others' leftovers are.
  pm::agent::remove_stale_private_dirs(place_.dir.substr(0, place_.dir.rfind('/')), "pm-pmix.");
  pm::agent::remove_stale_private_dirs("/dev/shm", "pm-pmix.");
  make_dirs();
  // The server's socket, in the private directory; named through the open directory when its
  // path would be too long for a Unix socket address.
  server_path_ = place_.dir + "/pmix-server.sock";
  if (server_path_.size() >= 100) {
    server_path_ = "/proc/self/fd/" + std::to_string(dir_fd_.get()) + "/pmix-server.sock";
  }
  const std::string path = pmix_module_path();
  module_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module_ == nullptr) {
    const char* why = ::dlerror();
    throw pm::error(pm::errc::system, "cannot load " + path + ": " + (why ? why : "?"));
  }
  auto start = reinterpret_cast<pmix::start_function>(::dlsym(module_, pmix::start_symbol));
  if (start == nullptr) {
    throw pm::error(pm::errc::system, path + " has no " + pmix::start_symbol);
  }
  // The ranks were told the hash store (predicted_env.hpp); the server reads it from here.
  ::setenv("PMIX_MCA_gds", pmix::server_store, 1);
  // hwloc's display, OpenCL and libxml2 plugins find nothing a rank's placement needs and pull
  // in X11, libxml2 and ICU: 3.3 MB of pmd's memory (measured). hwloc's own XML export remains.
  ::setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_gl,hwloc_opencl,hwloc_xml_libxml", 0);
  // PMIx's threads would each get a malloc arena of their own: one, shared with pmd's thread,
  // is 0.5 MB less of pmd for 128 ranks (measured), and they allocate little after the start.
  ::mallopt(M_ARENA_MAX, 1);
  pmix::options opts;
  opts.hostname = place_.hostname;
  opts.dir = place_.dir;
  opts.shm_dir = shm_fd_ ? place_.shm_dir : std::string();
  // Only pmd reaches the server; tools find pmd's port in PMIx's rendezvous files.
  opts.listener_path = server_path_;
  opts.tool_address = "tcp4://127.0.0.1:" + std::to_string(place_.port);
  // Tools name pmd (pmrun --ps shows its pid), not this helper.
  opts.agent_pid = place_.server_pid;
  // Every request is kept under an id and reported; the agent's relay decides (pmix_relay.hpp).
  namespace ag = pm::agent;
  opts.on.abort = [this](pmix::abort_request r) {
    const auto id = keep(std::move(r.release));
    report_(ag::pmix_abort_called{id, std::move(r.caller), r.exit_status, std::move(r.message)});
  };
  opts.on.fence = [this](pmix::fence_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_fence_called{id, std::move(r.participants), r.collect, std::move(r.data)});
  };
  opts.on.client_connected = [this](const pmix::proc& p) { report_(ag::pmix_client_connected{p}); };
  opts.on.client_finalized = [this](const pmix::proc& p) { report_(ag::pmix_client_finalized{p}); };
  const auto connect = [this](pmix::connect_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_connect_called{id, std::move(r.participants)});
  };
  opts.on.connect = connect;
  opts.on.disconnect = connect;
  opts.on.spawn = [this](pmix::spawn_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_spawn_called{id, std::move(r.requester), std::move(r.apps)});
  };
  opts.on.publish = [this](pmix::publish_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_publish_called{id, std::move(r.publisher), std::move(r.values)});
  };
  opts.on.unpublish = [this](pmix::unpublish_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_unpublish_called{id, std::move(r.requester), std::move(r.keys)});
  };
  opts.on.lookup = [this](pmix::lookup_request r) {
    const auto id = keep(std::move(r.done));
    report_(
        ag::pmix_lookup_called{id, std::move(r.requester), std::move(r.keys), r.wait, r.timeout_s});
  };
  opts.on.query = [this](pmix::query_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_query_called{id, std::move(r.requester), std::move(r.queries)});
  };
  opts.on.direct_modex = [this](pmix::modex_request r) {
    const auto id = keep(std::move(r.done));
    report_(ag::pmix_modex_called{id, std::move(r.target)});
  };
  std::string error;
  server_.reset(start(opts, error));
  if (!server_) throw pm::error(pm::errc::system, error);
  register_first_job();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_server;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, server_->event_fd(), &ev);
}

// The first job (or a restarted job's incarnation) and every local rank, with the running server.
void pmix_gateway::register_first_job() {
  std::string error;
  // Each local rank's binding, as pmd applied it: PMIx then gives it its cpuset and locality.
  pmix::job_info info = pmix::job_info_of(job_);
  for (auto& [rank, cpus] : bound_) info.ranks.at(rank).cpus = std::move(cpus);
  bound_.clear();
  error = server_->register_job(info);
  if (!error.empty()) throw pm::error(pm::errc::system, error);
  take_server_notices();
  bool checked = false;
  for (const std::uint32_t rank : local_ranks_) {
    std::vector<std::string> env;
    error = server_->rank_env(job_.nspace, rank, env);
    if (!error.empty()) throw pm::error(pm::errc::system, error);
    if (checked) continue;
    checked = true;
    // What the ranks were told at exec must be what the server says (but for the URIs: the
    // ranks reach pmd's port, which relays to the server's private socket).
    for (const auto& told : pmix::predicted_rank_env(place_, job_.nspace, rank)) {
      const auto eq = told.find('=');
      const std::string name = told.substr(0, eq);
      if (name.rfind("PMIX_SERVER_URI", 0) == 0) continue;
      const std::string said = value_of(env, name);
      if (said != told.substr(eq + 1)) {
        say("PMIx: ranks were told " + told + ", the server says '" + said + "'");
      }
    }
  }
  first_registered_ = true;
}

}  // namespace pmd
