// An independent judge of MessagePack: nlohmann's reader, which the agent link's own reader
// (link/codec/msgpack_reader) must agree with on which bodies are well-formed. Used by
// fuzz_link_message and link_messages_test.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace pm::fuzz {

// Reads every value and keeps none; refuses nesting deeper than `max_depth` levels before
// descending (a hostile body must not exhaust the stack).
class msgpack_judge {
 public:
  explicit msgpack_judge(int max_depth) : max_depth_(max_depth) {}
  using json = nlohmann::json;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) { return ++depth_ <= max_depth_; }
  bool key(std::string&) { return true; }
  bool end_object() { return --depth_ >= 0; }
  bool start_array(std::size_t) { return ++depth_ <= max_depth_; }
  bool end_array() { return --depth_ >= 0; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  int max_depth_;
  int depth_ = 0;
};

/// Whether `body` is one MessagePack value, nothing after it, nested at most `max_depth` levels.
inline bool well_formed_msgpack(std::span<const std::uint8_t> body, int max_depth) {
  msgpack_judge judge(max_depth);
  try {
    return nlohmann::json::sax_parse(body.begin(), body.end(), &judge,
                                     nlohmann::json::input_format_t::msgpack, true);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace pm::fuzz
