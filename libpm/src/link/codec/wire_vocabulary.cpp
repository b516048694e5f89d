#include "link/codec/wire_vocabulary.hpp"

#include <algorithm>
#include <variant>

#include "link/codec/wire_codec.hpp"
#include "link/messages.hpp"

namespace pm::link::codec {

namespace {

template <class T>
void add_words_of(std::vector<std::string>& out);

// The words a value of type T brings: a nested struct's keys, an enum's names.
template <class T>
void add_type_words(std::vector<std::string>& out) {
  if constexpr (is_vector<T>::value || is_optional<T>::value) {
    add_type_words<typename T::value_type>(out);
  } else if constexpr (has_wire<T>) {
    add_words_of<T>(out);
  } else if constexpr (text_enum<T>) {
    // Every value whose name reads back as itself (an enum has fewer than 256 values here).
    for (int i = 0; i < 256; ++i) {
      const auto e = static_cast<T>(i);
      const auto name = wire_text<T>::to(e);
      if (wire_text<T>::from(name) == e) out.emplace_back(name);
    }
  }
}

template <class M, class T>
void add_field_words(std::vector<std::string>& out, const field_desc<M, T>&) {
  add_type_words<T>(out);
}
template <class D>
void add_field_words(std::vector<std::string>&, const D&) {}

template <class T>
void add_words_of(std::vector<std::string>& out) {
  for (const auto& k : keys_of<T>) out.emplace_back(k.key);
  std::apply([&](const auto&... d) { (add_field_words(out, d), ...); }, schema_of<T>.fields);
}

}  // namespace

std::vector<std::string> wire_vocabulary() {
  std::vector<std::string> out{"type", "fds"};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((out.emplace_back(schema_of<std::variant_alternative_t<I, message>>.name),
      add_words_of<std::variant_alternative_t<I, message>>(out)),
     ...);
  }
  (std::make_index_sequence<std::variant_size_v<message>>{});
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace pm::link::codec
