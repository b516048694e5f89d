#include "dvm/json_lines.hpp"

namespace pm::dvm_parts {

bool line_buffer::append(std::string_view bytes, std::vector<std::string>& lines) {
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    const auto take = nl == std::string_view::npos ? bytes.size() : nl;
    if (partial_.size() + take > line_limit) {
      partial_.clear();
      return false;
    }
    partial_.append(bytes.substr(0, take));
    if (nl == std::string_view::npos) break;
    lines.push_back(std::move(partial_));
    partial_.clear();
    bytes.remove_prefix(nl + 1);
  }
  return true;
}

std::optional<nlohmann::json> parse_object(std::string_view line, std::string& problem) {
  auto doc = nlohmann::json::parse(line, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    problem = "a line that is not a JSON object";
    return std::nullopt;
  }
  return doc;
}

std::string to_line(const nlohmann::json& doc) {
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<std::string> string_at(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<std::uint64_t> number_at(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}

std::optional<bool> bool_at(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::optional<std::vector<std::string>> strings_at(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& e : *it) {
    if (!e.is_string() || e.get_ref<const std::string&>().size() > (1u << 16)) return std::nullopt;
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace pm::dvm_parts
