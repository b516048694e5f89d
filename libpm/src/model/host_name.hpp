// How host names compare: addresses exactly, names by their short form. Header-only so that the
// unit tests can use the pure pieces without link-time visibility concerns.
#pragma once

#include <arpa/inet.h>

#include <string>
#include <string_view>
#include <vector>

namespace pm::model {

/// True for an IPv4 or IPv6 address in text form ("10.0.0.2", "::1"); false for any name,
/// including names made of hex digits and dots ("cafe.be").
inline bool is_ip_address(std::string_view name) {
  if (name.empty() || name.size() >= 64) return false;
  const std::string s(name);
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

/// "node1.example.com" -> "node1"; addresses are returned whole (10.0.0.2 is not "10").
inline std::string_view short_name(std::string_view name) {
  return is_ip_address(name) ? name : name.substr(0, name.find('.'));
}

/// Two spellings of one host: equal, or (neither an address) the same short name.
inline bool same_host(std::string_view a, std::string_view b) {
  if (a == b) return true;
  if (is_ip_address(a) || is_ip_address(b)) return false;
  return short_name(a) == short_name(b);
}

/// A key that is equal for two names exactly when same_host() says they are one host, for hash
/// lookups (an address keeps its whole text and a marker no name can hold).
inline std::string host_key(std::string_view name) {
  if (is_ip_address(name)) return "@" + std::string(name);
  return std::string(name.substr(0, name.find('.')));
}

/// The names /etc/hosts gives this machine: every name on a line that names `hostname` (or its
/// short form). The first name of such a line is what getaddrinfo(AI_CANONNAME) answers from the
/// files backend, i.e. the FQDN on a typical cluster ("10.0.0.5 node1.example.com node1").
/// Reading the file ourselves guarantees no DNS query on the launch path.
inline std::vector<std::string> hosts_file_names(std::string_view text, std::string_view hostname) {
  std::vector<std::string> out;
  if (hostname.empty()) return out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    auto line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> fields;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.size() < 2) continue;  // an address and at least one name
    bool names_me = false;
    for (std::size_t f = 1; f < fields.size(); ++f) {
      if (same_host(fields[f], hostname)) names_me = true;
    }
    if (!names_me) continue;
    for (std::size_t f = 1; f < fields.size(); ++f) {
      bool seen = fields[f] == hostname;
      for (const auto& o : out) seen = seen || o == fields[f];
      if (!seen) out.emplace_back(fields[f]);
    }
  }
  return out;
}

}  // namespace pm::model
