// The option values of pm/host_binding.hpp, spelled as Open MPI spells them (case-insensitive,
// "socket" for package, ":"-separated modifiers).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"

namespace pm::topo {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<std::string> parts_of(std::string_view value) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const auto colon = value.find(':', start);
    parts.push_back(
        lower(value.substr(start, colon == std::string_view::npos ? colon : colon - start)));
    if (colon == std::string_view::npos) return parts;
    start = colon + 1;
  }
}

[[noreturn]] void bad(std::string_view option, std::string_view value, const std::string& why) {
  throw pm::error(errc::usage, std::string(option) + " " + std::string(value) + ": " + why);
}

std::optional<object> object_named(const std::string& s) {
  if (s == "hwthread") return object::hwthread;
  if (s == "core") return object::core;
  if (s == "l3cache") return object::l3cache;
  if (s == "numa") return object::numa;
  if (s == "package" || s == "socket") return object::package;
  if (s == "node") return object::node;
  if (s == "slot") return object::slot;
  return std::nullopt;
}

std::uint32_t positive(std::string_view option, std::string_view value, std::string_view text,
                       const char* what) {
  std::uint32_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n == 0) {
    bad(option, value,
        std::string(what) + " must be a positive number, not '" + std::string(text) + "'");
  }
  return n;
}

/// Handles a modifier common to --map-by forms; false when it is not one.
bool map_modifier(map_option& m, std::string_view value, const std::string& mod) {
  if (mod.rfind("pe=", 0) == 0) {
    m.pe = positive("--map-by", value, std::string_view(mod).substr(3), "pe");
    return true;
  }
  if (mod == "oversubscribe") {
    m.oversubscribe = true;
    return true;
  }
  if (mod == "nooversubscribe") {
    m.oversubscribe = false;
    return true;
  }
  return false;
}

}  // namespace

std::string_view to_string(object o) noexcept {
  switch (o) {
    case object::hwthread:
      return "hwthread";
    case object::core:
      return "core";
    case object::l3cache:
      return "l3cache";
    case object::numa:
      return "numa";
    case object::package:
      return "package";
    case object::node:
      return "node";
    case object::slot:
      break;
  }
  return "slot";
}

map_option parse_map_by(std::string_view value) {
  const auto parts = parts_of(value);
  map_option m;
  std::size_t next = 1;
  if (parts[0] == "ppr") {
    if (parts.size() < 3) bad("--map-by", value, "expected ppr:N:OBJECT (e.g. ppr:2:numa)");
    m.ppr = positive("--map-by", value, parts[1], "the N of ppr:N:OBJECT");
    const auto o = object_named(parts[2]);
    if (!o || *o == object::slot) {
      bad("--map-by", value,
          "unknown object '" + parts[2] + "' (hwthread, core, l3cache, numa, package, node)");
    }
    m.by = *o;
    next = 3;
  } else {
    const auto o = object_named(parts[0]);
    if (!o) {
      bad("--map-by", value,
          "unknown policy '" + parts[0] +
              "' (slot, node, core, hwthread, l3cache, numa, package, ppr:N:OBJECT)");
    }
    m.by = *o;
  }
  for (; next < parts.size(); ++next) {
    if (!map_modifier(m, value, parts[next])) {
      bad("--map-by", value,
          "unknown modifier '" + parts[next] + "' (pe=M, oversubscribe, nooversubscribe)");
    }
  }
  return m;
}

bind_option parse_bind_to(std::string_view value) {
  const auto parts = parts_of(value);
  bind_option b;
  if (parts[0] != "none") {
    const auto o = object_named(parts[0]);
    if (!o || *o == object::slot || *o == object::node) {
      bad("--bind-to", value,
          "unknown object '" + parts[0] + "' (none, hwthread, core, l3cache, numa, package)");
    }
    b.to = *o;
  }
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "overload-allowed") {
      b.overload_allowed = true;
    } else if (parts[i] != "if-supported") {  // Open MPI's: binding is always supported here
      bad("--bind-to", value,
          "unknown modifier '" + parts[i] + "' (overload-allowed, if-supported)");
    }
  }
  return b;
}

object parse_rank_by(std::string_view value) {
  const auto parts = parts_of(value);
  const auto o = object_named(parts[0]);
  if (!o || parts.size() > 1) {
    bad("--rank-by", value, "expected one of slot, node, hwthread, core, l3cache, numa, package");
  }
  return *o;
}

gpu_option parse_gpus_per_rank(std::string_view value) {
  const auto parts = parts_of(value);
  gpu_option g;
  g.per_rank = positive("--gpus-per-rank", value, parts[0], "the GPU count");
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "shared") {
      g.shared = true;
    } else if (parts[i] == "reorder") {
      g.reorder = true;
    } else {
      bad("--gpus-per-rank", value, "unknown modifier '" + parts[i] + "' (shared, reorder)");
    }
  }
  return g;
}

std::uint32_t parse_cpus_per_rank(std::string_view value) {
  return positive("--cpus-per-rank", value, value, "the cpu count");
}

void check_cpus_per_rank(const binding_policy& policy) {
  if (policy.cpus_per_rank == 0 || policy.map.pe == 0 || policy.cpus_per_rank == policy.map.pe) {
    return;
  }
  throw error(errc::usage, "--cpus-per-rank " + std::to_string(policy.cpus_per_rank) +
                               " and --map-by ...:pe=" + std::to_string(policy.map.pe) +
                               " ask different numbers of cpus per rank: give one");
}

std::string to_string(const map_option& m) {
  std::string out;
  if (m.ppr > 0) out = "ppr:" + std::to_string(m.ppr) + ":";
  out += to_string(m.by);
  if (m.pe > 0) out += ":pe=" + std::to_string(m.pe);
  if (m.oversubscribe) out += *m.oversubscribe ? ":oversubscribe" : ":nooversubscribe";
  return out;
}

std::string to_string(const bind_option& b) {
  std::string out(b.to ? to_string(*b.to) : "none");
  if (b.overload_allowed) out += ":overload-allowed";
  return out;
}

std::string to_string(const gpu_option& g) {
  auto out = std::to_string(g.per_rank);
  if (g.shared) out += ":shared";
  if (g.reorder) out += ":reorder";
  return out;
}

}  // namespace pm::topo
