#include "link/messages.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

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

app_spec decode_app(const json& v, std::string_view type = "job") {
  const std::string t(type);
  if (!v.is_object()) fail("field 'apps' of a '" + t + "' message must be an array of maps");
  const reader r{v, type};
  app_spec a;
  a.argv = r.strings("argv");
  a.wdir = r.str("wdir");
  a.env = r.strings("env");
  if (a.argv.empty()) fail("an app of a '" + t + "' message has an empty argv");
  if (a.argv.front().empty()) fail("an app of a '" + t + "' message has an empty program name");
  return a;
}

std::uint64_t u64_field(const reader& r, const char* key) {
  return r.unsigned_field(r.field(key), key, std::numeric_limits<std::uint64_t>::max(),
                          "an unsigned 64-bit integer");
}

std::vector<published_entry> decode_entries(const reader& r) {
  std::vector<published_entry> out;
  for (const auto& v : r.array("values")) {
    if (!v.is_object()) r.wrong("values", "an array of maps");
    const reader x{v, r.type};
    out.push_back(published_entry{x.str("key"), x.u32("rank"), x.str("value")});
  }
  return out;
}

std::vector<std::uint32_t> decode_u32s(const reader& r, const json& v, const char* key) {
  if (!v.is_array()) r.wrong(key, "an array of unsigned 32-bit integers");
  std::vector<std::uint32_t> out;
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(r.u32(x, key));
  return out;
}

pmix_job decode_pmix_job(const json& v, std::size_t apps, std::string_view type = "job") {
  if (!v.is_object()) fail("field 'pmix' of a '" + std::string(type) + "' message must be a map");
  const reader r{v, type};
  pmix_job p;
  p.nspace = r.str("nspace");
  p.universe = r.u32("universe");
  p.node = r.u32("node");
  p.nodes = r.strings("nodes");
  p.rank_node = decode_u32s(r, r.field("rank_node"), "rank_node");
  p.rank_app = decode_u32s(r, r.field("rank_app"), "rank_app");
  p.rank_local = decode_u32s(r, r.field("rank_local"), "rank_local");
  if (r.has("parent_nspace")) {
    p.parent_nspace = r.str("parent_nspace");
    p.parent_rank = r.u32("parent_rank");
  }
  // Consistent, so that the agent can index with them (its PMIx component checks the rest). A
  // host may know a job it runs none of the ranks of (no_node): a spawned job's parents' host.
  const std::string what = "'" + std::string(type) + "' message: ";
  if (p.nodes.empty() || (p.node >= p.nodes.size() && p.node != no_node)) {
    fail(what + "PMIx node out of range");
  }
  if (p.rank_node.empty() || p.rank_app.size() != p.rank_node.size() ||
      p.rank_local.size() != p.rank_node.size()) {
    fail(what + "PMIx rank arrays differ in length");
  }
  for (std::size_t i = 0; i < p.rank_node.size(); ++i) {
    if (p.rank_node[i] >= p.nodes.size() || p.rank_app[i] >= apps || p.rank_local[i] > 0xffff) {
      fail(what + "PMIx facts of rank " + std::to_string(i) + " out of range");
    }
  }
  return p;
}

fence_members decode_members(const reader& outer) {
  const json& v = outer.field("members");
  if (!v.is_object()) outer.wrong("members", "a map");
  const reader r{v, outer.type};
  fence_members m;
  m.all = r.boolean("all");
  m.ranks = decode_u32s(r, r.field("ranks"), "ranks");
  if (m.all && !m.ranks.empty()) fail("fence members are all ranks and listed ranks at once");
  if (!std::is_sorted(m.ranks.begin(), m.ranks.end())) fail("fence members are not sorted");
  return m;
}

void check_fds(std::string_view type, std::uint32_t fds, std::uint32_t max) {
  if (fds > max) {
    fail("'" + std::string(type) + "' message announces " + std::to_string(fds) +
         " descriptors, more than the " + std::to_string(max) + " it may carry");
  }
}

// MessagePack written directly, byte for byte what nlohmann's to_msgpack writes for the same
// document (its maps are sorted by key, its integers take the shortest form): no document is
// built, so a message costs a few dozen nanoseconds instead of microseconds of allocation.
class writer {
 public:
  explicit writer(std::vector<std::uint8_t>& out) : out_(out) {}
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;
  void map(std::size_t n) { header(n, 0x80, 15, 0xde, 0xdf); }
  void array(std::size_t n) { header(n, 0x90, 15, 0xdc, 0xdd); }
  void str(std::string_view s) {
    const auto n = s.size();
    if (n <= 31) {
      put(static_cast<std::uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      put(0xd9);
      be(n, 1);
    } else if (n <= 0xffff) {
      put(0xda);
      be(n, 2);
    } else {
      put(0xdb);
      be(n, 4);
    }
    raw(s.data(), n);
  }
  void key(std::string_view k) { str(k); }
  void uint(std::uint64_t v) {
    if (v < 128) {
      put(static_cast<std::uint8_t>(v));
    } else if (v <= 0xff) {
      put(0xcc);
      be(v, 1);
    } else if (v <= 0xffff) {
      put(0xcd);
      be(v, 2);
    } else if (v <= 0xffffffffull) {
      put(0xce);
      be(v, 4);
    } else {
      put(0xcf);
      be(v, 8);
    }
  }
  void sint(std::int64_t v) {
    if (v >= 0) {
      uint(static_cast<std::uint64_t>(v));
    } else if (v >= -32) {
      put(static_cast<std::uint8_t>(static_cast<std::int8_t>(v)));
    } else if (v >= INT8_MIN) {
      put(0xd0);
      be(static_cast<std::uint64_t>(v), 1);
    } else if (v >= INT16_MIN) {
      put(0xd1);
      be(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN) {
      put(0xd2);
      be(static_cast<std::uint64_t>(v), 4);
    } else {
      put(0xd3);
      be(static_cast<std::uint64_t>(v), 8);
    }
  }
  void boolean(bool b) { put(b ? 0xc3 : 0xc2); }
  void strings(const std::vector<std::string>& v) {
    array(v.size());
    for (const auto& x : v) str(x);
  }
  /// Appends what is still buffered to the output vector; call once the message is written.
  [[gnu::noinline]] void flush() {
    out_.insert(out_.end(), buf_, buf_ + n_);
    n_ = 0;
  }

 private:
  // Bytes gather in a buffer on the stack and reach the vector in one insert per message (or per
  // full buffer): a push_back per byte cost a capacity check and a call each.
  static constexpr std::size_t capacity = 512;
  [[gnu::always_inline]] void put(std::uint8_t b) {
    if (n_ == capacity) [[unlikely]]
      flush();
    buf_[n_++] = b;
  }
  void raw(const char* p, std::size_t n) {
    if (n > capacity - n_) {
      flush();
      if (n > capacity / 2) {
        out_.insert(out_.end(), p, p + n);
        return;
      }
    }
    std::memcpy(buf_ + n_, p, n);
    n_ += n;
  }
  void header(std::size_t n, std::uint8_t fix, std::size_t fix_max, std::uint8_t b16,
              std::uint8_t b32) {
    if (n <= fix_max) {
      put(static_cast<std::uint8_t>(fix | n));
    } else if (n <= 0xffff) {
      put(b16);
      be(n, 2);
    } else {
      put(b32);
      be(n, 4);
    }
  }
  void be(std::uint64_t v, int bytes) {
    if (n_ + 8 > capacity) flush();
    for (int i = bytes - 1; i >= 0; --i) buf_[n_++] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::vector<std::uint8_t>& out_;
  std::size_t n_ = 0;
  std::uint8_t buf_[capacity];
};

// Each message as a map, its keys in sorted order (as nlohmann's std::map writes them).
struct encoder {
  writer& w;
  std::uint32_t fds;
  std::string_view type;
  // The map header, counting "type" and "fds" (when descriptors travel) beside `fields`.
  void begin(std::size_t fields) const { w.map(fields + 1 + (fds > 0 ? 1 : 0)); }
  void fds_field() const {
    if (fds > 0) {
      w.key("fds");
      w.uint(fds);
    }
  }
  void type_field() const {
    w.key("type");
    w.str(type);
  }
  void operator()(const hello& m) const {
    begin(6);
    w.key("addrs");
    w.strings(m.addrs);
    fds_field();
    w.key("hostname");
    w.str(m.hostname);
    w.key("nonce");
    w.uint(m.nonce);
    w.key("pid");
    w.sint(m.pid);
    w.key("port");
    w.uint(m.port);
    type_field();
    w.key("version");
    w.uint(m.version);
  }
  void operator()(const ack& m) const {
    begin(1);
    w.key("bytes");
    w.uint(m.bytes);
    fds_field();
    type_field();
  }
  void members(const fence_members& m) const {
    w.map(2);
    w.key("all");
    w.boolean(m.all);
    w.key("ranks");
    w.array(m.ranks.size());
    for (const auto r : m.ranks) w.uint(r);
  }
  void u32s(const std::vector<std::uint32_t>& v) const {
    w.array(v.size());
    for (const auto x : v) w.uint(x);
  }
  void pmix_block(const pmix_job& p) const {
    const bool spawned = !p.parent_nspace.empty();
    w.key("pmix");
    w.map(spawned ? 9 : 7);
    w.key("node");
    w.uint(p.node);
    w.key("nodes");
    w.strings(p.nodes);
    w.key("nspace");
    w.str(p.nspace);
    if (spawned) {
      w.key("parent_nspace");
      w.str(p.parent_nspace);
      w.key("parent_rank");
      w.uint(p.parent_rank);
    }
    w.key("rank_app");
    u32s(p.rank_app);
    w.key("rank_local");
    u32s(p.rank_local);
    w.key("rank_node");
    u32s(p.rank_node);
    w.key("universe");
    w.uint(p.universe);
  }
  void apps_field(const std::vector<app_spec>& apps) const {
    w.key("apps");
    w.array(apps.size());
    for (const auto& a : apps) {
      w.map(3);
      w.key("argv");
      w.strings(a.argv);
      w.key("env");
      w.strings(a.env);
      w.key("wdir");
      w.str(a.wdir);
    }
  }
  void entries(const std::vector<published_entry>& values) const {
    w.key("values");
    w.array(values.size());
    for (const auto& v : values) {
      w.map(3);
      w.key("key");
      w.str(v.key);
      w.key("rank");
      w.uint(v.rank);
      w.key("value");
      w.str(v.value);
    }
  }
  void operator()(const job_add& m) const {
    begin(m.pmix ? 5 : 4);
    apps_field(m.apps);
    fds_field();
    w.key("first");
    w.uint(m.first);
    w.key("first_app");
    w.uint(m.first_app);
    w.key("job");
    w.uint(m.job);
    if (m.pmix) pmix_block(*m.pmix);
    type_field();
  }
  void operator()(const pmix_spawn_reply& m) const {
    begin(4);
    w.key("error");
    w.str(m.error);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("nspace");
    w.str(m.nspace);
    w.key("ok");
    w.boolean(m.ok);
    type_field();
  }
  void operator()(const pmix_data_reply& m) const {
    begin(3);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("status");
    w.str(to_string(m.status));
    type_field();
    entries(m.values);
  }
  void operator()(const pmix_spawn& m) const {
    begin(4);
    w.key("apps");
    w.array(m.apps.size());
    for (const auto& a : m.apps) {
      w.map(5);
      w.key("argv");
      w.strings(a.argv);
      w.key("env");
      w.strings(a.env);
      w.key("hosts");
      w.strings(a.hosts);
      w.key("np");
      w.uint(a.np);
      w.key("wdir");
      w.str(a.wdir);
    }
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("rank");
    w.uint(m.rank);
    w.key("tool");
    w.str(m.tool);
    type_field();
  }
  void operator()(const pmix_publish& m) const {
    begin(3);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("rank");
    w.uint(m.rank);
    type_field();
    entries(m.values);
  }
  void operator()(const pmix_lookup& m) const {
    begin(5);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("keys");
    w.strings(m.keys);
    w.key("rank");
    w.uint(m.rank);
    w.key("timeout_s");
    w.uint(m.timeout_s);
    type_field();
    w.key("wait");
    w.boolean(m.wait);
  }
  void operator()(const pmix_unpublish& m) const {
    begin(3);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("keys");
    w.strings(m.keys);
    w.key("rank");
    w.uint(m.rank);
    type_field();
  }
  void operator()(const job_setup& m) const {
    begin(m.pmix ? 11 : 10);
    apps_field(m.apps);
    w.key("base");
    w.strings(m.base);
    w.key("cwd");
    w.str(m.cwd);
    fds_field();
    w.key("forward_output");
    w.boolean(m.forward_output);
    w.key("grace_ms");
    w.uint(m.grace_ms);
    w.key("heartbeat_ms");
    w.uint(m.heartbeat_ms);
    w.key("host");
    w.uint(m.host);
    w.key("overrides");
    w.strings(m.overrides);
    if (m.pmix) pmix_block(*m.pmix);
    w.key("silence_ms");
    w.uint(m.silence_ms);
    w.key("streams");
    w.uint(m.streams);
    type_field();
  }
  void operator()(const spawn_request& m) const {
    begin(1);
    fds_field();
    w.key("ranks");
    w.array(m.ranks.size());
    for (const auto& r : m.ranks) {
      w.map(4);
      w.key("app");
      w.uint(r.app);
      w.key("env");
      w.strings(r.env);
      w.key("rank");
      w.uint(r.rank);
      w.key("stdin");
      w.boolean(r.stdin_from_launcher);
    }
    type_field();
  }
  void operator()(const signal_request& m) const {
    begin(2);
    fds_field();
    w.key("ranks");
    w.array(m.ranks.size());
    for (const auto r : m.ranks) w.uint(r);
    w.key("signo");
    w.sint(m.signo);
    type_field();
  }
  void operator()(const input_closed& m) const {
    begin(1);
    fds_field();
    w.key("rank");
    w.uint(m.rank);
    type_field();
  }
  void operator()(const started& m) const {
    begin(2);
    fds_field();
    w.key("pid");
    w.sint(m.pid);
    w.key("rank");
    w.uint(m.rank);
    type_field();
  }
  void operator()(const spawn_failed& m) const {
    begin(3);
    w.key("code");
    w.sint(m.code);
    fds_field();
    w.key("rank");
    w.uint(m.rank);
    w.key("reason");
    w.str(m.reason);
    type_field();
  }
  void operator()(const exited& m) const {
    begin(2);
    if (!m.status.is_signal()) {
      w.key("code");
      w.sint(m.status.code());
    }
    fds_field();
    w.key("rank");
    w.uint(m.rank);
    if (m.status.is_signal()) {
      w.key("signal");
      w.sint(m.status.signal());
    }
    type_field();
  }
  void operator()(const stream_closed& m) const {
    begin(3);
    w.key("bytes");
    w.uint(m.bytes);
    fds_field();
    w.key("rank");
    w.uint(m.rank);
    w.key("stream");
    w.uint(m.stream == output_stream::out ? 1 : 2);
    type_field();
  }
  void operator()(const agent_error& m) const {
    begin(1);
    fds_field();
    w.key("text");
    w.str(m.text);
    type_field();
  }
  void operator()(const fence_result& m) const {
    begin(4);
    w.key("data");
    w.str(m.data);
    fds_field();
    w.key("members");
    members(m.members);
    w.key("ok");
    w.boolean(m.ok);
    w.key("seq");
    w.uint(m.seq);
    type_field();
  }
  void operator()(const pmix_abort& m) const {
    begin(3);
    fds_field();
    w.key("message");
    w.str(m.message);
    w.key("rank");
    w.uint(m.rank);
    w.key("status");
    w.sint(m.status);
    type_field();
  }
  void operator()(const fence_contribution& m) const {
    begin(4);
    w.key("collect");
    w.boolean(m.collect);
    w.key("data");
    w.str(m.data);
    fds_field();
    w.key("members");
    members(m.members);
    w.key("seq");
    w.uint(m.seq);
    type_field();
  }
  void operator()(const agent_notice& m) const {
    begin(1);
    fds_field();
    w.key("text");
    w.str(m.text);
    type_field();
  }
  void operator()(const pmix_unfinalized& m) const {
    begin(2);
    if (!m.status.is_signal()) {
      w.key("code");
      w.sint(m.status.code());
    }
    fds_field();
    w.key("rank");
    w.uint(m.rank);
    if (m.status.is_signal()) {
      w.key("signal");
      w.sint(m.status.signal());
    }
    type_field();
  }
  void operator()(const modex_request& m) const {
    begin(2);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("rank");
    w.uint(m.rank);
    type_field();
  }
  void operator()(const modex_reply& m) const {
    begin(3);
    w.key("data");
    w.str(m.data);
    fds_field();
    w.key("found");
    w.boolean(m.found);
    w.key("id");
    w.uint(m.id);
    type_field();
  }
  void operator()(const child_open& m) const {
    begin(2);
    w.key("argv");
    w.strings(m.argv);
    fds_field();
    w.key("host");
    w.uint(m.host);
    type_field();
  }
  void operator()(const child_data& m) const {
    begin(2);
    w.key("bytes");
    w.str(m.bytes);
    fds_field();
    w.key("host");
    w.uint(m.host);
    type_field();
  }
  void operator()(const child_close& m) const {
    begin(1);
    fds_field();
    w.key("host");
    w.uint(m.host);
    type_field();
  }
  void operator()(const child_closed& m) const {
    begin(4);
    w.key("code");
    w.sint(m.code);
    fds_field();
    w.key("host");
    w.uint(m.host);
    w.key("said");
    w.str(m.said);
    w.key("signal");
    w.sint(m.signo);
    type_field();
  }
  void operator()(const pmix_server& m) const {
    begin(2);
    fds_field();
    w.key("tmpdir");
    w.str(m.tmpdir);
    type_field();
    w.key("uri");
    w.str(m.uri);
  }
  void operator()(const proc_table_request& m) const {
    begin(1);
    fds_field();
    w.key("id");
    w.uint(m.id);
    type_field();
  }
  void operator()(const proc_table_reply& m) const {
    begin(2);
    fds_field();
    w.key("id");
    w.uint(m.id);
    w.key("ranks");
    w.array(m.ranks.size());
    for (const auto& r : m.ranks) {
      w.map(5);
      w.key("code");
      w.sint(r.code);
      w.key("pid");
      w.sint(r.pid);
      w.key("rank");
      w.uint(r.rank);
      w.key("signal");
      w.sint(r.signo);
      w.key("state");
      w.str(r.state);
    }
    type_field();
  }
  void operator()(const pmix_notify& m) const {
    begin(5);
    w.key("code");
    w.sint(m.code);
    fds_field();
    w.key("host");
    w.str(m.host);
    w.key("kind");
    w.str(to_string(m.kind));
    w.key("ranks");
    u32s(m.ranks);
    w.key("text");
    w.str(m.text);
    type_field();
  }
  // heartbeat, suspend, resume, shutdown, shutdown_done: the type alone.
  template <class T>
  void operator()(const T&) const {
    begin(0);
    fds_field();
    type_field();
  }
};

std::uint32_t max_fds(const message& m) {
  if (std::holds_alternative<spawn_request>(m)) return 1;
  if (std::holds_alternative<started>(m)) return 2;
  return 0;
}

constexpr std::string_view names[] = {"hello",
                                      "heartbeat",
                                      "ack",
                                      "job",
                                      "spawn",
                                      "signal",
                                      "input_closed",
                                      "suspend",
                                      "resume",
                                      "shutdown",
                                      "started",
                                      "spawn_failed",
                                      "exited",
                                      "stream_closed",
                                      "shutdown_done",
                                      "error",
                                      "fence_result",
                                      "pmix_abort",
                                      "fence",
                                      "modex",
                                      "modex_reply",
                                      "unfinalized",
                                      "notice",
                                      "child_open",
                                      "child_data",
                                      "child_close",
                                      "child_closed",
                                      "pmix_server",
                                      "proc_table_request",
                                      "proc_table_reply",
                                      "notify",
                                      "job_add",
                                      "pmix_spawn_reply",
                                      "pmix_data_reply",
                                      "pmix_spawn",
                                      "pmix_publish",
                                      "pmix_lookup",
                                      "pmix_unpublish"};
static_assert(std::size(names) == std::variant_size_v<message>);

// ---- the direct decoder ----
// Well-formed bodies (what writer writes, or any equivalent MessagePack) are read in place, with
// no document; for anything it does not recognise (a missing or mistyped field, an unknown type,
// floats, nil, extensions, duplicate keys, trailing bytes) it declines, and decode() falls back to
// the reference decoder, which names the problem. So both accept and refuse exactly the same
// bodies (tests/unit/link_messages_test.cpp compares them on random and mutated input).

// A MessagePack value inside the body: where it starts.
struct value_ref {
  const std::uint8_t* p = nullptr;
};

class fast_reader {
 public:
  explicit fast_reader(std::span<const std::uint8_t> b) : p_(b.data()), end_(b.data() + b.size()) {}
  bool at_end() const { return p_ == end_; }
  const std::uint8_t* pos() const { return p_; }
  void seek(const std::uint8_t* p) { p_ = p; }

  bool byte(std::uint8_t& b) {
    if (p_ == end_) return false;
    b = *p_++;
    return true;
  }
  bool be(int n, std::uint64_t& v) {
    if (end_ - p_ < n) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | *p_++;
    return true;
  }
  bool map_header(std::size_t& n) { return header(n, 0x80, 0xde, 0xdf); }
  bool array_header(std::size_t& n) { return header(n, 0x90, 0xdc, 0xdd); }
  bool str(std::string_view& s) {
    std::uint8_t b = 0;
    if (!byte(b)) return false;
    std::uint64_t n = 0;
    if ((b & 0xe0) == 0xa0) {
      n = b & 0x1f;
    } else if (b == 0xd9) {
      if (!be(1, n)) return false;
    } else if (b == 0xda) {
      if (!be(2, n)) return false;
    } else if (b == 0xdb) {
      if (!be(4, n)) return false;
    } else {
      return false;
    }
    if (static_cast<std::uint64_t>(end_ - p_) < n) return false;
    s = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  // An integer: `neg` says it is below zero (then `v` holds its two's complement).
  bool integer(std::uint64_t& v, bool& neg) {
    std::uint8_t b = 0;
    if (!byte(b)) return false;
    neg = false;
    if (b < 0x80) {
      v = b;
      return true;
    }
    if (b >= 0xe0) {
      neg = true;
      v = static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(b)));
      return true;
    }
    switch (b) {
      case 0xcc:
        return be(1, v);
      case 0xcd:
        return be(2, v);
      case 0xce:
        return be(4, v);
      case 0xcf:
        return be(8, v);
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: {
        const int n = 1 << (b - 0xd0);
        if (!be(n, v)) return false;
        // sign-extend
        const int shift = 64 - 8 * n;
        const auto s = static_cast<std::int64_t>(v << shift) >> shift;
        v = static_cast<std::uint64_t>(s);
        neg = s < 0;
        return true;
      }
      default:
        return false;
    }
  }
  bool boolean(bool& out) {
    std::uint8_t b = 0;
    if (!byte(b) || (b != 0xc2 && b != 0xc3)) return false;
    out = b == 0xc3;
    return true;
  }
  // Skips one value of the kinds messages use (maps, arrays, strings, integers, booleans), at
  // most `depth` levels deep; anything else declines.
  bool skip(int depth) {
    if (depth >= max_depth || p_ == end_) return false;  // the reference decides there
    const std::uint8_t b = *p_;
    if ((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) {
      std::size_t n = 0;
      if (!map_header(n)) return false;
      for (std::size_t i = 0; i < n; ++i) {
        std::string_view k;
        if (!str(k) || !skip(depth + 1)) return false;
      }
      return true;
    }
    if ((b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd) {
      std::size_t n = 0;
      if (!array_header(n)) return false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!skip(depth + 1)) return false;
      }
      return true;
    }
    if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb) {
      std::string_view s;
      return str(s);
    }
    if (b == 0xc2 || b == 0xc3) {
      ++p_;
      return true;
    }
    std::uint64_t v = 0;
    bool neg = false;
    return integer(v, neg);
  }

 private:
  bool header(std::size_t& n, std::uint8_t fix, std::uint8_t b16, std::uint8_t b32) {
    std::uint8_t b = 0;
    if (!byte(b)) return false;
    std::uint64_t v = 0;
    if ((b & 0xf0) == fix) {
      n = b & 0x0f;
      return true;
    }
    if (b == b16) {
      if (!be(2, v)) return false;
    } else if (b == b32) {
      if (!be(4, v)) return false;
    } else {
      return false;
    }
    // Every element takes at least a byte: a count beyond the body is malformed.
    if (v > static_cast<std::uint64_t>(end_ - p_)) return false;
    n = static_cast<std::size_t>(v);
    return true;
  }
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// The fields of one map: keys and where their values start (a message has at most a dozen).
class fast_map {
 public:
  // Reads the map at the reader's position; declines duplicate keys and more than 16 fields.
  bool read(fast_reader& r, int depth) {
    std::size_t n = 0;
    count_ = 0;
    if (!r.map_header(n) || n > max_fields) return false;
    for (std::size_t i = 0; i < n; ++i) {
      std::string_view k;
      if (!r.str(k)) return false;
      for (std::size_t j = 0; j < i; ++j) {
        if (keys_[j].view() == k) return false;
      }
      keys_[i] = key_ref{k.data(), k.size()};
      values_[i] = r.pos();
      count_ = i + 1;
      if (!r.skip(depth + 1)) return false;
    }
    return true;
  }
  const std::uint8_t* find(std::string_view key) const {
    for (std::size_t i = 0; i < count_; ++i) {
      if (keys_[i].view() == key) return values_[i];
    }
    return nullptr;
  }

 private:
  static constexpr std::size_t max_fields = 16;
  // Left uninitialised (only the first count_ are read): zeroing them cost more than the lookups.
  struct key_ref {
    const char* p;
    std::size_t n;
    std::string_view view() const { return {p, n}; }
  };
  key_ref keys_[max_fields];
  const std::uint8_t* values_[max_fields];
  std::size_t count_ = 0;
};

// Typed field access that declines instead of naming the problem.
struct fast_fields {
  const fast_map& m;
  fast_reader& r;

  bool at(std::string_view key) {
    const auto* v = m.find(key);
    if (v == nullptr) return false;
    r.seek(v);
    return true;
  }
  bool unsigned_at(std::string_view key, std::uint64_t max, std::uint64_t& out) {
    bool neg = false;
    if (!at(key) || !r.integer(out, neg) || neg || out > max) return false;
    return true;
  }
  template <class T>
  bool u(std::string_view key, T& out) {
    std::uint64_t v = 0;
    if (!unsigned_at(key, std::numeric_limits<T>::max(), v)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool range(std::string_view key, std::int64_t lo, std::int64_t hi, int& out) {
    std::uint64_t v = 0;
    bool neg = false;
    if (!at(key) || !r.integer(v, neg)) return false;
    const auto s = static_cast<std::int64_t>(v);
    if (!neg && v > static_cast<std::uint64_t>(hi)) return false;
    if (s < lo || s > hi) return false;
    out = static_cast<int>(s);
    return true;
  }
  bool i64(std::string_view key, std::int64_t& out) {
    std::uint64_t v = 0;
    bool neg = false;
    if (!at(key) || !r.integer(v, neg)) return false;
    if (!neg && v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return false;
    out = static_cast<std::int64_t>(v);
    return true;
  }
  bool str(std::string_view key, std::string& out) {
    std::string_view s;
    if (!at(key) || !r.str(s)) return false;
    out.assign(s);
    return true;
  }
  bool boolean(std::string_view key, bool& out) { return at(key) && r.boolean(out); }
  bool strings(std::string_view key, std::vector<std::string>& out) {
    std::size_t n = 0;
    if (!at(key) || !r.array_header(n)) return false;
    out.clear();
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::string_view s;
      if (!r.str(s)) return false;
      out.emplace_back(s);
    }
    return true;
  }
  bool array(std::string_view key, std::size_t& n) { return at(key) && r.array_header(n); }
};

// A key or type name against a literal: compared at a fixed length (inlined, no memcmp call).
template <std::size_t N>
bool is(std::string_view s, const char (&literal)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), literal, N - 1) == 0;
}

// The messages every rank causes (started, exited, stream_closed) and the link's own (heartbeat,
// ack), read in one pass with no field table: a flat map of integers and the type, each key once,
// exactly the fields the type has (and fds). Anything else declines to decode_fast, which accepts
// the same bodies with the same result: this path changes what a message costs, never the answer.
std::optional<envelope> decode_small(std::span<const std::uint8_t> body) {
  enum field : unsigned { f_bytes, f_code, f_fds, f_pid, f_rank, f_signal, f_stream, f_count };
  constexpr auto bit = [](field f) { return 1u << f; };
  fast_reader r(body);
  std::size_t n = 0;
  if (!r.map_header(n) || n > f_count + 1) return std::nullopt;
  std::uint64_t v[f_count];
  bool neg[f_count];
  unsigned seen = 0;
  std::string_view type;
  bool typed = false;
  for (std::size_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!r.str(k)) return std::nullopt;
    if (is(k, "type")) {
      if (typed || !r.str(type)) return std::nullopt;
      typed = true;
      continue;
    }
    field f{};
    if (is(k, "rank")) {
      f = f_rank;
    } else if (is(k, "pid")) {
      f = f_pid;
    } else if (is(k, "stream")) {
      f = f_stream;
    } else if (is(k, "bytes")) {
      f = f_bytes;
    } else if (is(k, "code")) {
      f = f_code;
    } else if (is(k, "signal")) {
      f = f_signal;
    } else if (is(k, "fds")) {
      f = f_fds;
    } else {
      return std::nullopt;
    }
    if ((seen & bit(f)) != 0 || !r.integer(v[f], neg[f])) return std::nullopt;
    seen |= bit(f);
  }
  if (!typed || !r.at_end()) return std::nullopt;
  constexpr std::uint64_t u32_max = std::numeric_limits<std::uint32_t>::max();
  const auto u32 = [&](field f, std::uint32_t& out) {
    if (neg[f] || v[f] > u32_max) return false;
    out = static_cast<std::uint32_t>(v[f]);
    return true;
  };
  const auto range = [&](field f, std::int64_t lo, std::int64_t hi, int& out) {
    const auto x = static_cast<std::int64_t>(v[f]);
    if ((!neg[f] && v[f] > static_cast<std::uint64_t>(hi)) || x < lo || x > hi) return false;
    out = static_cast<int>(x);
    return true;
  };
  envelope e;
  if ((seen & bit(f_fds)) != 0 && !u32(f_fds, e.fds)) return std::nullopt;
  const unsigned fields = seen & ~bit(f_fds);
  bool ok = false;
  if (is(type, "started") && fields == (bit(f_pid) | bit(f_rank))) {
    started m;
    ok = u32(f_rank, m.rank) &&
         (neg[f_pid] || v[f_pid] <= std::uint64_t{std::numeric_limits<std::int64_t>::max()});
    m.pid = static_cast<std::int64_t>(v[f_pid]);
    e.msg = m;
  } else if (is(type, "exited") &&
             (fields == (bit(f_rank) | bit(f_code)) || fields == (bit(f_rank) | bit(f_signal)))) {
    exited m;
    int x = 0;
    const bool by_code = (fields & bit(f_code)) != 0;
    ok = u32(f_rank, m.rank) &&
         (by_code ? range(f_code, 0, 255, x) : range(f_signal, 1, max_signal, x));
    m.status = by_code ? exit_status::exited(x) : exit_status::signaled(x);
    e.msg = m;
  } else if (is(type, "stream_closed") && fields == (bit(f_bytes) | bit(f_rank) | bit(f_stream))) {
    stream_closed m;
    int stream = 0;
    ok = u32(f_rank, m.rank) && range(f_stream, 1, 2, stream) && !neg[f_bytes];
    m.stream = stream == 1 ? output_stream::out : output_stream::err;
    m.bytes = v[f_bytes];
    e.msg = m;
  } else if (is(type, "heartbeat") && fields == 0) {
    e.msg = heartbeat{};
    ok = true;
  } else if (is(type, "ack") && fields == bit(f_bytes)) {
    ok = !neg[f_bytes];
    e.msg = ack{v[f_bytes]};
  }
  if (!ok || e.fds > max_fds(e.msg)) return std::nullopt;
  return e;
}

std::optional<envelope> decode_fast(std::span<const std::uint8_t> body) {
  fast_reader r(body);
  fast_map top;
  if (!top.read(r, 0) || !r.at_end()) return std::nullopt;
  fast_fields f{top, r};
  std::string_view type;
  if (!f.at("type") || !r.str(type)) return std::nullopt;
  envelope e;
  if (top.find("fds") != nullptr && !f.u("fds", e.fds)) return std::nullopt;
  const auto u32 = [&](std::string_view k, std::uint32_t& out) { return f.u(k, out); };
  bool ok = true;
  if (type == "started") {
    started m;
    ok = u32("rank", m.rank) && f.i64("pid", m.pid);
    e.msg = m;
  } else if (type == "exited") {
    exited m;
    const bool has_code = top.find("code") != nullptr, has_signal = top.find("signal") != nullptr;
    int v = 0;
    ok = u32("rank", m.rank) && has_code != has_signal &&
         (has_code ? f.range("code", 0, 255, v) : f.range("signal", 1, max_signal, v));
    m.status = has_code ? exit_status::exited(v) : exit_status::signaled(v);
    e.msg = m;
  } else if (type == "stream_closed") {
    stream_closed m;
    int stream = 0;
    ok = u32("rank", m.rank) && f.range("stream", 1, 2, stream) && f.u("bytes", m.bytes);
    m.stream = stream == 1 ? output_stream::out : output_stream::err;
    e.msg = m;
  } else if (type == "child_data") {
    child_data m;
    ok = u32("host", m.host) && f.str("bytes", m.bytes);
    e.msg = std::move(m);
  } else if (type == "heartbeat") {
    e.msg = heartbeat{};
  } else if (type == "ack") {
    ack m;
    ok = f.u("bytes", m.bytes);
    e.msg = m;
  } else if (type == "spawn") {
    spawn_request m;
    std::size_t n = 0;
    ok = f.array("ranks", n);
    // Capped: a hostile count (up to the body's size) must not allocate ahead of its elements.
    if (ok) m.ranks.reserve(std::min<std::size_t>(n, 1024));
    const std::uint8_t* next = r.pos();
    for (std::size_t i = 0; ok && i < n; ++i) {
      r.seek(next);
      fast_map item;
      if (!item.read(r, 2)) return std::nullopt;
      next = r.pos();
      fast_fields g{item, r};
      rank_spec spec;
      ok = g.u("rank", spec.rank) && g.u("app", spec.app) && g.strings("env", spec.env) &&
           g.boolean("stdin", spec.stdin_from_launcher);
      m.ranks.push_back(std::move(spec));
    }
    e.msg = std::move(m);
  } else if (type == "signal") {
    signal_request m;
    std::size_t n = 0;
    ok = f.array("ranks", n);
    // Capped: a hostile count (up to the body's size) must not allocate ahead of its elements.
    if (ok) m.ranks.reserve(std::min<std::size_t>(n, 1024));
    for (std::size_t i = 0; ok && i < n; ++i) {
      std::uint64_t v = 0;
      bool neg = false;
      ok = r.integer(v, neg) && !neg && v <= std::numeric_limits<std::uint32_t>::max();
      m.ranks.push_back(static_cast<std::uint32_t>(v));
    }
    ok = ok && f.range("signo", 0, max_signal, m.signo);
    e.msg = std::move(m);
  } else if (type == "hello") {
    hello m;
    ok = u32("version", m.version);
    if (ok && m.version == protocol_version) {
      int port = 0;
      ok = f.u("nonce", m.nonce) && f.i64("pid", m.pid) && f.str("hostname", m.hostname) &&
           f.strings("addrs", m.addrs) && f.range("port", 0, 65535, port);
      m.port = static_cast<std::uint16_t>(port);
    }
    e.msg = std::move(m);
  } else if (type == "job") {
    job_setup m;
    int streams = 0;
    std::size_t n = 0;
    // The PMIx block (per-rank arrays) is read by the reference decoder: once per job and host.
    if (top.find("pmix") != nullptr) return std::nullopt;
    ok = u32("host", m.host) && u32("grace_ms", m.grace_ms) &&
         u32("heartbeat_ms", m.heartbeat_ms) && u32("silence_ms", m.silence_ms) &&
         f.boolean("forward_output", m.forward_output) && f.range("streams", 0, 2, streams) &&
         f.str("cwd", m.cwd) && f.strings("base", m.base) && f.strings("overrides", m.overrides) &&
         f.array("apps", n) && n > 0;
    m.streams = static_cast<std::uint8_t>(streams);
    const std::uint8_t* next = r.pos();
    for (std::size_t i = 0; ok && i < n; ++i) {
      r.seek(next);
      fast_map item;
      if (!item.read(r, 2)) return std::nullopt;
      next = r.pos();
      fast_fields g{item, r};
      app_spec a;
      ok = g.strings("argv", a.argv) && g.str("wdir", a.wdir) && g.strings("env", a.env) &&
           !a.argv.empty() && !a.argv.front().empty();
      m.apps.push_back(std::move(a));
    }
    e.msg = std::move(m);
  } else if (type == "spawn_failed") {
    spawn_failed m;
    ok = u32("rank", m.rank) && f.range("code", 0, 255, m.code) && f.str("reason", m.reason);
    e.msg = std::move(m);
  } else if (type == "input_closed") {
    input_closed m;
    ok = u32("rank", m.rank);
    e.msg = m;
  } else if (type == "suspend") {
    e.msg = suspend{};
  } else if (type == "resume") {
    e.msg = resume{};
  } else if (type == "shutdown") {
    e.msg = shutdown_request{};
  } else if (type == "shutdown_done") {
    e.msg = shutdown_done{};
  } else if (type == "error") {
    agent_error m;
    ok = f.str("text", m.text);
    e.msg = std::move(m);
  } else {
    return std::nullopt;
  }
  if (!ok || e.fds > max_fds(e.msg)) return std::nullopt;
  return e;
}

}  // namespace

std::string_view to_string(data_status s) noexcept {
  switch (s) {
    case data_status::ok:
      return "ok";
    case data_status::not_found:
      return "not_found";
    case data_status::timeout:
      return "timeout";
    case data_status::error:
      return "error";
  }
  return "error";
}

std::optional<data_status> data_status_from(std::string_view text) noexcept {
  for (auto s :
       {data_status::ok, data_status::not_found, data_status::timeout, data_status::error}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

std::string_view type_name(const message& m) noexcept {
  return names[m.index()];
}

sender sent_by(const message& m) noexcept {
  return std::visit(
      [](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, hello> || std::is_same_v<T, heartbeat> ||
                      std::is_same_v<T, ack> || std::is_same_v<T, modex_request> ||
                      std::is_same_v<T, modex_reply> || std::is_same_v<T, child_data>) {
          return sender::either;
        } else if constexpr (std::is_same_v<T, started> || std::is_same_v<T, spawn_failed> ||
                             std::is_same_v<T, exited> || std::is_same_v<T, stream_closed> ||
                             std::is_same_v<T, shutdown_done> || std::is_same_v<T, agent_error> ||
                             std::is_same_v<T, pmix_abort> || std::is_same_v<T, pmix_unfinalized> ||
                             std::is_same_v<T, agent_notice> ||
                             std::is_same_v<T, fence_contribution> ||
                             std::is_same_v<T, child_closed> || std::is_same_v<T, pmix_server> ||
                             std::is_same_v<T, proc_table_request> ||
                             std::is_same_v<T, pmix_spawn> || std::is_same_v<T, pmix_publish> ||
                             std::is_same_v<T, pmix_lookup> || std::is_same_v<T, pmix_unpublish>) {
          return sender::agent;
        } else {
          return sender::launcher;
        }
      },
      m);
}

std::vector<std::uint8_t> encode(const message& m, std::uint32_t fds) {
  check_fds(type_name(m), fds, max_fds(m));
  std::vector<std::uint8_t> out;
  writer w(out);
  std::visit(encoder{w, fds, type_name(m)}, m);
  w.flush();
  return out;
}

void append_message(std::vector<std::uint8_t>& out, const message& m, std::uint32_t fds) {
  check_fds(type_name(m), fds, max_fds(m));
  // Framed in place: a header and the kind first, the body written behind them, then the length
  // patched in (append_control_frame's limits apply).
  const std::size_t at = out.size();
  // Room for a small message at once (an emptied buffer would otherwise grow 5, 10, 20, 40).
  if (out.capacity() - at < 64) out.reserve(std::max(at + 64, 2 * out.capacity()));
  out.insert(out.end(), frame_header_bytes + 1, 0);
  writer w(out);
  std::visit(encoder{w, fds, type_name(m)}, m);
  w.flush();
  const std::size_t n = out.size() - at - frame_header_bytes;  // kind + body
  if (n > max_frame_bytes) {
    out.resize(at);
    fail("message of " + std::to_string(n - 1) + " bytes exceeds the " +
         std::to_string(max_frame_bytes >> 20) + " MiB limit");
  }
  for (int i = 0; i < 4; ++i)
    out[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (24 - 8 * i));
  out[at + frame_header_bytes] = static_cast<std::uint8_t>(frame_kind::control);
}

envelope decode_reference(std::span<const std::uint8_t> body) {
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
      // No version's hello carries descriptors (found by fuzz_link_message: one that announced
      // 17 was read, and could not be written back).
      e.msg = m;
      check_fds(type, e.fds, max_fds(e.msg));
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
    if (r.has("pmix")) m.pmix = decode_pmix_job(r.field("pmix"), m.apps.size());
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
  } else if (type == "fence_result") {
    fence_result m;
    m.members = decode_members(r);
    m.seq = r.unsigned_field(r.field("seq"), "seq", std::numeric_limits<std::uint64_t>::max(),
                             "an unsigned 64-bit integer");
    m.ok = r.boolean("ok");
    m.data = r.str("data");
    e.msg = std::move(m);
  } else if (type == "pmix_abort") {
    e.msg =
        pmix_abort{r.u32("rank"), r.small_int("status", -2147483647, 2147483647), r.str("message")};
  } else if (type == "notice") {
    e.msg = agent_notice{r.str("text")};
  } else if (type == "unfinalized") {
    pmix_unfinalized m;
    m.rank = r.u32("rank");
    const bool has_code = r.has("code"), has_signal = r.has("signal");
    if (has_code == has_signal) {
      fail("'unfinalized' message needs exactly one of 'code' and 'signal'");
    }
    m.status = has_code ? exit_status::exited(r.small_int("code", 0, 255))
                        : exit_status::signaled(r.small_int("signal", 1, max_signal));
    e.msg = m;
  } else if (type == "modex") {
    modex_request m;
    m.id = r.unsigned_field(r.field("id"), "id", std::numeric_limits<std::uint64_t>::max(),
                            "an unsigned 64-bit integer");
    m.rank = r.u32("rank");
    e.msg = m;
  } else if (type == "modex_reply") {
    modex_reply m;
    m.id = r.unsigned_field(r.field("id"), "id", std::numeric_limits<std::uint64_t>::max(),
                            "an unsigned 64-bit integer");
    m.found = r.boolean("found");
    m.data = r.str("data");
    e.msg = std::move(m);
  } else if (type == "child_open") {
    child_open m;
    m.host = r.u32("host");
    m.argv = r.strings("argv");
    if (m.argv.empty()) fail("'child_open' message needs a command line");
    e.msg = std::move(m);
  } else if (type == "child_data") {
    e.msg = child_data{r.u32("host"), r.str("bytes")};
  } else if (type == "child_close") {
    e.msg = child_close{r.u32("host")};
  } else if (type == "child_closed") {
    e.msg = child_closed{r.u32("host"), r.small_int("code", -1, 255),
                         r.small_int("signal", 0, max_signal), r.str("said")};
  } else if (type == "pmix_server") {
    e.msg = pmix_server{r.str("uri"), r.str("tmpdir")};
  } else if (type == "proc_table_request") {
    e.msg = proc_table_request{r.unsigned_field(r.field("id"), "id",
                                                std::numeric_limits<std::uint64_t>::max(),
                                                "an unsigned 64-bit integer")};
  } else if (type == "proc_table_reply") {
    proc_table_reply m;
    m.id = r.unsigned_field(r.field("id"), "id", std::numeric_limits<std::uint64_t>::max(),
                            "an unsigned 64-bit integer");
    const json& ranks = r.array("ranks");
    m.ranks.reserve(ranks.size());
    for (const auto& v : ranks) {
      if (!v.is_object())
        fail("field 'ranks' of a 'proc_table_reply' message must be an array of maps");
      const reader x{v, type};
      proc_table_entry entry;
      entry.rank = x.u32("rank");
      entry.pid = x.i64("pid");
      entry.state = x.str("state");
      entry.code = x.small_int("code", -1, 255);
      entry.signo = x.small_int("signal", 0, max_signal);
      m.ranks.push_back(std::move(entry));
    }
    e.msg = std::move(m);
  } else if (type == "notify") {
    pmix_notify m;
    const std::string kind = r.str("kind");
    const auto k = notice_kind_from(kind);
    if (!k) fail("'notify' message has an unknown kind");
    m.kind = *k;
    m.ranks = decode_u32s(r, r.field("ranks"), "ranks");
    m.code = r.small_int("code", -2147483647, 2147483647);
    m.host = r.str("host");
    m.text = r.str("text");
    e.msg = std::move(m);
  } else if (type == "job_add") {
    job_add m;
    m.job = r.u32("job");
    m.first = r.u32("first");
    m.first_app = r.u32("first_app");
    for (const auto& v : r.array("apps")) m.apps.push_back(decode_app(v, type));
    if (m.apps.empty()) fail("'job_add' message has no app");
    if (r.has("pmix")) m.pmix = decode_pmix_job(r.field("pmix"), m.apps.size(), type);
    e.msg = std::move(m);
  } else if (type == "pmix_spawn_reply") {
    e.msg = pmix_spawn_reply{u64_field(r, "id"), r.boolean("ok"), r.str("nspace"), r.str("error")};
  } else if (type == "pmix_data_reply") {
    pmix_data_reply m;
    m.id = u64_field(r, "id");
    const auto st = data_status_from(r.str("status"));
    if (!st) fail("'pmix_data_reply' message has an unknown status");
    m.status = *st;
    m.values = decode_entries(r);
    e.msg = std::move(m);
  } else if (type == "pmix_spawn") {
    pmix_spawn m;
    m.id = u64_field(r, "id");
    m.rank = r.u32("rank");
    m.tool = r.str("tool");
    for (const auto& v : r.array("apps")) {
      if (!v.is_object()) r.wrong("apps", "an array of maps");
      const reader x{v, type};
      spawn_app_spec a;
      a.argv = x.strings("argv");
      a.env = x.strings("env");
      a.hosts = x.strings("hosts");
      a.np = x.u32("np");
      a.wdir = x.str("wdir");
      if (a.argv.empty() || a.argv.front().empty()) fail("an app of a 'pmix_spawn' has no program");
      m.apps.push_back(std::move(a));
    }
    if (m.apps.empty()) fail("'pmix_spawn' message has no app");
    e.msg = std::move(m);
  } else if (type == "pmix_publish") {
    e.msg = pmix_publish{u64_field(r, "id"), r.u32("rank"), decode_entries(r)};
  } else if (type == "pmix_lookup") {
    e.msg = pmix_lookup{u64_field(r, "id"), r.u32("rank"), r.strings("keys"), r.boolean("wait"),
                        r.u32("timeout_s")};
  } else if (type == "pmix_unpublish") {
    e.msg = pmix_unpublish{u64_field(r, "id"), r.u32("rank"), r.strings("keys")};
  } else if (type == "fence") {
    fence_contribution m;
    m.members = decode_members(r);
    m.seq = r.unsigned_field(r.field("seq"), "seq", std::numeric_limits<std::uint64_t>::max(),
                             "an unsigned 64-bit integer");
    m.collect = r.boolean("collect");
    m.data = r.str("data");
    e.msg = std::move(m);
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

envelope decode(std::span<const std::uint8_t> body) {
  if (auto e = decode_small(body)) return std::move(*e);
  if (auto e = decode_fast(body)) return std::move(*e);
  return decode_reference(body);
}

}  // namespace pm::link
