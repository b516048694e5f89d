#include "dvm/dvm_transport.hpp"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>

#include "dvm/line_channel.hpp"
#include "transport/srun/callback_listener.hpp"

namespace pm::dvm_parts {

namespace {

namespace asio = boost::asio;
using nlohmann::json;

// After the job closed a host's stream its agent ends by itself; this long, and close() answers
// anyway (the daemon ends it when the job's connection goes).
constexpr std::chrono::seconds agent_end_bound{5};

class dvm_transport final : public transport, public std::enable_shared_from_this<dvm_transport> {
 public:
  dvm_transport(asio::io_context& io, int connection, const remote_launch& remote)
      : io_(io),
        notice_(remote.notice),
        channel_(std::make_shared<line_channel>(io, connection)),
        listener_(io, srun::listener_options{
                          remote.iface, [this](const std::string& line) { say(line); },
                          [this](std::uint32_t host, int fd) { accepted(host, fd); }}) {}

  ~dvm_transport() override { channel_->close(); }

  void begin() {
    channel_->start(
        [weak = weak_from_this()](const json& doc) {
          if (auto self = weak.lock()) self->from_server(doc);
        },
        [weak = weak_from_this()](const std::string& problem) {
          if (auto self = weak.lock()) self->server_gone(problem);
        });
  }

  void open(const agent_target& target, std::function<void(agent_stream)> opened,
            std::function<void(std::string reason)> failed) override {
    auto& h = hosts_[target.host];
    h = host_entry{};
    h.name = target.info.name;
    h.opened = std::move(opened);
    h.failed = std::move(failed);
    if (args_.empty()) {
      // The agent dials back instead of talking over its stdio; its path is the daemon's own.
      args_.assign(target.agent_argv.begin() + 1, target.agent_argv.end());
      for (auto& word : args_) {
        if (word == "--stdio") word = "--connect";
      }
    }
    if (server_problem_) {
      h.closed = true;
      asio::post(io_, [f = h.failed, why = *server_problem_] { f(why); });
      return;
    }
    to_start_.push_back(target.host);
    if (!posted_) {
      posted_ = true;
      asio::post(io_, [weak = weak_from_this()] {
        if (auto self = weak.lock()) self->start_agents();
      });
    }
  }

  void close(std::uint32_t host, std::function<void(agent_end)> done) override {
    auto it = hosts_.find(host);
    if (it == hosts_.end()) {
      asio::post(io_, [done = std::move(done)] { done({}); });
      return;
    }
    auto& h = it->second;
    h.closed = true;
    listener_.forget(host);
    if (h.ended || !h.requested || server_problem_) {
      asio::post(io_, [done = std::move(done), e = h.end] { done(e); });
      return;
    }
    h.waiting.push_back(std::move(done));
    h.timer = std::make_shared<asio::steady_timer>(io_, agent_end_bound);
    h.timer->async_wait([weak = weak_from_this(), host](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->agent_ended(host, {});
    });
  }

  // An MPI_Comm_spawn's slots come from the DVM's ledger too: other jobs share the hosts.
  bool claims_slots() const override { return true; }
  void claim_slots(std::vector<std::pair<std::string, std::uint32_t>> slots, bool share,
                   std::function<void(std::string refusal)> done) override {
    if (server_problem_) {
      asio::post(io_, [done = std::move(done), why = *server_problem_] { done(why); });
      return;
    }
    const auto id = next_claim_++;
    json counts = json::object();
    for (const auto& [name, n] : slots) counts[name] = n;
    claims_.emplace(id, std::move(done));
    channel_->send({{"op", "claim_more"}, {"id", id}, {"slots", counts}, {"share", share}});
  }

 private:
  struct host_entry {
    std::string name;
    std::function<void(agent_stream)> opened;
    std::function<void(std::string)> failed;
    bool requested = false, connected = false, closed = false, ended = false;
    agent_end end;
    std::vector<std::function<void(agent_end)>> waiting;
    std::shared_ptr<asio::steady_timer> timer;
  };

  void say(const std::string& line) const {
    if (notice_) notice_("dvm: " + line);
  }

  void start_agents() {
    posted_ = false;
    auto list = std::move(to_start_);
    to_start_.clear();
    if (list.empty()) return;
    try {
      listener_.listen(hosts_[list.front()].name);
    } catch (const std::exception& e) {
      for (const auto h : list) fail(h, e.what());
      return;
    }
    std::string addrs;
    for (const auto& a : listener_.addresses()) addrs += (addrs.empty() ? "" : ",") + a;
    json names = json::array();
    for (const auto h : list) {
      auto& entry = hosts_[h];
      entry.requested = true;
      listener_.expect(h, entry.name);
      names.push_back(entry.name);
    }
    channel_->send({{"op", "start"},
                    {"hosts", std::move(names)},
                    {"addrs", addrs},
                    {"port", listener_.port()},
                    {"token", listener_.token()},
                    {"args", args_}});
  }

  void accepted(std::uint32_t host, int fd) {
    auto it = hosts_.find(host);
    if (it == hosts_.end() || it->second.closed || it->second.connected) {
      ::close(fd);
      return;
    }
    it->second.connected = true;
    agent_stream s;
    s.read_fd = fd;
    s.write_fd = fd;
    s.socket = false;  // TCP: no descriptors travel
    asio::post(io_, [opened = it->second.opened, s] { opened(s); });
  }

  std::optional<std::uint32_t> host_named(const std::string& name) const {
    for (const auto& [index, h] : hosts_) {
      if (h.name == name) return index;
    }
    return std::nullopt;
  }

  void from_server(const json& doc) {
    const auto ev = string_at(doc, "ev");
    if (!ev) {
      // A request the server refused: nothing this transport sends is refused unless the
      // server and this library disagree; every host waiting fails with its word.
      if (bool_at(doc, "ok") == false) {
        const auto why = "the DVM refused the start: " + string_at(doc, "error").value_or("");
        for (auto& [index, h] : hosts_) {
          if (h.requested && !h.connected && !h.closed) fail(index, why);
        }
      }
      return;
    }
    if (*ev == "claimed" || *ev == "claim_refused") {
      const auto id = doc.find("id");
      if (id == doc.end() || !id->is_number_unsigned()) return;
      auto it = claims_.find(id->get<std::uint64_t>());
      if (it == claims_.end()) return;
      auto done = std::move(it->second);
      claims_.erase(it);
      const auto why =
          *ev == "claimed" ? std::string() : string_at(doc, "why").value_or("no reason given");
      asio::post(io_, [done = std::move(done), why] { done(why); });
      return;
    }
    const auto name = string_at(doc, "host");
    const auto host = name ? host_named(*name) : std::nullopt;
    if (!host) return;
    if (*ev == "failed") {
      fail(*host, "the DVM could not start the agent on " + *name + ": " +
                      string_at(doc, "why").value_or("no reason given"));
    } else if (*ev == "ended") {
      agent_end e;
      e.how = string_at(doc, "how").value_or("");
      agent_ended(*host, e);
    }
  }

  void fail(std::uint32_t host, const std::string& why) {
    auto& h = hosts_[host];
    if (h.connected || h.closed) {
      agent_ended(host, agent_end{why, false});
      return;
    }
    h.closed = true;
    h.ended = true;
    listener_.forget(host);
    asio::post(io_, [f = h.failed, why] { f(why); });
  }

  void agent_ended(std::uint32_t host, const agent_end& e) {
    auto& h = hosts_[host];
    if (h.ended) return;
    h.ended = true;
    h.end = e;
    if (h.timer) h.timer->cancel();
    if (!h.connected && !h.closed) {
      h.closed = true;
      listener_.forget(host);
      const auto why =
          e.how.empty() ? "the agent on " + h.name + " ended before it called back" : e.how;
      asio::post(io_, [f = h.failed, why] { f(why); });
    }
    for (auto& d : h.waiting) asio::post(io_, [d = std::move(d), e] { d(e); });
    h.waiting.clear();
  }

  // The DVM's server went away (stopped, SIGKILLed): agents not called yet never will.
  void server_gone(const std::string& problem) {
    server_problem_ = "the DVM's server is gone" + (problem.empty() ? "" : " (" + problem + ")");
    // Its daemons end every job's agents now: the ranks' ends that follow are that, not the job.
    say(*server_problem_ + "; its daemons end this job's agents");
    for (auto& [index, h] : hosts_) {
      if (!h.ended) agent_ended(index, agent_end{h.connected ? "" : *server_problem_, false});
    }
    for (auto& [id, done] : claims_) {
      asio::post(io_, [done = std::move(done), why = *server_problem_] { done(why); });
    }
    claims_.clear();
  }

  asio::io_context& io_;
  std::function<void(std::string_view)> notice_;
  std::shared_ptr<line_channel> channel_;
  srun::callback_listener listener_;
  std::map<std::uint32_t, host_entry> hosts_;
  std::vector<std::uint32_t> to_start_;
  std::vector<std::string> args_;
  bool posted_ = false;
  std::optional<std::string> server_problem_;
  std::map<std::uint64_t, std::function<void(std::string)>> claims_;  // claim_more awaited
  std::uint64_t next_claim_ = 1;
};

}  // namespace

std::shared_ptr<transport> make_dvm_transport(asio::io_context& io, int connection,
                                              const remote_launch& remote) {
  auto t = std::make_shared<dvm_transport>(io, connection, remote);
  t->begin();
  return t;
}

}  // namespace pm::dvm_parts
