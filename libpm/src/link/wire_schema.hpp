// The vocabulary in which every agent link message declares its wire form, once
// (docs/agent-link.md, "How to add a message"). A message struct says, in a static constexpr
// `wire()`:
//
//   static constexpr auto wire() {
//     return wire_message("started", sender::agent, field("rank", &started::rank),
//                         field("pid", &started::pid))
//         .with_fds(2);
//   }
//
// and the codec (link/codec/) derives from that one list its encoder, its decoder, its name, who
// may send it and how many descriptors may travel with it; tests/fuzz derives its dictionary from
// it. A struct nested in a message (an app, a rank) says `return wire_map(field(...), ...);`.
// An optional `static void check(const T&, std::string_view type)` refuses decoded values the
// types alone allow (an empty argv): it runs after the struct's fields, and throws.
//
// This header is data only: what a field is called on the wire and where it lives. How it is
// written and read is the codec's business.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace pm::link {

/// The highest signal number a message may name.
inline constexpr int max_signal = 64;

/// Which side may send a message.
enum class sender : std::uint8_t { launcher, agent, either };

/// A member of struct M stored under `key`. Integers narrower than 32 bits and `int` carry the
/// range a peer's value must be in (`lo`..`hi`); wider ones take their type's range.
template <class M, class T>
struct field_desc {
  std::string_view key;
  T M::*member;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  static constexpr std::size_t key_count = 1;
  constexpr std::string_view key_at(std::size_t) const { return key; }
};

template <class M, class T>
constexpr field_desc<M, T> field(std::string_view key, T M::*member) {
  // A narrow or signed int has no obvious range on the wire: say it (field(key, member, lo, hi)).
  static_assert(!std::is_same_v<T, int> && !std::is_same_v<T, std::uint16_t> &&
                    !std::is_same_v<T, std::uint8_t>,
                "give this field its range: field(key, member, lo, hi)");
  return {key, member};
}
template <class M, class T>
constexpr field_desc<M, T> field(std::string_view key, T M::*member, std::int64_t lo,
                                 std::int64_t hi) {
  return {key, member, lo, hi};
}

/// An exit_status as two keys, exactly one present: `code` (0..255) when the process exited,
/// `signal` (1..64) when a signal ended it.
template <class M, class S>
struct exit_status_desc {
  S M::*member;
  static constexpr std::size_t key_count = 2;
  constexpr std::string_view key_at(std::size_t i) const { return i == 0 ? "code" : "signal"; }
};
template <class M, class S>
constexpr exit_status_desc<M, S> exit_status_field(S M::*member) {
  return {member};
}

/// Two fields that travel together or not at all: both are written when `first` is not empty;
/// a peer that sends `first` must send `second` too.
template <class A, class B>
struct together_desc {
  A first;
  B second;
  static constexpr std::size_t key_count = 2;
  constexpr std::string_view key_at(std::size_t i) const { return i == 0 ? first.key : second.key; }
};
template <class A, class B>
constexpr together_desc<A, B> together_if_set(A first, B second) {
  return {first, second};
}

/// A nested struct's fields, in the order they are checked when read.
template <class... F>
struct map_schema {
  std::tuple<F...> fields;
};
template <class... F>
constexpr map_schema<F...> wire_map(F... fields) {
  return {std::tuple<F...>{fields...}};
}

/// A message: its wire name (the `type` key), who may send it, how many descriptors may travel
/// with it over a local socket, and its fields in the order they are checked when read (the
/// encoder writes them sorted by key, as a std::map would).
template <class... F>
struct message_schema {
  std::string_view name;
  link::sender from;
  std::tuple<F...> fields;
  std::uint32_t max_fds = 0;
  constexpr message_schema with_fds(std::uint32_t n) const {
    message_schema s = *this;
    s.max_fds = n;
    return s;
  }
};
template <class... F>
constexpr message_schema<F...> wire_message(std::string_view name, sender from, F... fields) {
  return {name, from, std::tuple<F...>{fields...}};
}

/// An enum that travels as a string: specialise with `to(E)` and `from(string_view)` (nullopt for
/// a name this side does not know: "'notify' message has an unknown kind").
template <class E>
struct wire_text;

/// An enum that travels as a number in a field's range: specialise with `to(E)` and `from(int)`.
template <class E>
struct wire_number;

}  // namespace pm::link
