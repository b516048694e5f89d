// A streaming JSON writer for what libpm prints (reports, maps, TF_CONFIG). It appends to one
// string and keeps only a small stack of open containers: unlike a DOM, nothing is left to
// destroy, so a failed allocation is a plain std::bad_alloc from an append and never the
// std::terminate of a DOM destructor that allocates (nlohmann::json's does; c_oom_test sweeps
// pm_map_json and pm_report_json through every allocation). Every scalar — string escapes,
// invalid UTF-8 as U+FFFD, numbers — is encoded by nlohmann::json itself, so the output is
// nlohmann's dump(indent) byte for byte (tests/unit/json_writer_test.cpp compares them) and the
// project has one JSON encoder; this class only lays out objects and arrays.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm {

class json_writer {
 public:
  /// indent < 0: compact (dump()); otherwise that many spaces per level (dump(indent)).
  explicit json_writer(int indent = -1) : indent_(indent) {}

  json_writer& begin_object() { return open('{'); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array() { return open('['); }
  json_writer& end_array() { return close(']'); }
  /// The next value's key (inside an object).
  json_writer& key(std::string_view k);

  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(bool b);
  json_writer& value(double d);
  template <std::integral T>
  requires(!std::same_as<T, bool>) json_writer& value(T n) {
    before_value();
    char buf[24];
    out_.append(buf, std::to_chars(buf, buf + sizeof buf, n).ptr);
    return *this;
  }
  json_writer& null();
  /// Its value, or null when empty.
  template <class T>
  json_writer& value(const std::optional<T>& v) {
    return v ? value(*v) : null();
  }

  /// key(k).value(v) in one call.
  template <class V>
  json_writer& member(std::string_view k, const V& v) {
    key(k);
    return value(v);
  }

  /// The document; the writer is empty afterwards.
  std::string take() { return std::move(out_); }

 private:
  json_writer& open(char c);
  json_writer& close(char c);
  void before_value();
  void newline(std::size_t depth);
  void string(std::string_view s);

  struct level {
    bool empty = true;
  };
  int indent_;
  std::string out_;
  std::vector<level> open_;
  bool after_key_ = false;
};

}  // namespace pm
