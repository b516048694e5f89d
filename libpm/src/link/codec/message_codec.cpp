// The public face of the codec (link/messages.hpp): every alternative of `message` through the
// generic codec (wire_codec.hpp), its name and sender taken from its wire form, and the type
// name of a body mapped to its alternative.
#include <algorithm>
#include <array>
#include <string>
#include <variant>

#include "link/codec/wire_codec.hpp"
#include "link/frame.hpp"
#include "link/messages.hpp"
#include "pm/error.hpp"

namespace pm::link {

namespace codec {

void fail(const std::string& what) {
  throw error(errc::launch, "agent link: " + what);
}
void wrong(std::string_view key, std::string_view type, std::string_view want) {
  fail("field '" + std::string(key) + "' of a '" + std::string(type) + "' message must be " +
       std::string(want));
}
void lacks(std::string_view key, std::string_view type) {
  fail("'" + std::string(type) + "' message lacks field '" + std::string(key) + "'");
}
void unknown_name(std::string_view key, std::string_view type) {
  fail("'" + std::string(type) + "' message has an unknown " + std::string(key));
}
void out_of_range(std::string_view key, std::string_view type, std::int64_t lo, std::int64_t hi) {
  wrong(key, type, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
}

}  // namespace codec

namespace {

template <std::size_t I>
using alternative = std::variant_alternative_t<I, message>;
constexpr std::size_t message_count = std::variant_size_v<message>;

// Every alternative declares its wire form: a struct added to `message` without one stops here.
template <std::size_t... I>
constexpr bool all_declared(std::index_sequence<I...>) {
  return (codec::has_wire<alternative<I>> && ...) && (codec::is_message<alternative<I>> && ...);
}
static_assert(all_declared(std::make_index_sequence<message_count>{}),
              "every alternative of pm::link::message needs a wire_message() form");

template <std::size_t... I>
constexpr auto names_of(std::index_sequence<I...>) {
  return std::array<std::string_view, sizeof...(I)>{codec::schema_of<alternative<I>>.name...};
}
constexpr auto names = names_of(std::make_index_sequence<message_count>{});

constexpr bool names_are_unique() {
  auto sorted = names;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}
static_assert(names_are_unique(), "two messages share a wire name");

template <std::size_t... I>
constexpr auto senders_of(std::index_sequence<I...>) {
  return std::array<sender, sizeof...(I)>{codec::schema_of<alternative<I>>.from...};
}
constexpr auto senders = senders_of(std::make_index_sequence<message_count>{});

template <std::size_t... I>
constexpr auto max_fds_of(std::index_sequence<I...>) {
  return std::array<std::uint32_t, sizeof...(I)>{codec::schema_of<alternative<I>>.max_fds...};
}
constexpr auto max_fds = max_fds_of(std::make_index_sequence<message_count>{});

// A body's type name to its alternative: an open-addressed table built at compile time, so that
// the lookup is a hash and one or two comparisons whatever the number of messages.
constexpr std::size_t table_size = 128;
static_assert(message_count < table_size / 2);
constexpr std::size_t hash_of(std::string_view s) {
  if (s.empty()) return 0;
  const auto at = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<unsigned char>(s[i]));
  };
  return (s.size() * 37 + at(0) * 7 + at(s.size() / 2) * 3 + at(s.size() - 1)) % table_size;
}
constexpr auto type_table = [] {
  std::array<std::uint8_t, table_size> t{};
  t.fill(0xff);
  for (std::size_t i = 0; i < message_count; ++i) {
    std::size_t at = hash_of(names[i]);
    while (t[at] != 0xff) at = (at + 1) % table_size;
    t[at] = static_cast<std::uint8_t>(i);
  }
  return t;
}();
constexpr std::size_t no_type = message_count;

std::size_t index_of_type(std::string_view type) {
  for (std::size_t at = hash_of(type);; at = (at + 1) % table_size) {
    const std::uint8_t i = type_table[at];
    if (i == 0xff) return no_type;
    if (codec::same_text(names[i], type)) return i;
  }
}

void check_fds(std::string_view type, std::uint32_t fds, std::uint32_t max) {
  if (fds > max) {
    codec::fail("'" + std::string(type) + "' message announces " + std::to_string(fds) +
                " descriptors, more than the " + std::to_string(max) + " it may carry");
  }
}

void write_body(codec::msgpack_writer& w, const message& m, std::uint32_t fds) {
  std::visit([&](const auto& x) { codec::write_map(w, x, names[m.index()], fds); }, m);
  w.flush();
}

// Reads the top-level map as alternative I (the reader at its first key).
template <std::size_t I>
void read_as(codec::msgpack_reader& r, const codec::body_shape& shape, envelope& e) {
  codec::read_map(r, shape.entries, e.msg.emplace<I>(), names[I],
                  shape.entries <= codec::body_shape::max_listed ? shape.listed : nullptr);
}
using reader_fn = void (*)(codec::msgpack_reader&, const codec::body_shape&, envelope&);
template <std::size_t... I>
constexpr auto readers_of(std::index_sequence<I...>) {
  return std::array<reader_fn, sizeof...(I)>{&read_as<I>...};
}
constexpr auto readers = readers_of(std::make_index_sequence<message_count>{});

[[noreturn]] void unknown_type(std::string_view type) {
  std::string shown(type.substr(0, 40));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  codec::fail("unknown message type '" + shown + "'");
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
  return senders[m.index()];
}

std::vector<std::uint8_t> encode(const message& m, std::uint32_t fds) {
  check_fds(type_name(m), fds, max_fds[m.index()]);
  std::vector<std::uint8_t> out;
  codec::msgpack_writer w(out);
  write_body(w, m, fds);
  return out;
}

void append_message(std::vector<std::uint8_t>& out, const message& m, std::uint32_t fds) {
  check_fds(type_name(m), fds, max_fds[m.index()]);
  if (const auto* d = std::get_if<child_data>(&m)) {
    // Relayed bytes travel raw (frame.hpp): one copy into the frame, none out of it.
    append_relay_frames(out, d->host,
                        {reinterpret_cast<const std::uint8_t*>(d->bytes.data()), d->bytes.size()});
    return;
  }
  // Framed in place: a header and the kind first, the body written behind them, then the length
  // patched in (append_control_frame's limits apply).
  const std::size_t at = out.size();
  // Room for a small message at once (an emptied buffer would otherwise grow 5, 10, 20, 40).
  if (out.capacity() - at < 64) out.reserve(std::max(at + 64, 2 * out.capacity()));
  out.insert(out.end(), frame_header_bytes + 1, 0);
  codec::msgpack_writer w(out);
  write_body(w, m, fds);
  const std::size_t n = out.size() - at - frame_header_bytes;  // kind + body
  if (n > max_frame_bytes) {
    out.resize(at);
    codec::fail("message of " + std::to_string(n - 1) + " bytes exceeds the " +
                std::to_string(max_frame_bytes >> 20) + " MiB limit");
  }
  for (int i = 0; i < 4; ++i)
    out[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (24 - 8 * i));
  out[at + frame_header_bytes] = static_cast<std::uint8_t>(frame_kind::control);
}

envelope decode(std::span<const std::uint8_t> body) {
  const codec::body_shape shape = codec::check_body(body);
  if (!shape.is_map) codec::fail("message body is not a map");
  if (shape.type == nullptr) codec::fail("message lacks field 'type'");
  const auto* end = body.data() + body.size();
  codec::msgpack_reader r(shape.type, end);
  std::string_view type;
  if (!r.str(type)) codec::fail("field 'type' of a message must be a string");
  // The type first: an error about `fds` quotes it, and only a known one is one clean line.
  const std::size_t i = index_of_type(type);
  if (i == no_type) unknown_type(type);
  envelope e;
  if (shape.fds != nullptr) {
    r.seek(shape.fds);
    codec::read_value(r, e.fds, "fds", type, 0, 0);
  }
  r.seek(shape.first);
  readers[i](r, shape, e);
  check_fds(type, e.fds, max_fds[i]);
  return e;
}

envelope decode_reference(std::span<const std::uint8_t> body) {
  return decode(body);
}

}  // namespace pm::link
