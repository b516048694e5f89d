// A submitter's side of a DVM (pm/dvm.hpp): a blocking request/answer exchange over the DVM's
// Unix socket until the job's slots are claimed; then the connection becomes the job's transport.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dvm/dvm_transport.hpp"
#include "dvm/json_lines.hpp"
#include "link/socket.hpp"
#include "pm/dvm.hpp"
#include "pm/error.hpp"
#include "text/printable.hpp"

namespace pm {

namespace {

using nlohmann::json;
using namespace pm::dvm_parts;

// A DVM's server answers a request at once; one that does not within this is not a DVM.
constexpr int answer_ms = 10000;

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.pop_back();
  }
  return text;
}

// A URI file is one short line (--report-uri wrote it): opened without blocking (a FIFO would
// wait for a writer for ever), a regular file only, at most 64 KiB.
std::string read_uri_file(const std::string& uri, const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return error(errc::launch,
                 "--dvm-uri " + text::untrusted(uri) + ": " + why + " (is a DVM running?)");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw refuse(std::string("cannot read it: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 65536) {
    ::close(fd);
    throw refuse(S_ISREG(st.st_mode) ? "it is larger than a DVM's URI file (64 KiB)"
                                     : "it is not a regular file");
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  const auto n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) throw refuse(std::string("cannot read it: ") + std::strerror(errno));
  text.resize(static_cast<std::size_t>(n));
  return text;
}

std::string socket_of(const std::string& uri) {
  if (uri.starts_with("unix:")) return uri.substr(5);
  if (uri.starts_with("file:")) {
    const auto text = trimmed(read_uri_file(uri, uri.substr(5)));
    if (!text.starts_with("unix:") || text.find('\n') != std::string::npos) {
      throw error(errc::launch, "--dvm-uri " + uri + ": the file does not hold a DVM's URI");
    }
    return text.substr(5);
  }
  throw error(errc::usage,
              "--dvm-uri '" + text::untrusted(uri) + "': a DVM's URI is file:PATH or unix:PATH");
}

// The command a job is shown with (pmrun --ps): only shown, so cut to fit well within a line of
// the channel (1 MiB), where a long argv made the server end the connection without a word.
std::vector<std::string> shown_command(const std::vector<std::string>& command) {
  constexpr std::size_t budget = 4096;
  std::vector<std::string> out;
  std::size_t used = 0;
  for (const auto& w : command) {
    if (used + w.size() > budget) {
      out.push_back(w.substr(0, budget > used ? budget - used : 0) + "...");
      break;
    }
    used += w.size() + 1;
    out.push_back(w);
  }
  return out;
}

// The server's allocation ("whole" or "free" of its hosts answer): every host reached alike.
// Checked as the server checks a submitter's lines: a wrong type is one line, not a throw of
// nlohmann's.
allocation allocation_of(const json& doc, const char* key, const std::string& uri) {
  const auto bad = [&] {
    return error(errc::launch,
                 "the DVM at " + uri + " sent a host list that is not one (\"" + key + "\")");
  };
  allocation out;
  out.source = allocation_source::api;
  const auto hosts = doc.find(key);
  if (hosts == doc.end()) return out;
  if (!hosts->is_array()) throw bad();
  for (const auto& h : *hosts) {
    if (!h.is_object()) throw bad();
    const auto name = string_at(h, "name");
    const auto slots = number_at(h, "slots");
    const auto max_slots =
        h.contains("max_slots") ? number_at(h, "max_slots") : std::optional<std::uint64_t>(0);
    if (!name || !slots || !max_slots || *slots > 0xffffffffu || *max_slots > 0xffffffffu) {
      throw bad();
    }
    host one;
    one.name = *name;
    one.slots = static_cast<std::uint32_t>(*slots);
    one.max_slots = static_cast<std::uint32_t>(*max_slots);
    one.local = false;
    out.hosts.push_back(std::move(one));
  }
  return out;
}

}  // namespace

struct dvm_client::impl {
  std::string uri;
  link::owned_fd fd;
  line_buffer lines;
  std::vector<std::string> pending;

  void send(const json& doc) {
    const auto line = to_line(doc);
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::send(fd.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw error(errc::launch, "the DVM at " + uri + " closed the connection");
      done += static_cast<std::size_t>(n);
    }
  }

  // The next object from the server; `timeout_ms` < 0 waits as long as it takes.
  json next(int timeout_ms = answer_ms) {
    for (;;) {
      if (!pending.empty()) {
        const auto line = std::move(pending.front());
        pending.erase(pending.begin());
        std::string problem;
        auto doc = parse_object(line, problem);
        if (!doc) throw error(errc::launch, "the DVM at " + uri + " sent " + problem);
        return *doc;
      }
      pollfd p{fd.get(), POLLIN, 0};
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) throw error(errc::launch, "the DVM at " + uri + " did not answer");
      char buf[16384];
      const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw error(errc::launch, "the DVM at " + uri + " closed the connection");
      if (!lines.append(std::string_view(buf, static_cast<std::size_t>(n)), pending)) {
        throw error(errc::launch, "the DVM at " + uri + " sent a line too long");
      }
    }
  }

  // An answer (not an event, which a waiting submitter may see first).
  json ask(const json& request) {
    send(request);
    for (;;) {
      auto doc = next();
      if (doc.contains("ev")) continue;
      if (bool_at(doc, "ok") != true) {
        throw error(errc::launch,
                    "the DVM refused: " + string_at(doc, "error").value_or("no reason given"));
      }
      return doc;
    }
  }
};

dvm_client::dvm_client(const std::string& uri) : impl_(std::make_unique<impl>()) {
  impl_->uri = uri;
  const auto path = socket_of(uri);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    throw error(errc::launch, "--dvm-uri " + uri + ": not a socket path");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  impl_->fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!impl_->fd ||
      ::connect(impl_->fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw error(errc::launch, "no DVM answers at " + uri + ": " + std::strerror(errno));
  }
  // Only this user's DVM: another user's socket could claim anything.
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(impl_->fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      cred.uid != ::geteuid()) {
    throw error(errc::launch, "the DVM at " + uri + " is not this user's (uid " +
                                  std::to_string(cred.uid) + "); not used");
  }
}

dvm_client::~dvm_client() = default;

allocation dvm_client::hosts() {
  return allocation_of(impl_->ask({{"op", "hosts"}}), "whole", impl_->uri);
}

rank_map dvm_client::claim(const job_spec& spec, bool wait, const std::vector<std::string>& command,
                           const std::function<void(std::string_view)>& waiting) {
  bool said = false;
  for (;;) {
    // The server's ledger decides what is free (dvm/slot_ledger.hpp).
    const auto doc = impl_->ask({{"op", "hosts"}});
    const auto whole = allocation_of(doc, "whole", impl_->uri);
    const auto free = allocation_of(doc, "free", impl_->uri);
    std::uint32_t free_slots = 0;
    for (const auto& h : free.hosts) free_slots += h.slots;
    if (whole.hosts.empty())
      throw error(errc::launch, "the DVM at " + impl_->uri + " has no host left");
    // A job that does not fit the whole DVM never will: map_job's own words.
    auto fits_whole = map_job(spec, whole);
    std::optional<rank_map> map;
    if (!free.hosts.empty()) {
      try {
        map = map_job(spec, free);
      } catch (const pm::error&) {
      }
    }
    if (map) {
      json slots = json::object();
      for (std::uint32_t r = 0; r < map->size(); ++r) {
        const auto& name = map->allocation().hosts.at(map->at(r).host).name;
        slots[name] = slots.value(name, 0u) + 1;
      }
      // An oversubscribing job claims what is free there and shares the rest.
      for (const auto& h : free.hosts) {
        if (slots.contains(h.name) && slots[h.name].get<std::uint32_t>() > h.slots) {
          slots[h.name] = h.slots;
        }
      }
      impl_->send({{"op", "claim"},
                   {"slots", slots},
                   {"command", shown_command(command)},
                   {"pid", static_cast<std::int64_t>(::getpid())}});
      json answer;
      do {
        answer = impl_->next();
      } while (answer.contains("ev"));
      if (bool_at(answer, "ok") == true) return std::move(*map);
      if (bool_at(answer, "busy") != true) {
        throw error(errc::launch,
                    "the DVM refused the job: " + string_at(answer, "error").value_or(""));
      }
      continue;  // another job took the slots meanwhile: look again
    }
    const auto needed = fits_whole.size();
    // Earlier jobs wait (the server serves them first come, first served): shown nothing free.
    const auto queued = number_at(doc, "queued").value_or(0);
    const auto before = queued > 0 ? std::to_string(queued) + " earlier job" +
                                         (queued == 1 ? " waits" : "s wait") + " for slots first"
                                   : std::string();
    if (!wait) {
      throw error(
          errc::mapping,
          queued > 0
              ? "the job needs " + std::to_string(needed) + " slots of the DVM and " + before
              : "the DVM has " + std::to_string(free_slots) + " free slots now and the job needs " +
                    std::to_string(needed) + " (jobs on it hold the others)");
    }
    if (!said && waiting) {
      waiting("waiting for " + std::to_string(needed) + " slots of the DVM (" +
              (queued > 0 ? before : std::to_string(free_slots) + " free now") + ")");
      said = true;
    }
    impl_->send({{"op", "wait"}});
    for (;;) {
      const auto ev = impl_->next(-1);
      if (string_at(ev, "ev").value_or("") == "freed") break;
    }
  }
}

std::string dvm_client::status_json() {
  auto doc = impl_->ask({{"op", "ps"}});
  doc.erase("ok");
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

void dvm_client::stop() {
  impl_->ask({{"op", "stop"}});
}

std::shared_ptr<transport> dvm_client::make_transport(boost::asio::io_context& io,
                                                      const remote_launch& remote) {
  // Only events can be left ("freed" for a submitter that waited): the transport's own come later.
  impl_->pending.clear();
  return make_dvm_transport(io, impl_->fd.release(), remote);
}

}  // namespace pm
