// The summary's one-line text form (pm/topology.hpp), version 1:
//
//   pmtopo1;p=2;l=2;n=0-1;c=8*0.0.0,8*1.1.1;u=16*2;o=0-15|16-31;g=...;i=...
//
//   p  packages            l  L3 caches            n  NUMA nodes' OS indexes (a range list)
//   c  cores, as runs COUNT*PACKAGE.NUMA.L3 ('_' for none)
//   u  PUs per core, as runs COUNT*PUS
//   o  PU OS indexes by column: column t lists the t-th PU of every core that has one, in core
//      order, as a range list; columns are separated by '|'. Threads are usually numbered
//      core after core per column, so a 2-socket SMT node is "0-15|16-31".
//   g  GPUs: VENDOR/PCI/NUMA/PACKAGE/UUID, comma-separated (the index is the order)
//   i  NICs: KIND/NAME/NETDEV/RDMA/NUMA/PACKAGE, comma-separated
//
// Strings escape every byte outside [A-Za-z0-9._:-] as %XX. Unknown fields are skipped, so a
// later version may add some; a reader of this version refuses a version it does not know.
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "pm/error.hpp"
#include "pm/host_binding.hpp"
#include "pm/topology.hpp"

namespace pm::topo {

namespace {

constexpr std::string_view magic = "pmtopo1";
// Limits on what another host may make us allocate: far beyond any machine.
constexpr std::uint64_t max_cores = 1u << 20;
constexpr std::uint64_t max_pus = 1u << 22;
constexpr std::size_t max_devices = 1u << 12;

void put_number(std::string& out, std::uint32_t v) {
  if (v == none) {
    out += '_';
  } else {
    out += std::to_string(v);
  }
}

bool safe_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

void put_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  for (char c : s) {
    if (safe_char(c)) {
      out += c;
    } else {
      const auto b = static_cast<unsigned char>(c);
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
}

[[noreturn]] void malformed(std::string_view field, const std::string& why) {
  throw pm::error(errc::parse, "host topology text, field '" + std::string(field) + "': " + why);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  if (s.empty()) return parts;
  std::size_t start = 0;
  for (;;) {
    const auto at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::uint32_t read_number(std::string_view field, std::string_view s, bool none_allowed = false) {
  if (none_allowed && s == "_") return none;
  std::uint32_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v == none) {
    malformed(field, "'" + std::string(s) + "' is not a number");
  }
  return v;
}

std::string read_string(std::string_view field, std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto hexval = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    malformed(field, "bad escape in '" + std::string(s) + "'");
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) malformed(field, "cut escape in '" + std::string(s) + "'");
      out += static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else if (safe_char(s[i])) {
      out += s[i];
    } else {
      malformed(field, "unescaped byte in '" + std::string(s) + "'");
    }
  }
  return out;
}

std::vector<std::uint32_t> read_ranges(std::string_view field, std::string_view s,
                                       std::uint64_t limit) {
  std::vector<std::uint32_t> out;
  for (auto item : split(s, ',')) {
    const auto dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.push_back(read_number(field, item));
    } else {
      const auto first = read_number(field, item.substr(0, dash));
      const auto last = read_number(field, item.substr(dash + 1));
      if (last < first) malformed(field, "range '" + std::string(item) + "' runs backwards");
      if (out.size() + (std::uint64_t{last} - first + 1) > limit) malformed(field, "too many");
      for (std::uint64_t v = first; v <= last; ++v) out.push_back(static_cast<std::uint32_t>(v));
    }
    if (out.size() > limit) malformed(field, "too many");
  }
  return out;
}

/// "COUNT*REST": the count and the rest.
std::pair<std::uint32_t, std::string_view> read_run(std::string_view field, std::string_view s) {
  const auto star = s.find('*');
  if (star == std::string_view::npos) malformed(field, "'" + std::string(s) + "' is not COUNT*...");
  const auto count = read_number(field, s.substr(0, star));
  if (count == 0) malformed(field, "a run of 0");
  return {count, s.substr(star + 1)};
}

gpu_vendor read_vendor(std::string_view field, std::string_view s) {
  for (auto v : {gpu_vendor::nvidia, gpu_vendor::amd, gpu_vendor::intel, gpu_vendor::other}) {
    if (s == to_string(v)) return v;
  }
  malformed(field, "unknown GPU vendor '" + std::string(s) + "'");
}

nic_kind read_kind(std::string_view field, std::string_view s) {
  for (auto k : {nic_kind::infiniband, nic_kind::ethernet, nic_kind::other}) {
    if (s == to_string(k)) return k;
  }
  malformed(field, "unknown NIC kind '" + std::string(s) + "'");
}

}  // namespace

std::string to_text(const host_topology& t) {
  std::string out(magic);
  out.reserve(64 + t.pu_os_index.size() * 2 + t.gpus.size() * 64 + t.nics.size() * 32);
  out += ";p=" + std::to_string(t.packages);
  out += ";l=" + std::to_string(t.l3caches);
  out += ";n=";
  out += cpu_list(t.numa_os_index);
  out += ";c=";
  for (std::size_t i = 0; i < t.cores.size();) {
    std::size_t j = i;
    const auto same = [&](const core& a, const core& b) {
      return a.package == b.package && a.numa == b.numa && a.l3 == b.l3;
    };
    while (j + 1 < t.cores.size() && same(t.cores[j + 1], t.cores[i])) ++j;
    if (i > 0) out += ',';
    out += std::to_string(j - i + 1) + '*';
    put_number(out, t.cores[i].package);
    out += '.';
    put_number(out, t.cores[i].numa);
    out += '.';
    put_number(out, t.cores[i].l3);
    i = j + 1;
  }
  out += ";u=";
  std::uint32_t columns = 0;
  for (std::size_t i = 0; i < t.cores.size();) {
    std::size_t j = i;
    while (j + 1 < t.cores.size() && t.cores[j + 1].pu_count == t.cores[i].pu_count) ++j;
    if (i > 0) out += ',';
    out += std::to_string(j - i + 1) + '*' + std::to_string(t.cores[i].pu_count);
    columns = std::max(columns, t.cores[i].pu_count);
    i = j + 1;
  }
  out += ";o=";
  std::vector<std::uint32_t> column;
  for (std::uint32_t c = 0; c < columns; ++c) {
    column.clear();
    for (const auto& k : t.cores) {
      if (c < k.pu_count) column.push_back(t.pu_os_index[k.first_pu + c]);
    }
    if (c > 0) out += '|';
    out += cpu_list(column);
  }
  out += ";g=";
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const auto& g = t.gpus[i];
    if (i > 0) out += ',';
    out += to_string(g.vendor);
    out += '/';
    put_string(out, g.pci_bus_id);
    out += '/';
    put_number(out, g.numa);
    out += '/';
    put_number(out, g.package);
    out += '/';
    put_string(out, g.uuid);
  }
  out += ";i=";
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    const auto& n = t.nics[i];
    if (i > 0) out += ',';
    out += to_string(n.kind);
    out += '/';
    put_string(out, n.name);
    out += '/';
    put_string(out, n.netdev);
    out += '/';
    put_string(out, n.rdma);
    out += '/';
    put_number(out, n.numa);
    out += '/';
    put_number(out, n.package);
  }
  return out;
}

host_topology topology_from_text(std::string_view text) {
  // As `pmd --topology` prints it, or a file holds it: the line's end is not part of it.
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const auto fields = split(text, ';');
  if (fields.empty() || fields[0] != magic) {
    const auto head = text.substr(0, std::min<std::size_t>(text.find(';'), 16));
    throw pm::error(errc::parse, "host topology text: starts with '" + std::string(head) +
                                     "', expected '" + std::string(magic) + "'");
  }
  host_topology t;
  std::string_view value_of[8];  // p l n c u o g i
  bool present[8] = {};
  constexpr std::string_view keys = "plncuogi";
  for (std::size_t f = 1; f < fields.size(); ++f) {
    const auto field = fields[f];
    if (field.size() < 2 || field[1] != '=') malformed(field, "not KEY=VALUE");
    const auto k = keys.find(field[0]);
    if (k == std::string_view::npos) continue;  // a later version's field
    if (present[k]) malformed(field.substr(0, 1), "given twice");
    present[k] = true;
    value_of[k] = field.substr(2);
  }
  for (std::size_t k = 0; k < 6; ++k) {
    if (!present[k]) malformed(keys.substr(k, 1), "missing");
  }
  t.packages = read_number("p", value_of[0]);
  t.l3caches = read_number("l", value_of[1]);
  t.numa_os_index = read_ranges("n", value_of[2], max_cores);
  for (auto run : split(value_of[3], ',')) {
    const auto [count, rest] = read_run("c", run);
    const auto parts = split(rest, '.');
    if (parts.size() != 3) malformed("c", "'" + std::string(run) + "' is not N*P.N.L");
    core c;
    c.package = read_number("c", parts[0], true);
    c.numa = read_number("c", parts[1], true);
    c.l3 = read_number("c", parts[2], true);
    if (t.cores.size() + std::uint64_t{count} > max_cores) malformed("c", "too many cores");
    t.cores.insert(t.cores.end(), count, c);
  }
  std::size_t at = 0;
  std::uint64_t pus = 0;
  std::uint32_t columns = 0;
  for (auto run : split(value_of[4], ',')) {
    const auto [count, rest] = read_run("u", run);
    const auto per_core = read_number("u", rest);
    if (per_core == 0 || per_core > 1024)
      malformed("u", "cores with " + std::string(rest) + " PUs");
    if (at + count > t.cores.size()) malformed("u", "more cores than field c has");
    for (std::uint32_t i = 0; i < count; ++i) {
      t.cores[at].first_pu = static_cast<std::uint32_t>(pus);
      t.cores[at++].pu_count = per_core;
      pus += per_core;
    }
    columns = std::max(columns, per_core);
  }
  if (at != t.cores.size()) malformed("u", "fewer cores than field c has");
  if (pus > max_pus) malformed("u", "too many PUs");
  t.pu_os_index.assign(pus, none);
  const auto cols = split(value_of[5], '|');
  if (cols.size() != columns) malformed("o", "not one column per thread of the widest core");
  for (std::uint32_t c = 0; c < columns; ++c) {
    const auto values = read_ranges("o", cols[c], pus);
    std::size_t next = 0;
    for (const auto& k : t.cores) {
      if (c >= k.pu_count) continue;
      if (next == values.size()) malformed("o", "column " + std::to_string(c) + " is short");
      t.pu_os_index[k.first_pu + c] = values[next++];
    }
    if (next != values.size()) malformed("o", "column " + std::to_string(c) + " is long");
  }
  std::uint32_t per_vendor[4] = {0, 0, 0, 0};
  for (auto item : split(value_of[6], ',')) {
    const auto parts = split(item, '/');
    if (parts.size() != 5) malformed("g", "'" + std::string(item) + "' is not 5 fields");
    if (t.gpus.size() >= max_devices) malformed("g", "too many GPUs");
    gpu g;
    g.vendor = read_vendor("g", parts[0]);
    g.index = per_vendor[static_cast<int>(g.vendor)]++;
    g.pci_bus_id = read_string("g", parts[1]);
    g.numa = read_number("g", parts[2], true);
    g.package = read_number("g", parts[3], true);
    g.uuid = read_string("g", parts[4]);
    t.gpus.push_back(std::move(g));
  }
  for (auto item : split(value_of[7], ',')) {
    const auto parts = split(item, '/');
    if (parts.size() != 6) malformed("i", "'" + std::string(item) + "' is not 6 fields");
    if (t.nics.size() >= max_devices) malformed("i", "too many NICs");
    nic n;
    n.kind = read_kind("i", parts[0]);
    n.name = read_string("i", parts[1]);
    n.netdev = read_string("i", parts[2]);
    n.rdma = read_string("i", parts[3]);
    n.numa = read_number("i", parts[4], true);
    n.package = read_number("i", parts[5], true);
    t.nics.push_back(std::move(n));
  }
  check(t);
  return t;
}

}  // namespace pm::topo
