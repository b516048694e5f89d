// The generic codec: writes and reads any struct that declares its wire form (wire_schema.hpp),
// field by field, from that one declaration. Encoding writes a map whose keys are sorted at
// compile time (plus `type` and `fds` for a message); decoding reads a map in the order its
// fields arrive, takes the keys it knows and skips the others, then checks that every required
// key came and runs the struct's own check. Errors are one line naming the field and the message
// (`field 'rank' of a 'started' message must be an unsigned 32-bit integer`).
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "link/codec/msgpack_reader.hpp"
#include "link/codec/msgpack_writer.hpp"
#include "link/wire_schema.hpp"
#include "pm/exit_status.hpp"

namespace pm::link::codec {

// ---- what a struct declared ----

template <class T>
concept has_wire = requires {
  T::wire();
};
template <class T>
inline constexpr auto schema_of = T::wire();
template <class T>
using fields_of = decltype(schema_of<T>.fields);
template <class T>
inline constexpr std::size_t field_count = std::tuple_size_v<fields_of<T>>;

template <class T>
struct is_message_schema : std::false_type {};
template <class... F>
struct is_message_schema<message_schema<F...>> : std::true_type {};
template <class T>
inline constexpr bool is_message =
    is_message_schema<std::remove_cv_t<decltype(schema_of<T>)>>::value;

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class E>
concept text_enum = requires(E e, std::string_view s) {
  wire_text<E>::to(e);
  wire_text<E>::from(s);
};
template <class E>
concept number_enum = requires(E e, std::int64_t n) {
  wire_number<E>::to(e);
  wire_number<E>::from(n);
};

// One key of a struct: which of its descriptors owns it, and which of that descriptor's keys it
// is. `type` and `fds` (a message's) are owned by none.
struct key_slot {
  std::string_view key;
  std::size_t field = 0;
  std::size_t sub = 0;
};
inline constexpr std::size_t type_slot = std::numeric_limits<std::size_t>::max();
inline constexpr std::size_t fds_slot = type_slot - 1;

template <class T>
constexpr std::size_t key_count() {
  return std::apply([](const auto&... d) { return (std::size_t{0} + ... + d.key_count); },
                    schema_of<T>.fields);
}

// Every key of T in declaration order (what the decoder matches against).
template <class T>
constexpr auto declared_keys() {
  std::array<key_slot, key_count<T>()> keys{};
  std::size_t at = 0, field = 0;
  std::apply(
      [&](const auto&... d) {
        (
            [&](const auto& one) {
              for (std::size_t s = 0; s < one.key_count; ++s)
                keys[at++] = {one.key_at(s), field, s};
              ++field;
            }(d),
            ...);
      },
      schema_of<T>.fields);
  return keys;
}
template <class T>
inline constexpr auto keys_of = declared_keys<T>();

// Every key T writes, `type` and `fds` included for a message, sorted (the encoder's order).
template <class T>
constexpr auto sorted_keys() {
  constexpr std::size_t extra = is_message<T> ? 2 : 0;
  std::array<key_slot, key_count<T>() + extra> keys{};
  const auto declared = declared_keys<T>();
  std::copy(declared.begin(), declared.end(), keys.begin());
  if constexpr (extra == 2) {
    keys[keys.size() - 2] = {"type", type_slot, 0};
    keys[keys.size() - 1] = {"fds", fds_slot, 0};
  }
  std::sort(keys.begin(), keys.end(),
            [](const key_slot& a, const key_slot& b) { return a.key < b.key; });
  return keys;
}
template <class T>
inline constexpr auto sorted_keys_of = sorted_keys<T>();

template <class T>
constexpr bool keys_are_unique() {
  const auto keys = sorted_keys<T>();
  for (std::size_t i = 1; i < keys.size(); ++i) {
    if (keys[i - 1].key == keys[i].key) return false;
  }
  return true;
}

// ---- errors ----

[[noreturn]] void fail(const std::string& what);
[[noreturn]] void wrong(std::string_view key, std::string_view type, std::string_view want);
[[noreturn]] void lacks(std::string_view key, std::string_view type);
[[noreturn]] void unknown_name(std::string_view key, std::string_view type);

// ---- encoding ----

template <class T>
void write_map(msgpack_writer& w, const T& s, std::string_view type = {}, std::uint32_t fds = 0);

template <class D, class T>
void write_value(msgpack_writer& w, const D& d, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    w.boolean(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    w.str(v);
  } else if constexpr (text_enum<T>) {
    w.str(wire_text<T>::to(v));
  } else if constexpr (number_enum<T>) {
    w.sint(wire_number<T>::to(v));
  } else if constexpr (std::is_unsigned_v<T>) {
    w.uint(v);
  } else if constexpr (std::is_integral_v<T>) {
    w.sint(v);
  } else if constexpr (is_vector<T>::value) {
    w.array(v.size());
    for (const auto& x : v) write_value(w, d, x);
  } else if constexpr (is_optional<T>::value) {
    write_value(w, d, *v);
  } else {
    static_assert(has_wire<T>, "a field's type is a scalar, a vector, or a struct with wire()");
    write_map(w, v);
  }
}

template <class M, class T>
constexpr bool present(const field_desc<M, T>& d, const M& s) {
  if constexpr (is_optional<T>::value) {
    return (s.*d.member).has_value();
  } else {
    return true;
  }
}
template <class M, class S>
constexpr bool present(const exit_status_desc<M, S>&, const M&) {
  return true;
}
template <class A, class B, class M>
constexpr bool present(const together_desc<A, B>& d, const M& s) {
  return !(s.*d.first.member).empty();
}

template <class M, class T>
std::size_t keys_present(const field_desc<M, T>& d, const M& s) {
  return present(d, s) ? 1 : 0;
}
template <class M, class S>
std::size_t keys_present(const exit_status_desc<M, S>&, const M&) {
  return 1;
}
template <class A, class B, class M>
std::size_t keys_present(const together_desc<A, B>& d, const M& s) {
  return present(d, s) ? 2 : 0;
}

template <std::size_t Sub, class M, class T>
void write_key(msgpack_writer& w, const field_desc<M, T>& d, const M& s) {
  if (!present(d, s)) return;
  w.str(d.key);
  write_value(w, d, s.*d.member);
}
template <std::size_t Sub, class M, class S>
void write_key(msgpack_writer& w, const exit_status_desc<M, S>& d, const M& s) {
  const exit_status& st = s.*d.member;
  if (st.is_signal() != (Sub == 1)) return;
  w.str(d.key_at(Sub));
  w.sint(Sub == 1 ? st.signal() : st.code());
}
template <std::size_t Sub, class A, class B, class M>
void write_key(msgpack_writer& w, const together_desc<A, B>& d, const M& s) {
  if (!present(d, s)) return;
  if constexpr (Sub == 0) {
    write_key<0>(w, d.first, s);
  } else {
    write_key<0>(w, d.second, s);
  }
}

template <class T>
void write_map(msgpack_writer& w, const T& s, std::string_view type, std::uint32_t fds) {
  constexpr auto& sch = schema_of<T>;
  static_assert(keys_are_unique<T>(), "a key appears twice in a wire form");
  std::size_t n = std::apply(
      [&](const auto&... d) { return (std::size_t{0} + ... + keys_present(d, s)); }, sch.fields);
  if constexpr (is_message<T>) n += 1 + (fds > 0 ? 1 : 0);
  w.map(n);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr key_slot k = sorted_keys_of<T>[I];
          if constexpr (k.field == type_slot) {
            w.str("type");
            w.str(type);
          } else if constexpr (k.field == fds_slot) {
            if (fds > 0) {
              w.str("fds");
              w.uint(fds);
            }
          } else {
            write_key<k.sub>(w, std::get<k.field>(sch.fields), s);
          }
        }(),
        ...);
  }
  (std::make_index_sequence<sorted_keys_of<T>.size()>{});
}

// ---- decoding ----

template <class T>
void read_map(msgpack_reader& r, std::size_t entries, T& s, std::string_view type,
              const listed_field* listed = nullptr);

template <class T>
std::string_view want_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return "a boolean";
  } else if constexpr (std::is_same_v<T, std::string> || text_enum<T>) {
    return "a string";
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
    return "an unsigned 32-bit integer";
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return "an unsigned 64-bit integer";
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return "an array of strings";
  } else if constexpr (std::is_same_v<T, std::vector<std::uint32_t>>) {
    return "an array of unsigned 32-bit integers";
  } else if constexpr (is_vector<T>::value) {
    return "an array of maps";
  } else {
    return "a map";
  }
}

// A ranged integer's complaint: "an integer from 0 to 64".
[[noreturn]] void out_of_range(std::string_view key, std::string_view type, std::int64_t lo,
                               std::int64_t hi);

// One value into `v`; `key` and `type` name it in an error. `lo`..`hi`: a ranged integer's range.
template <class T>
[[gnu::always_inline]] inline void read_value(msgpack_reader& r, T& v, std::string_view key,
                                              std::string_view type, std::int64_t lo,
                                              std::int64_t hi) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!r.boolean(v)) wrong(key, type, want_of<T>());
  } else if constexpr (std::is_same_v<T, std::string>) {
    std::string_view s;
    if (!r.str(s)) wrong(key, type, want_of<T>());
    v.assign(s);
  } else if constexpr (text_enum<T>) {
    std::string_view s;
    if (!r.str(s)) wrong(key, type, want_of<T>());
    const auto e = wire_text<T>::from(s);
    if (!e) unknown_name(key, type);
    v = *e;
  } else if constexpr (std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t>) {
    std::uint64_t n = 0;
    bool neg = false;
    if (!r.integer(n, neg) || neg || n > std::numeric_limits<T>::max()) {
      wrong(key, type, want_of<T>());
    }
    v = static_cast<T>(n);
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    std::uint64_t n = 0;
    bool neg = false;
    if (!r.integer(n, neg)) wrong(key, type, "an integer");
    if (!neg && n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      wrong(key, type, "a 64-bit integer");
    }
    v = static_cast<std::int64_t>(n);
  } else if constexpr (std::is_integral_v<T> || number_enum<T>) {
    std::uint64_t n = 0;
    bool neg = false;
    if (!r.integer(n, neg)) out_of_range(key, type, lo, hi);
    const auto x = static_cast<std::int64_t>(n);
    if ((!neg && n > static_cast<std::uint64_t>(hi)) || x < lo || x > hi) {
      out_of_range(key, type, lo, hi);
    }
    if constexpr (number_enum<T>) {
      v = *wire_number<T>::from(x);
    } else {
      v = static_cast<T>(x);
    }
  } else if constexpr (is_vector<T>::value) {
    std::size_t n = 0;
    if (!r.array(n)) wrong(key, type, want_of<T>());
    v.clear();
    // Capped: a hostile count (up to the body's size) must not allocate ahead of its elements.
    v.reserve(std::min<std::size_t>(n, 1024));
    for (std::size_t i = 0; i < n; ++i) {
      using E = typename T::value_type;
      if constexpr (std::is_same_v<E, std::string>) {
        std::string_view s;
        if (!r.str(s)) wrong(key, type, want_of<T>());
        v.emplace_back(s);
      } else if constexpr (has_wire<E>) {
        std::size_t entries = 0;
        if (!r.map(entries)) wrong(key, type, want_of<T>());
        read_map(r, entries, v.emplace_back(), type);
      } else {
        std::uint64_t x = 0;
        bool neg = false;
        if (!r.integer(x, neg) || neg || x > std::numeric_limits<E>::max()) {
          wrong(key, type, want_of<T>());
        }
        v.push_back(static_cast<E>(x));
      }
    }
  } else if constexpr (is_optional<T>::value) {
    std::size_t entries = 0;
    if (!r.map(entries)) wrong(key, type, want_of<T>());
    read_map(r, entries, v.emplace(), type);
  } else {
    std::size_t entries = 0;
    if (!r.map(entries)) wrong(key, type, want_of<T>());
    read_map(r, entries, v, type);
  }
}

template <std::size_t Sub, class M, class T>
void read_key(msgpack_reader& r, const field_desc<M, T>& d, M& s, std::string_view type) {
  read_value(r, s.*d.member, d.key, type, d.lo, d.hi);
}
template <std::size_t Sub, class M, class S>
void read_key(msgpack_reader& r, const exit_status_desc<M, S>& d, M& s, std::string_view type) {
  int x = 0;
  if constexpr (Sub == 0) {
    read_value(r, x, d.key_at(0), type, 0, 255);
    s.*d.member = exit_status::exited(x);
  } else {
    read_value(r, x, d.key_at(1), type, 1, max_signal);
    s.*d.member = exit_status::signaled(x);
  }
}
template <std::size_t Sub, class A, class B, class M>
void read_key(msgpack_reader& r, const together_desc<A, B>& d, M& s, std::string_view type) {
  if constexpr (Sub == 0) {
    read_key<0>(r, d.first, s, type);
  } else {
    read_key<0>(r, d.second, s, type);
  }
}

// After the map: what came (`seen`, one bit per declared key from `at`) must be enough.
template <class M, class T>
void finish(const field_desc<M, T>& d, M& s, std::uint64_t seen, std::size_t at,
            std::string_view type) {
  if ((seen >> at & 1) != 0) return;
  if constexpr (is_optional<T>::value) {
    (s.*d.member).reset();
  } else {
    lacks(d.key, type);
  }
}
template <class M, class S>
void finish(const exit_status_desc<M, S>&, M&, std::uint64_t seen, std::size_t at,
            std::string_view type) {
  if ((seen >> at & 1) == (seen >> (at + 1) & 1)) {
    fail("'" + std::string(type) + "' message needs exactly one of 'code' and 'signal'");
  }
}
template <class A, class B, class M>
void finish(const together_desc<A, B>& d, M& s, std::uint64_t seen, std::size_t at,
            std::string_view type) {
  if ((seen >> at & 1) != 0 && (seen >> (at + 1) & 1) == 0) lacks(d.second.key, type);
  // An empty first is no first: written back, neither key would travel.
  if ((s.*d.first.member).empty()) s.*d.second.member = {};
}

// The index into keys_of<T> of `k`, or its size when T has no such key.
template <class T>
std::size_t key_index(std::string_view k) {
  constexpr auto& keys = keys_of<T>;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (same_text(keys[i].key, k)) return i;
  }
  return keys.size();
}

template <class T>
void read_key_at(msgpack_reader& r, std::size_t index, T& s, std::string_view type) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (void)((index == I ? (read_key<keys_of<T>[I].sub>(
                              r, std::get<keys_of<T>[I].field>(schema_of<T>.fields), s, type),
                          true)
                       : false) ||
           ...);
  }
  (std::make_index_sequence<keys_of<T>.size()>{});
}

// Calls f(key) for each of a map's `entries` fields with the reader at its value, which f reads
// or leaves: from `listed` (check_body()'s table of the top-level map) when it holds them all,
// else from the reader at the map's first key.
template <class F>
void for_each_field(msgpack_reader& r, std::size_t entries, const listed_field* listed, F&& f) {
  if (listed != nullptr) {
    for (std::size_t i = 0; i < entries; ++i) {
      r.seek(listed[i].value);
      f(listed[i].key_view());
    }
    return;
  }
  for (std::size_t i = 0; i < entries; ++i) {
    std::string_view k;
    r.str(k);  // check_body() saw a string key here
    const auto* value = r.pos();
    f(k);
    if (r.pos() == value) r.skip();
  }
}

// Reads `entries` fields of a map into `s` (the reader at its first key; `listed`: see
// for_each_field).
template <class T>
void read_map(msgpack_reader& r, std::size_t entries, T& s, std::string_view type,
              const listed_field* listed) {
  static_assert(keys_of<T>.size() <= 64, "a struct of more than 64 keys");
  if constexpr (requires { T::read_only_first(s); }) {
    // The first field decides whether the others are read at all (a hello of another version).
    const auto* start = r.pos();
    bool found = false;
    for_each_field(r, entries, listed, [&](std::string_view k) {
      if (key_index<T>(k) == 0) {
        read_key_at(r, 0, s, type);
        found = true;
      }
    });
    if (!found) lacks(keys_of<T>[0].key, type);
    if (T::read_only_first(s)) return;
    r.seek(start);
  }
  std::uint64_t seen = 0;
  for_each_field(r, entries, listed, [&](std::string_view k) {
    const std::size_t at = key_index<T>(k);
    if (at != keys_of<T>.size()) {
      read_key_at(r, at, s, type);
      seen |= std::uint64_t{1} << at;
    }
  });
  std::size_t at = 0;
  std::apply(
      [&](const auto&... d) {
        (
            [&](const auto& one) {
              finish(one, s, seen, at, type);
              at += one.key_count;
            }(d),
            ...);
      },
      schema_of<T>.fields);
  if constexpr (requires { T::check(s, type); }) T::check(s, type);
}

}  // namespace pm::link::codec
