#include "job_status.hpp"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "text/printable.hpp"
#include "transport/ssh/ssh_command.hpp"

namespace pm::tools {

namespace {

namespace asio = boost::asio;
using local_socket = asio::local::stream_protocol;

constexpr std::string_view socket_prefix = "pmrun.", socket_suffix = ".sock";
// A status document is a report: about 150 bytes a rank. Far more than any job needs.
constexpr std::size_t max_document = 256u << 20;

std::optional<std::int64_t> pid_of_socket_name(std::string_view name) {
  if (!name.starts_with(socket_prefix) || !name.ends_with(socket_suffix)) return std::nullopt;
  name.remove_prefix(socket_prefix.size());
  name.remove_suffix(socket_suffix.size());
  std::int64_t pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc{} || end != name.data() + name.size() || pid <= 0) return std::nullopt;
  return pid;
}

enum class fetch_result { ok, gone, failed };

// One job's document, read with a blocking socket and a deadline (a stopped pmrun does not
// answer: ^Z). A socket nobody listens on is left over from a pmrun that was SIGKILLed: removed.
fetch_result fetch_document(const std::string& path, std::string& out) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return fetch_result::failed;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fetch_result::failed;
  // A stopped pmrun (^Z) accepts nothing: connect waits for the send timeout when its backlog is
  // full, each read for the receive timeout; and the whole document must come within 2 s.
  const timeval wait{0, 500000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == ECONNREFUSED) {
      ::unlink(path.c_str());
      return fetch_result::gone;
    }
    return err == ENOENT ? fetch_result::gone : fetch_result::failed;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    const bool in_time = std::chrono::steady_clock::now() < give_up;
    if (n > 0 && out.size() + static_cast<std::size_t>(n) <= max_document && in_time) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR && in_time) continue;
    ::close(fd);
    return n == 0 ? fetch_result::ok : fetch_result::failed;
  }
}

struct job_seen {
  std::int64_t pid = 0;
  nlohmann::json doc;
};

// Every job of the directory that answered, by pid.
std::vector<job_seen> read_jobs(const std::string& dir, std::optional<std::int64_t> only) {
  std::vector<job_seen> jobs;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return jobs;
  while (const dirent* e = ::readdir(d.get())) {
    const auto pid = pid_of_socket_name(e->d_name);
    if (!pid || (only && *pid != *only)) continue;
    std::string text;
    if (fetch_document(dir + "/" + e->d_name, text) != fetch_result::ok) continue;
    auto doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) continue;
    jobs.push_back({*pid, std::move(doc)});
  }
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return jobs;
}

template <class T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

}  // namespace

std::string command_line(const nlohmann::json& doc) {
  std::string out;
  for (const auto& word : doc.value("command", nlohmann::json::array())) {
    if (!word.is_string()) continue;
    if (!out.empty()) out += ' ';
    // As a shell would take it back, on one line.
    const auto& w = word.get_ref<const std::string&>();
    out += w.find('\0') == std::string::npos ? text::printable(ssh::shell_quote(w))
                                             : text::printable(w);
  }
  return out;
}

namespace {

// "running", "exited 7", "killed by SIGTERM", "lost", ...
std::string rank_state_text(const nlohmann::json& r) {
  const auto state = text::printable(get_or<std::string>(r, "state", "?"));
  const auto signal = text::printable(get_or<std::string>(r, "signal", ""));
  const auto code = get_or<int>(r, "exit_code", -1);
  if (!signal.empty()) return state + " (" + signal + ")";
  if (code >= 0) return state + " (" + std::to_string(code) + ")";
  return state;
}

void print_job_list(const std::vector<job_seen>& jobs) {
  std::printf("%-8s %6s %8s %6s %9s  %s\n", "PID", "RANKS", "RUNNING", "HOSTS", "ELAPSED",
              "COMMAND");
  for (const auto& j : jobs) {
    const auto ranks =
        j.doc.value("report", nlohmann::json::object()).value("ranks", nlohmann::json::array());
    const auto running = std::count_if(ranks.begin(), ranks.end(), [](const auto& r) {
      return get_or<std::string>(r, "state", "") == "running";
    });
    std::printf("%-8lld %6zu %8zd %6zu %8.1fs  %s\n", static_cast<long long>(j.pid), ranks.size(),
                static_cast<std::ptrdiff_t>(running),
                j.doc.value("hosts", nlohmann::json::array()).size(),
                get_or<double>(j.doc, "elapsed_s", 0.0), command_line(j.doc).c_str());
  }
}

void print_job_ranks(const job_seen& j) {
  std::printf("pmrun %lld: %s\n", static_cast<long long>(j.pid), command_line(j.doc).c_str());
  const auto report = j.doc.value("report", nlohmann::json::object());
  const auto ranks = report.value("ranks", nlohmann::json::array());
  const auto hosts = j.doc.value("hosts", nlohmann::json::array()).size();
  // Ranks of jobs the ranks spawned (MPI_Comm_spawn) carry their job's number: shown [J,R].
  const auto spawned =
      std::count_if(ranks.begin(), ranks.end(), [](const auto& r) { return r.contains("job"); });
  const std::string of_spawned =
      spawned == 0 ? std::string() : " (" + std::to_string(spawned) + " of spawned jobs)";
  std::printf("%zu rank%s%s on %zu host%s, %.1f s, %s\n", ranks.size(),
              ranks.size() == 1 ? "" : "s", of_spawned.c_str(), hosts, hosts == 1 ? "" : "s",
              get_or<double>(j.doc, "elapsed_s", 0.0),
              get_or<bool>(j.doc, "running", false) ? "running" : "ending");
  const auto summary = text::printable(get_or<std::string>(report, "summary", ""));
  if (!summary.empty()) std::printf("%s\n", summary.c_str());
  // Each host's agent (pmd), and where a PMIx tool on that host attaches (docs/pmix.md, "Tools").
  for (const auto& a : j.doc.value("agents", nlohmann::json::array())) {
    const auto pid = get_or<std::int64_t>(a, "pid", 0);
    std::string line = "agent on " + text::printable(get_or<std::string>(a, "host", "?")) +
                       ": pid " + (pid != 0 ? std::to_string(pid) : std::string("-"));
    const auto uri = text::printable(get_or<std::string>(a, "pmix_uri", ""));
    if (!uri.empty()) {
      line += ", PMIx " + uri + " (tmpdir " +
              text::printable(get_or<std::string>(a, "pmix_tmpdir", "")) + ")";
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("%6s  %-20s %9s  %s\n", "RANK", "HOST", "PID", "STATE");
  for (const auto& r : ranks) {
    const auto pid = get_or<std::int64_t>(r, "pid", 0);
    std::string rank = std::to_string(get_or<unsigned>(r, "rank", 0));
    if (r.contains("job")) {
      // Open MPI's numbering, as the output tags show it: the first job is 1.
      rank = "[" + std::to_string(get_or<unsigned>(r, "job", 0) + 1) + "," +
             std::to_string(get_or<unsigned>(r, "job_rank", 0)) + "]";
    }
    std::printf("%6s  %-20s %9s  %s\n", rank.c_str(),
                text::printable(get_or<std::string>(r, "host", "?")).c_str(),
                pid != 0 ? std::to_string(pid).c_str() : "-", rank_state_text(r).c_str());
  }
}

}  // namespace

// The directory exists (made here if its parent does), belongs to us and is closed to others:
// only then may a socket that tells pids and command lines live there.
bool is_private_directory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return false;
  return S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0;
}

bool private_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return false;
  return is_private_directory(dir);
}

std::string status_directory(const env_map& env) {
  if (auto it = env.find("PM_STATUS_DIR"); it != env.end() && !it->second.empty()) {
    return it->second;
  }
  if (auto it = env.find("XDG_RUNTIME_DIR"); it != env.end() && !it->second.empty()) {
    return it->second + "/pm";
  }
  return "/tmp/pm-" + std::to_string(::geteuid());
}

std::string status_socket_path(const std::string& dir, std::int64_t pid) {
  return dir + "/" + std::string(socket_prefix) + std::to_string(pid) + std::string(socket_suffix);
}

job_status_server::job_status_server(asio::io_context& io, std::string dir,
                                     std::function<std::string()> document,
                                     std::chrono::milliseconds delay)
    : io_(io), dir_(std::move(dir)), document_(std::move(document)), timer_(io) {
  timer_.expires_after(delay);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) listen();
  });
}

job_status_server::~job_status_server() {
  timer_.cancel();
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    ::unlink(path_.c_str());
  }
}

// Best effort: the status is a window on the job, never a reason for it to fail.
void job_status_server::listen() {
  if (!private_directory(dir_)) return;
  const auto path = status_socket_path(dir_, ::getpid());
  const auto staging = path + ".new";  // a name --ps does not read
  if (staging.size() >= sizeof(sockaddr_un::sun_path)) return;
  ::unlink(staging.c_str());
  boost::system::error_code ec;
  local_socket::acceptor acceptor(io_);
  acceptor.open(local_socket(), ec);
  if (!ec) acceptor.bind(local_socket::endpoint(staging), ec);
  if (ec) return;
  acceptor.listen(16, ec);
  // Replaces a socket of an earlier process that had our pid and was SIGKILLed.
  if (ec || ::rename(staging.c_str(), path.c_str()) != 0) {
    ::unlink(staging.c_str());
    return;
  }
  path_ = path;
  acceptor_.emplace(std::move(acceptor));
  accept();
}

void job_status_server::accept() {
  acceptor_->async_accept([this](const boost::system::error_code& ec, local_socket::socket peer) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      auto text = std::make_shared<std::string>();
      try {
        *text = document_();
      } catch (const std::exception&) {
        // A window on the job must never end it: this client gets nothing.
        boost::system::error_code ignored;
        peer.close(ignored);
        accept();
        return;
      }
      auto sock = std::make_shared<local_socket::socket>(std::move(peer));
      asio::async_write(*sock, asio::buffer(*text),
                        [text, sock](const boost::system::error_code&, std::size_t) {
                          boost::system::error_code ignored;
                          sock->close(ignored);
                        });
    }
    accept();
  });
}

int show_jobs(const std::vector<std::string>& args, const env_map& env) {
  std::optional<std::int64_t> pid;
  bool json = false;
  for (const auto& a : args) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), n);
    if (a == "--json") {
      json = true;
    } else if (!pid && !a.empty() && ec == std::errc{} && end == a.data() + a.size() && n > 0) {
      pid = n;
    } else {
      std::fprintf(stderr, "pmrun: --ps: unexpected '%s' (usage: pmrun --ps [PID] [--json])\n",
                   a.c_str());
      return 2;
    }
  }
  const auto dir = status_directory(env);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && !is_private_directory(dir)) {
    // Another user could have made it: their sockets could say anything.
    std::fprintf(stderr,
                 "pmrun: --ps: %s is not a directory of this user closed to others; not read\n",
                 text::printable(dir).c_str());
    return 1;
  }
  const auto jobs = read_jobs(dir, pid);
  if (pid && jobs.empty()) {
    std::fprintf(stderr, "pmrun: --ps: no running pmrun job with pid %lld (looked in %s)\n",
                 static_cast<long long>(*pid), dir.c_str());
    return 1;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& j : jobs) out.push_back(j.doc);
    std::printf("%s\n", (pid ? out.at(0) : out).dump(2).c_str());
  } else if (pid) {
    print_job_ranks(jobs.front());
  } else {
    print_job_list(jobs);
  }
  return 0;
}

}  // namespace pm::tools
