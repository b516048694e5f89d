#include "link/messages.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "link/frame.hpp"
#include "pm/error.hpp"

namespace pm::link {

namespace {

using json = nlohmann::json;

// Deeper than any message needs (map > ranks > rank > argv is 4); refusing deeper input keeps
// nlohmann's recursive reader from exhausting the stack on a hostile body.
constexpr int max_depth = 8;

[[noreturn]] void fail(const std::string& what) {
  throw error(errc::launch, "agent link: " + what);
}

// A DOM builder that stops at max_depth and keeps the reader's error instead of throwing.
class bounded_dom : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  using base = nlohmann::detail::json_sax_dom_parser<json>;
  explicit bounded_dom(json& result) : base(result, false) {}
  bool start_object(std::size_t n) { return enter() && base::start_object(n); }
  bool end_object() {
    --depth_;
    return base::end_object();
  }
  bool start_array(std::size_t n) { return enter() && base::start_array(n); }
  bool end_array() {
    --depth_;
    return base::end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& /*token*/, const Exception& e) {
    if (problem.empty()) {
      std::string what = e.what();
      // "[json.exception.parse_error.110] parse error at byte 3: syntax error ..." -> after "] "
      if (const auto cut = what.find("] "); cut != std::string::npos) what = what.substr(cut + 2);
      problem = "malformed message body (" + what + ")";
    }
    (void)position;
    return false;
  }
  std::string problem;

 private:
  bool enter() {
    if (++depth_ > max_depth) {
      problem = "message body nested deeper than " + std::to_string(max_depth) + " levels";
      return false;
    }
    return true;
  }
  int depth_ = 0;
};

json parse_body(std::span<const std::uint8_t> body) {
  json root;
  bounded_dom dom(root);
  bool ok = false;
  try {
    ok = json::sax_parse(body.begin(), body.end(), &dom, json::input_format_t::msgpack, true);
  } catch (const json::exception& e) {
    fail(std::string("malformed message body (") + e.what() + ")");
  }
  if (!ok || dom.is_errored()) {
    fail(dom.problem.empty() ? std::string("malformed message body") : dom.problem);
  }
  return root;
}

// ---- field access with one-line errors ----

struct reader {
  const json& obj;
  std::string_view type;

  const json& field(const char* key) const {
    const auto it = obj.find(key);
    if (it == obj.end()) {
      fail("'" + std::string(type) + "' message lacks field '" + key + "'");
    }
    return *it;
  }
  [[noreturn]] void wrong(const char* key, const char* want) const {
    fail("field '" + std::string(key) + "' of a '" + std::string(type) + "' message must be " +
         want);
  }
  std::uint64_t unsigned_field(const json& v, const char* key, std::uint64_t max,
                               const char* want) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
      wrong(key, want);
    }
    const auto n = v.get<std::uint64_t>();
    if (n > max) wrong(key, want);
    return n;
  }
  std::uint32_t u32(const json& v, const char* key) const {
    return static_cast<std::uint32_t>(unsigned_field(
        v, key, std::numeric_limits<std::uint32_t>::max(), "an unsigned 32-bit integer"));
  }
  std::uint32_t u32(const char* key) const { return u32(field(key), key); }
  std::int64_t i64(const char* key) const {
    const json& v = field(key);
    if (!v.is_number_integer()) wrong(key, "an integer");
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()}) {
      wrong(key, "a 64-bit integer");
    }
    return v.get<std::int64_t>();
  }
  int small_int(const char* key, int lo, int hi) const {
    const json& v = field(key);
    const std::string want = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (!v.is_number_integer()) wrong(key, want.c_str());
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
      wrong(key, want.c_str());
    }
    const auto n = v.get<std::int64_t>();
    if (n < lo || n > hi) wrong(key, want.c_str());
    return static_cast<int>(n);
  }
  std::string str(const json& v, const char* key) const {
    if (!v.is_string()) wrong(key, "a string");
    return v.get<std::string>();
  }
  std::string str(const char* key) const { return str(field(key), key); }
  bool boolean(const char* key) const {
    const json& v = field(key);
    if (!v.is_boolean()) wrong(key, "a boolean");
    return v.get<bool>();
  }
  const json& array(const char* key) const {
    const json& v = field(key);
    if (!v.is_array()) wrong(key, "an array");
    return v;
  }
  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    const json& a = array(key);
    out.reserve(a.size());
    for (const auto& s : a) {
      if (!s.is_string()) wrong(key, "an array of strings");
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  bool has(const char* key) const { return obj.contains(key); }
};

constexpr int max_signal = 64;

rank_spec decode_rank(const json& v) {
  if (!v.is_object()) fail("field 'ranks' of a 'spawn' message must be an array of maps");
  const reader r{v, "spawn"};
  rank_spec spec;
  spec.rank = r.u32("rank");
  spec.app = r.u32("app");
  spec.env = r.strings("env");
  spec.stdin_from_launcher = r.boolean("stdin");
  return spec;
}

app_spec decode_app(const json& v) {
  if (!v.is_object()) fail("field 'apps' of a 'job' message must be an array of maps");
  const reader r{v, "job"};
  app_spec a;
  a.argv = r.strings("argv");
  a.wdir = r.str("wdir");
  a.env = r.strings("env");
  if (a.argv.empty()) fail("an app of a 'job' message has an empty argv");
  if (a.argv.front().empty()) fail("an app of a 'job' message has an empty program name");
  return a;
}

void check_fds(std::string_view type, std::uint32_t fds, std::uint32_t max) {
  if (fds > max) {
    fail("'" + std::string(type) + "' message announces " + std::to_string(fds) +
         " descriptors, more than the " + std::to_string(max) + " it may carry");
  }
}

struct encoder {
  json& j;
  void operator()(const hello& m) const {
    j["version"] = m.version;
    j["nonce"] = m.nonce;
    j["pid"] = m.pid;
    j["hostname"] = m.hostname;
    j["addrs"] = m.addrs;
    j["port"] = m.port;
  }
  void operator()(const heartbeat&) const {}
  void operator()(const ack& m) const { j["bytes"] = m.bytes; }
  void operator()(const job_setup& m) const {
    j["host"] = m.host;
    j["grace_ms"] = m.grace_ms;
    j["heartbeat_ms"] = m.heartbeat_ms;
    j["silence_ms"] = m.silence_ms;
    j["forward_output"] = m.forward_output;
    j["streams"] = m.streams;
    j["cwd"] = m.cwd;
    j["base"] = m.base;
    j["overrides"] = m.overrides;
    json apps = json::array();
    for (const auto& a : m.apps) {
      apps.push_back({{"argv", a.argv}, {"wdir", a.wdir}, {"env", a.env}});
    }
    j["apps"] = std::move(apps);
  }
  void operator()(const spawn_request& m) const {
    json ranks = json::array();
    for (const auto& s : m.ranks) {
      ranks.push_back(
          {{"rank", s.rank}, {"app", s.app}, {"env", s.env}, {"stdin", s.stdin_from_launcher}});
    }
    j["ranks"] = std::move(ranks);
  }
  void operator()(const signal_request& m) const {
    j["ranks"] = m.ranks;
    j["signo"] = m.signo;
  }
  void operator()(const input_closed& m) const { j["rank"] = m.rank; }
  void operator()(const suspend&) const {}
  void operator()(const resume&) const {}
  void operator()(const shutdown_request&) const {}
  void operator()(const started& m) const {
    j["rank"] = m.rank;
    j["pid"] = m.pid;
  }
  void operator()(const spawn_failed& m) const {
    j["rank"] = m.rank;
    j["code"] = m.code;
    j["reason"] = m.reason;
  }
  void operator()(const exited& m) const {
    j["rank"] = m.rank;
    if (m.status.is_signal()) {
      j["signal"] = m.status.signal();
    } else {
      j["code"] = m.status.code();
    }
  }
  void operator()(const stream_closed& m) const {
    j["rank"] = m.rank;
    j["stream"] = m.stream == output_stream::out ? 1 : 2;
    j["bytes"] = m.bytes;
  }
  void operator()(const shutdown_done&) const {}
  void operator()(const agent_error& m) const { j["text"] = m.text; }
};

std::uint32_t max_fds(const message& m) {
  if (std::holds_alternative<spawn_request>(m)) return 1;
  if (std::holds_alternative<started>(m)) return 2;
  return 0;
}

constexpr std::string_view names[] = {"hello",  "heartbeat",     "ack",           "job",
                                      "spawn",  "signal",        "input_closed",  "suspend",
                                      "resume", "shutdown",      "started",       "spawn_failed",
                                      "exited", "stream_closed", "shutdown_done", "error"};
static_assert(std::size(names) == std::variant_size_v<message>);

}  // namespace

std::string_view type_name(const message& m) noexcept {
  return names[m.index()];
}

sender sent_by(const message& m) noexcept {
  return std::visit(
      [](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, hello> || std::is_same_v<T, heartbeat> ||
                      std::is_same_v<T, ack>) {
          return sender::either;
        } else if constexpr (std::is_same_v<T, started> || std::is_same_v<T, spawn_failed> ||
                             std::is_same_v<T, exited> || std::is_same_v<T, stream_closed> ||
                             std::is_same_v<T, shutdown_done> || std::is_same_v<T, agent_error>) {
          return sender::agent;
        } else {
          return sender::launcher;
        }
      },
      m);
}

std::vector<std::uint8_t> encode(const message& m, std::uint32_t fds) {
  check_fds(type_name(m), fds, max_fds(m));
  json j = json::object();
  j["type"] = type_name(m);
  if (fds > 0) j["fds"] = fds;
  std::visit(encoder{j}, m);
  return json::to_msgpack(j);
}

void append_message(std::vector<std::uint8_t>& out, const message& m, std::uint32_t fds) {
  append_control_frame(out, encode(m, fds));
}

envelope decode(std::span<const std::uint8_t> body) {
  const json j = parse_body(body);
  if (!j.is_object()) fail("message body is not a map");
  const auto t = j.find("type");
  if (t == j.end()) fail("message lacks field 'type'");
  if (!t->is_string()) fail("field 'type' of a message must be a string");
  const std::string type = t->get<std::string>();
  const reader r{j, type};
  envelope e;
  if (r.has("fds")) e.fds = r.u32("fds");

  if (type == "hello") {
    hello m;
    m.version = r.u32("version");
    if (m.version != protocol_version) {
      // Only the version is read from a hello of another version: its other fields may differ.
      e.msg = m;
      return e;
    }
    m.nonce = static_cast<std::uint64_t>(r.unsigned_field(r.field("nonce"), "nonce",
                                                          std::numeric_limits<std::uint64_t>::max(),
                                                          "an unsigned 64-bit integer"));
    m.pid = r.i64("pid");
    m.hostname = r.str("hostname");
    m.addrs = r.strings("addrs");
    m.port = static_cast<std::uint16_t>(r.small_int("port", 0, 65535));
    e.msg = std::move(m);
  } else if (type == "heartbeat") {
    e.msg = heartbeat{};
  } else if (type == "ack") {
    e.msg =
        ack{r.unsigned_field(r.field("bytes"), "bytes", std::numeric_limits<std::uint64_t>::max(),
                             "an unsigned 64-bit integer")};
  } else if (type == "job") {
    job_setup m;
    m.host = r.u32("host");
    m.grace_ms = r.u32("grace_ms");
    m.heartbeat_ms = r.u32("heartbeat_ms");
    m.silence_ms = r.u32("silence_ms");
    m.forward_output = r.boolean("forward_output");
    m.streams = static_cast<std::uint8_t>(r.small_int("streams", 0, 2));
    m.cwd = r.str("cwd");
    m.base = r.strings("base");
    m.overrides = r.strings("overrides");
    for (const auto& v : r.array("apps")) m.apps.push_back(decode_app(v));
    if (m.apps.empty()) fail("'job' message has no app");
    e.msg = std::move(m);
  } else if (type == "spawn") {
    spawn_request m;
    const json& ranks = r.array("ranks");
    m.ranks.reserve(ranks.size());
    for (const auto& v : ranks) m.ranks.push_back(decode_rank(v));
    e.msg = std::move(m);
  } else if (type == "signal") {
    signal_request m;
    for (const auto& v : r.array("ranks")) m.ranks.push_back(r.u32(v, "ranks"));
    m.signo = r.small_int("signo", 0, max_signal);
    e.msg = std::move(m);
  } else if (type == "input_closed") {
    e.msg = input_closed{r.u32("rank")};
  } else if (type == "suspend") {
    e.msg = suspend{};
  } else if (type == "resume") {
    e.msg = resume{};
  } else if (type == "shutdown") {
    e.msg = shutdown_request{};
  } else if (type == "started") {
    e.msg = started{r.u32("rank"), r.i64("pid")};
  } else if (type == "spawn_failed") {
    e.msg = spawn_failed{r.u32("rank"), r.small_int("code", 0, 255), r.str("reason")};
  } else if (type == "exited") {
    exited m;
    m.rank = r.u32("rank");
    const bool has_code = r.has("code"), has_signal = r.has("signal");
    if (has_code == has_signal) fail("'exited' message needs exactly one of 'code' and 'signal'");
    m.status = has_code ? exit_status::exited(r.small_int("code", 0, 255))
                        : exit_status::signaled(r.small_int("signal", 1, max_signal));
    e.msg = m;
  } else if (type == "stream_closed") {
    stream_closed m;
    m.rank = r.u32("rank");
    m.stream = r.small_int("stream", 1, 2) == 1 ? output_stream::out : output_stream::err;
    m.bytes = r.unsigned_field(r.field("bytes"), "bytes", std::numeric_limits<std::uint64_t>::max(),
                               "an unsigned 64-bit integer");
    e.msg = m;
  } else if (type == "shutdown_done") {
    e.msg = shutdown_done{};
  } else if (type == "error") {
    e.msg = agent_error{r.str("text")};
  } else {
    std::string shown = type.substr(0, 40);
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    fail("unknown message type '" + shown + "'");
  }
  check_fds(type, e.fds, max_fds(e.msg));
  return e;
}

}  // namespace pm::link
