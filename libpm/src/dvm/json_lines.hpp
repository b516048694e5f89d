// The DVM's two channels (docs/dvm.md, "Channels"): a submitter with the DVM's server over its
// Unix socket, and the server with each host's daemon over ssh's (or a pipe's) stdio. Both carry
// one JSON object a line. A peer is trusted no further than the channel's own guard (the socket's
// owner check, the ssh session): what it sends is still bounded and checked, and a line that is
// not an object of the expected shape ends the channel with one line naming it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pm::dvm_parts {

/// The longest line either side accepts (a job's command line and its hosts fit many times).
inline constexpr std::size_t line_limit = 1 << 20;

/// Splits a byte stream into lines. Pure.
class line_buffer {
 public:
  /// Appends `bytes`; whole lines go to `lines` (without newline). False (and nothing kept) when
  /// a line grows past line_limit.
  bool append(std::string_view bytes, std::vector<std::string>& lines);

 private:
  std::string partial_;
};

/// `line` as a JSON object; nullopt (and `problem` set) when it is not one.
std::optional<nlohmann::json> parse_object(std::string_view line, std::string& problem);

/// One line: `doc` dumped (invalid UTF-8 replaced) and "\n".
std::string to_line(const nlohmann::json& doc);

/// doc[key] as a string / an unsigned number, or nullopt when absent or of another type.
std::optional<std::string> string_at(const nlohmann::json& doc, const char* key);
std::optional<std::uint64_t> number_at(const nlohmann::json& doc, const char* key);
/// doc[key] as a bool, or nullopt when absent or of another type (nlohmann's value() throws
/// on a wrong type, and a throw out of a channel's handler ended the whole DVM).
std::optional<bool> bool_at(const nlohmann::json& doc, const char* key);
/// doc[key] as a list of strings (each at most 64 KiB), or nullopt.
std::optional<std::vector<std::string>> strings_at(const nlohmann::json& doc, const char* key);

}  // namespace pm::dvm_parts
