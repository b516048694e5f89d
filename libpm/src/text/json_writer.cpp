#include "text/json_writer.hpp"

#include <nlohmann/json.hpp>
#include <string>

namespace pm {

namespace {

// Scalars are encoded by nlohmann::json, the project's one JSON library: escapes, invalid UTF-8
// as U+FFFD ("replace"), the shortest digits that read back for a double. This writer only lays
// out containers. A scalar json value owns no children, so destroying it never allocates (the
// reason the documents themselves are not nlohmann DOMs: see json_writer.hpp).
void append_scalar(std::string& out, const nlohmann::json& v) {
  out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

json_writer& json_writer::key(std::string_view k) {
  auto& l = open_.back();
  if (!l.empty) out_ += ',';
  l.empty = false;
  newline(open_.size());
  string(k);
  out_ += indent_ >= 0 ? ": " : ":";
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  before_value();
  string(s);
  return *this;
}

json_writer& json_writer::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(double d) {
  before_value();
  append_scalar(out_, nlohmann::json(d));  // non-finite: null, as nlohmann writes it
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

json_writer& json_writer::open(char c) {
  before_value();
  out_ += c;
  open_.push_back(level{});
  return *this;
}

json_writer& json_writer::close(char c) {
  const bool empty = open_.back().empty;
  open_.pop_back();
  if (!empty) newline(open_.size());
  out_ += c;
  return *this;
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (open_.empty()) return;
  auto& l = open_.back();
  if (!l.empty) out_ += ',';
  l.empty = false;
  newline(open_.size());
}

void json_writer::newline(std::size_t depth) {
  if (indent_ < 0) return;
  out_ += '\n';
  out_.append(depth * static_cast<std::size_t>(indent_), ' ');
}

void json_writer::string(std::string_view s) {
  append_scalar(out_, nlohmann::json(std::string(s)));
}

}  // namespace pm
