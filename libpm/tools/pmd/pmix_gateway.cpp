#include "pmix_gateway.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "agent/private_dir.hpp"
#include "pm/error.hpp"

namespace pmd {

namespace pmix = pm::agent::pmix;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t tag_listener = 1;
constexpr std::uint64_t tag_server = 2;
constexpr std::uint64_t tag_timer = 3;
constexpr std::uint64_t tag_relay = std::uint64_t{1} << 56;

[[noreturn]] void fail(const std::string& what) {
  throw pm::error(pm::errc::system, "PMIx: " + what + ": " + std::strerror(errno));
}

std::string tmp_root() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? std::string(t) : std::string("/tmp");
}

std::string module_path() {
  if (const char* p = std::getenv("PM_PMIX_MODULE"); p != nullptr && *p != '\0') return p;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return pmix::module_file;  // the loader's search path
#ifdef PM_PMIX_MODULE_DIRS
  std::string dirs = PM_PMIX_MODULE_DIRS;
#else
  std::string dirs = "../lib";
#endif
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const auto end = std::min(dirs.find(':', at), dirs.size());
    const fs::path candidate = exe.parent_path() / dirs.substr(at, end - at) / pmix::module_file;
    if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
    at = end + 1;
  }
  return pmix::module_file;
}

// True if `dir` exists and lists anything.
bool has_entries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) any = true;
  }
  ::closedir(d);
  return any;
}

// Eight letters and digits from the kernel's random source.
std::string random_word() {
  static constexpr char alphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    fail("getrandom");
  }
  std::string word;
  for (const unsigned char b : bytes) word += alphabet[b % (sizeof alphabet - 1)];
  return word;
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

pmix_gateway::pmix_gateway(const pm::link::pmix_job& job, std::vector<std::string> executables,
                           hooks h)
    : job_(job),
      executables_(std::move(executables)),
      hooks_(std::move(h)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
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
  tcp_only_ = !has_entries("/sys/class/infiniband") && !has_entries("/sys/class/cxi");
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  oversubscribed_ = cores > 0 && local_ranks_.size() > static_cast<std::size_t>(cores);

  // A host that runs none of the first job's ranks (one a spawned job brought in) learns its
  // name for PMIx from that job (add_job).
  if (job_.node < job_.nodes.size()) place_.hostname = job_.nodes[job_.node];
  place_.server_pid = ::getpid();
  // Named now (the ranks are told), made when the server starts: a job that never calls PMIx
  // makes and removes nothing (measured: a directory on /tmp costs ms on a busy disk). The names
  // carry a random part no other user can guess, and mkdir fails rather than follows a name
  // someone made meanwhile.
  const std::string stem = "pm-pmix." + std::to_string(::getpid()) + "." + random_word();
  place_.dir = tmp_root() + "/" + stem;
  place_.shm_dir = "/dev/shm/" + stem;
  listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (!listener_ || ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listener_.get(), 1024) != 0 ||
      ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    fail("cannot listen on 127.0.0.1");
  }
  place_.port = ntohs(sa.sin_port);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_listener;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  ev.data.u64 = tag_timer;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, timer_.get(), &ev);
}

pmix_gateway::~pmix_gateway() {
  stop();  // pmd calls it itself, and ends with _Exit when the server ran
}

bool pmix_gateway::stop() {
  if (stopped_) return true;
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
  aborts_.clear();
  fences_.clear();
  modex_.clear();
  tables_.clear();
  spawns_.clear();
  data_ops_.clear();
  lookups_.clear();
  // Not finalized (above): abandoned to the process's end, which comes next.
  const bool ran = server_ != nullptr;
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
  return !ran;
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

std::vector<std::string> pmix_gateway::rank_env(std::uint32_t rank) const {
  const auto p = proc_of(rank);
  if (!p) return {};
  return pmix::predicted_rank_env(place_, p->nspace, p->rank);
}

const pm::link::pmix_job* pmix_gateway::facts_of(const std::string& nspace,
                                                 std::uint32_t& first) const {
  first = 0;
  if (nspace == job_.nspace) return &job_;
  for (const auto& j : spawned_) {
    if (j.add.pmix && j.add.pmix->nspace == nspace) {
      first = j.add.first;
      return &*j.add.pmix;
    }
  }
  return nullptr;
}

std::optional<std::uint32_t> pmix_gateway::process_of(const pmix::proc& p) const {
  std::uint32_t first = 0;
  const auto* facts = facts_of(p.nspace, first);
  if (facts == nullptr || p.rank == pmix::wildcard_rank || p.rank >= facts->rank_node.size()) {
    return std::nullopt;
  }
  return first + p.rank;
}

bool pmix_gateway::launch_nspace(const std::string& nspace) const {
  std::uint32_t first = 0;
  return facts_of(nspace, first) != nullptr;
}

std::optional<pmix::proc> pmix_gateway::proc_of(std::uint32_t process) const {
  if (process < job_.rank_node.size()) return pmix::proc{job_.nspace, process};
  for (const auto& j : spawned_) {
    if (j.add.pmix && process >= j.add.first &&
        process - j.add.first < j.add.pmix->rank_node.size()) {
      return pmix::proc{j.add.pmix->nspace, process - j.add.first};
    }
  }
  return std::nullopt;
}

void pmix_gateway::add_job(const pm::link::job_add& job) {
  if (!job.pmix) return;
  spawned_job j;
  j.add = job;
  const auto& facts = *job.pmix;
  for (std::uint32_t r = 0; r < facts.rank_node.size(); ++r) {
    if (facts.rank_node[r] == facts.node) j.local.push_back(r);
  }
  if (place_.hostname.empty() && facts.node < facts.nodes.size()) {
    place_.hostname = facts.nodes[facts.node];
  }
  spawned_.push_back(std::move(j));
  if (server_) {
    try {
      register_spawned(spawned_.size() - 1);
    } catch (const std::exception& e) {
      say(std::string("PMIx: ") + e.what());
    }
  }
}

// Registers a spawned job's namespace and its ranks on this host with the running server, and
// makes its directories (the ranks were told them at exec, as the first job's).
void pmix_gateway::register_spawned(std::size_t index) {
  auto& j = spawned_[index];
  if (j.registered) return;
  j.registered = true;
  const auto& facts = *j.add.pmix;
  // In the private directories, held open: never through a link.
  if (::mkdirat(dir_fd_.get(), facts.nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_dir(place_, facts.nspace));
  }
  if (shm_fd_ && ::mkdirat(shm_fd_.get(), facts.nspace.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("cannot create " + pmix::job_shm_dir(place_, facts.nspace));
  }
  auto info = pmix::job_info_of(facts);
  info.spawned = true;
  info.parent = pmix::proc{facts.parent_nspace, facts.parent_rank};
  std::string error = server_->register_job(info);
  if (!error.empty()) throw pm::error(pm::errc::system, error);
  for (const std::uint32_t rank : j.local) {
    std::vector<std::string> env;
    error = server_->rank_env(facts.nspace, rank, env);
    if (!error.empty()) throw pm::error(pm::errc::system, error);
  }
  const std::size_t processes = j.add.first + facts.rank_node.size();
  if (client_state_.size() < processes) client_state_.resize(processes, 0);
}

void pmix_gateway::say(const std::string& text) {
  if (hooks_.notice) {
    hooks_.notice(text);
  } else {
    std::fprintf(stderr, "pmd: %s\n", text.c_str());
  }
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

bool pmix_gateway::ensure_server() {
  if (server_) return true;
  if (start_failure_) return false;
  try {
    start_server();
    return true;
  } catch (const std::exception& e) {
    start_failure_ = e.what();
    say(std::string("PMIx server: ") + e.what());
    server_.reset();
    return false;
  }
}

void pmix_gateway::start_server() {
  // Directories of this user's agents killed by SIGKILL (no time to remove them): looked for
  // when a server starts, so that only jobs that use PMIx pay for the look.
  pm::agent::remove_stale_private_dirs(tmp_root(), "pm-pmix.");
  pm::agent::remove_stale_private_dirs("/dev/shm", "pm-pmix.");
  make_dirs();
  // The server's socket, in the private directory; named through the open directory when its
  // path would be too long for a Unix socket address.
  server_path_ = place_.dir + "/pmix-server.sock";
  if (server_path_.size() >= 100) {
    server_path_ = "/proc/self/fd/" + std::to_string(dir_fd_.get()) + "/pmix-server.sock";
  }
  const std::string path = module_path();
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
  opts.on.abort = [this](pmix::abort_request r) {
    const auto rank = process_of(r.caller);
    if (!rank) {
      r.release(pmix::status::success);  // not a rank of ours: it exits with its status
      return;
    }
    aborts_[*rank] = std::move(r.release);
    if (hooks_.abort) hooks_.abort(*rank, r.exit_status, r.message);
  };
  opts.on.fence = [this](pmix::fence_request r) { on_fence(std::move(r)); };
  client_state_.assign(job_.rank_node.size(), 0);
  opts.on.client_connected = [this](const pmix::proc& p) {
    if (const auto r = process_of(p); r && *r < client_state_.size()) client_state_[*r] = 1;
  };
  opts.on.client_finalized = [this](const pmix::proc& p) {
    if (const auto r = process_of(p); r && *r < client_state_.size()) client_state_[*r] = 2;
  };
  opts.on.connect = [this](pmix::connect_request r) { on_connect(std::move(r)); };
  opts.on.disconnect = [this](pmix::connect_request r) { on_connect(std::move(r)); };
  opts.on.spawn = [this](pmix::spawn_request r) { on_spawn(std::move(r)); };
  opts.on.publish = [this](pmix::publish_request r) {
    const auto rank = process_of(r.publisher);
    if (!rank || !hooks_.publish) {
      r.done(pmix::status::not_supported);
      return;
    }
    pm::link::pmix_publish m{next_request_++, *rank, {}};
    for (auto& v : r.values) {
      m.values.push_back({v.key, *rank, std::string(v.value.begin(), v.value.end())});
    }
    data_ops_.emplace(m.id, std::move(r.done));
    hooks_.publish(std::move(m));
  };
  opts.on.unpublish = [this](pmix::unpublish_request r) {
    const auto rank = process_of(r.requester);
    if (!rank || !hooks_.unpublish) {
      r.done(pmix::status::not_supported);
      return;
    }
    pm::link::pmix_unpublish m{next_request_++, *rank, r.keys};
    data_ops_.emplace(m.id, std::move(r.done));
    hooks_.unpublish(std::move(m));
  };
  opts.on.lookup = [this](pmix::lookup_request r) {
    const auto rank = process_of(r.requester);
    if (!rank || !hooks_.lookup) {
      r.done(pmix::status::not_supported);
      return;
    }
    pm::link::pmix_lookup m{next_request_++, *rank, r.keys, r.wait, r.timeout_s};
    lookups_.emplace(m.id, std::move(r.done));
    hooks_.lookup(std::move(m));
  };
  opts.on.query = [this](pmix::query_request r) { on_query(std::move(r)); };
  opts.on.direct_modex = [this](pmix::modex_request r) {
    // Any rank of any of the launch's jobs on another host (its host answers once the rank has
    // committed its data); a wildcard names no one host.
    const auto target = process_of(r.target);
    if (!target) {
      r.done(pmix::status::not_found);
      return;
    }
    const std::uint64_t id = next_modex_++;
    modex_[id] = std::move(r.done);
    if (hooks_.modex_ask) hooks_.modex_ask(pm::link::modex_request{id, *target});
  };
  std::string error;
  server_.reset(start(opts, error));
  if (!server_) throw pm::error(pm::errc::system, error);
  error = server_->register_job(pmix::job_info_of(job_));
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
    for (const auto& told : rank_env(rank)) {
      const auto eq = told.find('=');
      const std::string name = told.substr(0, eq);
      if (name.rfind("PMIX_SERVER_URI", 0) == 0) continue;
      const std::string said = value_of(env, name);
      if (said != told.substr(eq + 1)) {
        say("PMIx: ranks were told " + told + ", the server says '" + said + "'");
      }
    }
  }
  for (std::size_t i = 0; i < spawned_.size(); ++i) register_spawned(i);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_server;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, server_->event_fd(), &ev);
  // The server keeps events for ranks that register their handlers later.
  for (const auto& n : early_notices_) send_notice(n);
  early_notices_.clear();
}

void pmix_gateway::notify(const pm::link::pmix_notify& notice) {
  if (server_) {
    send_notice(notice);
  } else if (!start_failure_ && early_notices_.size() < 64) {
    early_notices_.push_back(notice);
  }
}

// The notice names processes; PMIx names ranks of a namespace. The affected ranks' namespace is
// told (its survivors here get the event); a job's end, naming none, goes to every namespace.
void pmix_gateway::send_notice(const pm::link::pmix_notify& n) {
  std::map<std::string, std::vector<std::uint32_t>> told;
  if (n.ranks.empty()) {
    told[job_.nspace];
    for (const auto& j : spawned_) {
      if (j.registered) told[j.add.pmix->nspace];
    }
  }
  for (const auto r : n.ranks) {
    if (const auto p = proc_of(r)) told[p->nspace].push_back(p->rank);
  }
  for (auto& [nspace, ranks] : told) {
    const std::string problem = server_->notify(
        pmix::event_notice{nspace, n.kind, std::move(ranks), n.code, n.host, n.text});
    if (!problem.empty()) say("PMIx: " + problem);
  }
}

// Participants as the launcher numbers them: every rank of the first job alone is `all` (the
// common fence, named compactly); anything else is the sorted list of processes, a wildcard
// standing for every rank of its namespace.
bool pmix_gateway::members_of(const std::vector<pmix::proc>& participants,
                              pm::link::fence_members& members, std::string& why) const {
  std::set<std::uint32_t> ranks;
  if (participants.empty()) {
    why = "no participants";
    return false;
  }
  for (const auto& p : participants) {
    if (p.rank != pmix::wildcard_rank) {
      const auto r = process_of(p);
      if (!r) {
        why = "a participant (" + p.nspace + ", " + std::to_string(p.rank) +
              ") of no job of the launch";
        return false;
      }
      ranks.insert(*r);
      continue;
    }
    std::uint32_t first = 0;
    const auto* facts = facts_of(p.nspace, first);
    if (facts == nullptr) {
      why = "namespace " + p.nspace + ", which the launch does not have";
      return false;
    }
    for (std::uint32_t r = 0; r < facts->rank_node.size(); ++r) ranks.insert(first + r);
  }
  const auto n = static_cast<std::uint32_t>(job_.rank_node.size());
  members.all = ranks.size() == n && *ranks.rbegin() == n - 1;
  members.ranks.clear();
  if (!members.all) members.ranks.assign(ranks.begin(), ranks.end());
  return true;
}

void pmix_gateway::contribute(pm::link::fence_members members, bool collect, std::vector<char> data,
                              pmix::data_completion done) {
  const std::uint64_t seq = fence_seq_[members]++;
  pm::link::fence_contribution c;
  c.members = members;
  c.seq = seq;
  c.collect = collect;
  c.data.assign(data.begin(), data.end());
  fences_[{members, seq}] = std::move(done);
  if (hooks_.fence) hooks_.fence(std::move(c));
}

void pmix_gateway::on_fence(pmix::fence_request r) {
  pm::link::fence_members members;
  std::string why;
  if (!members_of(r.participants, members, why)) {
    say("PMIx: a fence with " + why);
    r.done(pmix::status::not_found);
    return;
  }
  contribute(std::move(members), r.collect, std::move(r.data), std::move(r.done));
}

// PMIx_Connect / PMIx_Disconnect across hosts: a fence without data among the participants'
// hosts (every host sees the same collectives of the same members in the same order).
void pmix_gateway::on_connect(pmix::connect_request r) {
  pm::link::fence_members members;
  std::string why;
  if (!members_of(r.participants, members, why)) {
    say("PMIx: a connect with " + why);
    r.done(pmix::status::not_found);
    return;
  }
  auto done = std::make_shared<pmix::completion>(std::move(r.done));
  contribute(std::move(members), false, {},
             pmix::data_completion([done](pmix::status st, std::vector<char>) { (*done)(st); }));
}

// A rank's spawn names it by its process number; anyone else connected to this server is a tool
// attached here (PMIx lets only ranks and tools in), named by its own namespace and rank.
void pmix_gateway::on_spawn(pmix::spawn_request r) {
  if (!hooks_.spawn) {
    r.done(pmix::status::not_supported);
    return;
  }
  pm::link::pmix_spawn m;
  if (const auto rank = process_of(r.requester)) {
    m.rank = *rank;
  } else if (!r.requester.nspace.empty() && r.requester.rank != pmix::wildcard_rank &&
             !launch_nspace(r.requester.nspace)) {
    m.rank = r.requester.rank;
    m.tool = r.requester.nspace;
  } else {
    r.done(pmix::status::error);
    return;
  }
  m.id = next_request_++;
  for (auto& a : r.apps) {
    m.apps.push_back(pm::link::spawn_app_spec{std::move(a.argv), std::move(a.env),
                                              std::move(a.wdir), a.max_procs, std::move(a.hosts)});
  }
  spawns_.emplace(m.id, std::move(r.done));
  hooks_.spawn(std::move(m));
}

void pmix_gateway::spawn_done(const pm::link::pmix_spawn_reply& reply) {
  auto it = spawns_.find(reply.id);
  if (it == spawns_.end()) return;
  auto done = std::move(it->second);
  spawns_.erase(it);
  if (reply.ok) {
    done(pmix::status::success, reply.nspace);
  } else {
    done(pmix::status::error);
  }
}

void pmix_gateway::data_done(const pm::link::pmix_data_reply& reply) {
  const auto status_of = [](pm::link::data_status s) {
    switch (s) {
      case pm::link::data_status::ok:
        return pmix::status::success;
      case pm::link::data_status::not_found:
        return pmix::status::not_found;
      case pm::link::data_status::timeout:
        return pmix::status::timeout;
      case pm::link::data_status::error:
        break;
    }
    return pmix::status::error;
  };
  if (auto it = data_ops_.find(reply.id); it != data_ops_.end()) {
    auto done = std::move(it->second);
    data_ops_.erase(it);
    done(status_of(reply.status));
    return;
  }
  auto it = lookups_.find(reply.id);
  if (it == lookups_.end()) return;
  auto done = std::move(it->second);
  lookups_.erase(it);
  std::vector<pmix::found_value> found;
  for (const auto& v : reply.values) {
    const auto who = proc_of(v.rank);
    found.push_back(pmix::found_value{v.key, who.value_or(pmix::proc{job_.nspace, v.rank}),
                                      std::vector<char>(v.value.begin(), v.value.end())});
  }
  done(status_of(reply.status), std::move(found));
}

pm::link::pmix_server pmix_gateway::server_info() const {
  return {"pmix-server." + std::to_string(place_.server_pid) +
              ";tcp4://127.0.0.1:" + std::to_string(place_.port),
          place_.dir + "/pmix"};
}

void pmix_gateway::rank_started(std::uint32_t rank, std::int64_t pid) {
  local_state_[rank].pid = pid;
}

void pmix_gateway::rank_ended(std::uint32_t rank, pm::exit_status status) {
  local_state_[rank].status = status;
}

pmix::proc_entry pmix_gateway::entry_of(std::uint32_t rank, std::int64_t pid,
                                        const std::optional<pm::exit_status>& status) const {
  pmix::proc_entry e;
  e.who = {job_.nspace, rank};
  e.hostname = job_.nodes.at(job_.rank_node.at(rank));
  const std::uint32_t app = job_.rank_app.at(rank);
  if (app < executables_.size()) e.executable = executables_[app];
  e.pid = pid;
  if (status) {
    e.exit_code = status->shell_code();
    e.state = status->is_signal()   ? pmix::proc_state::killed_by_signal
              : status->code() == 0 ? pmix::proc_state::terminated
                                    : pmix::proc_state::exited_nonzero;
  } else {
    e.state = pid != 0 ? pmix::proc_state::running : pmix::proc_state::undefined;
  }
  return e;
}

// A tool's (or a rank's) query that PMIx could not answer from its own data. The whole job's
// process table needs the launcher (it knows every host's ranks); the rest is known here.
void pmix_gateway::on_query(pmix::query_request r) {
  bool needs_table = false;
  for (const auto& q : r.queries) {
    for (const auto& k : q.keys) {
      if (k == pmix::query_keys::proc_table && q.nspace.value_or(job_.nspace) == job_.nspace) {
        needs_table = true;
      }
    }
  }
  if (needs_table && hooks_.proc_table) {
    const std::uint64_t id = next_table_++;
    tables_.emplace(id, std::move(r));
    hooks_.proc_table(pm::link::proc_table_request{id});
    return;
  }
  answer_query(std::move(r), nullptr);
}

void pmix_gateway::proc_table_done(const pm::link::proc_table_reply& reply) {
  auto it = tables_.find(reply.id);
  if (it == tables_.end()) return;
  auto r = std::move(it->second);
  tables_.erase(it);
  answer_query(std::move(r), &reply);
}

void pmix_gateway::answer_query(pmix::query_request r, const pm::link::proc_table_reply* table) {
  namespace keys = pmix::query_keys;
  std::vector<pmix::query_value> values;
  std::size_t unknown_nspace = 0;
  for (const auto& q : r.queries) {
    const bool ours = q.nspace.value_or(job_.nspace) == job_.nspace;
    for (const auto& k : q.keys) {
      if (k == keys::namespaces) {
        // Every namespace of the launch: the first job's and those its ranks or tools spawned.
        std::string all = job_.nspace;
        for (const auto& j : spawned_) {
          if (j.add.pmix) all += "," + j.add.pmix->nspace;
        }
        values.push_back({k, std::move(all)});
      } else if (k == keys::spawn_support) {
        // The spawn attributes honoured (pmix_common.h's PMIX_HOST, PMIX_WDIR); the rest of a
        // spawn's directives are ignored (docs/pmix.md, "Tools").
        values.push_back({k, std::string("pmix.host,pmix.wdir")});
      } else if (k == keys::debug_support) {
        // No debugger attribute is supported.
        values.push_back({k, std::string()});
      } else if (k == keys::num_psets) {
        values.push_back({k, std::size_t{0}});
      } else if (k == keys::pset_names) {
        values.push_back({k, std::string()});
      } else if (k == keys::supported_keys) {
        values.push_back({k, std::string(keys::namespaces) + "," + keys::proc_table + "," +
                                 keys::local_proc_table + "," + keys::job_size + "," +
                                 keys::num_psets + "," + keys::pset_names + "," +
                                 keys::spawn_support + "," + keys::debug_support});
      } else if (!ours &&
                 (k == keys::proc_table || k == keys::local_proc_table || k == keys::job_size)) {
        ++unknown_nspace;
      } else if (k == keys::job_size) {
        values.push_back({k, static_cast<std::uint32_t>(job_.rank_node.size())});
      } else if (k == keys::local_proc_table) {
        std::vector<pmix::proc_entry> entries;
        for (const std::uint32_t rank : local_ranks_) {
          const auto it = local_state_.find(rank);
          entries.push_back(it == local_state_.end()
                                ? entry_of(rank, 0, std::nullopt)
                                : entry_of(rank, it->second.pid, it->second.status));
        }
        values.push_back({k, std::move(entries)});
      } else if (k == keys::proc_table && table != nullptr) {
        std::vector<pmix::proc_entry> entries;
        for (const auto& t : table->ranks) {
          if (t.rank >= job_.rank_node.size()) continue;
          std::optional<pm::exit_status> status;
          if (t.signo != 0) status = pm::exit_status::signaled(t.signo);
          if (t.code >= 0) status = pm::exit_status::exited(t.code);
          pmix::proc_entry e = entry_of(t.rank, t.pid, status);
          // What only the launcher knows: the job's own stop, a failed start, a lost host.
          if (t.state == "killed") e.state = pmix::proc_state::killed_by_cmd;
          if (t.state == "spawn_failed") e.state = pmix::proc_state::failed_to_start;
          if (t.state == "lost") e.state = pmix::proc_state::comm_lost;
          entries.push_back(std::move(e));
        }
        values.push_back({k, std::move(entries)});
      }
    }
  }
  if (values.empty()) {
    r.done(unknown_nspace > 0 ? pmix::status::not_found : pmix::status::not_supported);
  } else {
    // Some keys unanswered: success all the same, the answered keys present and the others
    // absent. PMIx 4.2.2's client drops every value of a PMIX_QUERY_PARTIAL_SUCCESS answer.
    r.done(pmix::status::success, std::move(values));
  }
}

void pmix_gateway::fence_done(const pm::link::fence_result& result) {
  auto it = fences_.find({result.members, result.seq});
  if (it == fences_.end()) return;
  auto done = std::move(it->second);
  fences_.erase(it);
  if (result.ok) {
    done(pmix::status::success, std::vector<char>(result.data.begin(), result.data.end()));
  } else {
    done(pmix::status::error);
  }
}

void pmix_gateway::serve_modex(const pm::link::modex_request& request) {
  const auto answer = [this, id = request.id](bool found, std::string data) {
    if (hooks_.modex_answer) hooks_.modex_answer(pm::link::modex_reply{id, found, std::move(data)});
  };
  const auto p = proc_of(request.rank);
  std::uint32_t first = 0;
  const auto* facts = p ? facts_of(p->nspace, first) : nullptr;
  const bool here = facts != nullptr && facts->rank_node.at(p->rank) == facts->node;
  if (!here || !ensure_server()) {
    answer(false, {});
    return;
  }
  server_->local_modex(*p, [answer](pmix::status st, std::vector<char> bytes) {
    answer(st == pmix::status::success, std::string(bytes.begin(), bytes.end()));
  });
}

void pmix_gateway::modex_done(const pm::link::modex_reply& reply) {
  auto it = modex_.find(reply.id);
  if (it == modex_.end()) return;
  auto done = std::move(it->second);
  modex_.erase(it);
  if (reply.found) {
    done(pmix::status::success, std::vector<char>(reply.data.begin(), reply.data.end()));
  } else {
    done(pmix::status::not_found);
  }
}

void pmix_gateway::release_abort(std::uint32_t rank) {
  auto it = aborts_.find(rank);
  if (it == aborts_.end()) return;
  auto release = std::move(it->second);
  aborts_.erase(it);
  release(pmix::status::success);
}

void pmix_gateway::release_aborts() {
  while (!aborts_.empty()) release_abort(aborts_.begin()->first);
}

}  // namespace pmd
