#include "io/output_format.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace pm::io {

namespace {
constexpr const char* day_names[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr const char* month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
}  // namespace

std::string format_ctime(std::time_t t) {
  std::tm tm{};
  ::localtime_r(&t, &tm);
  // Same layout as asctime(3) ("%.3s %.3s%3d %.2d:%.2d:%.2d %d"), without the locale.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3s %.3s%3d %.2d:%.2d:%.2d %d", day_names[tm.tm_wday % 7],
                month_names[tm.tm_mon % 12], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                1900 + tm.tm_year);
  return buf;
}

std::string format_rfc3339_utc(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  auto secs = std::chrono::floor<std::chrono::seconds>(us);
  const auto frac = (us - secs).count();
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", 1900 + tm.tm_year,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(frac));
  return buf;
}

void append_line_prefix(std::string& out, bool tag, bool timestamp, std::string_view time,
                        std::uint32_t rank, output_stream stream, line_flags flags,
                        std::uint32_t job) {
  if (timestamp) out.append(time);
  if (tag) {
    char buf[32];
    const int n = std::snprintf(buf, sizeof buf, "[%u,%u]", job, rank);
    out.append(buf, static_cast<std::size_t>(n));
  }
  out.append(stream == output_stream::out ? "<stdout>" : "<stderr>");
  out.append(flags.continued ? "+:" : ":");
}

void append_json_line(std::string& out, std::uint32_t rank, output_stream stream,
                      std::string_view time, std::string_view a, std::string_view b,
                      line_flags flags) {
  std::string text;
  text.reserve(a.size() + b.size());
  text.append(a).append(b);
  const nlohmann::json line(std::move(text));
  char buf[48];
  const int n = std::snprintf(buf, sizeof buf, "{\"rank\":%u,\"stream\":\"", rank);
  out.append(buf, static_cast<std::size_t>(n));
  out.append(to_string(stream));
  out.append("\",\"time\":\"");
  out.append(time);
  out.append("\",\"line\":");
  out.append(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (flags.partial) out.append(",\"partial\":true");
  if (flags.continued) out.append(",\"continued\":true");
  out.append("}\n");
}

std::size_t rank_width(std::size_t job_size) {
  std::size_t width = 1;
  for (std::size_t n = job_size; n >= 10; n /= 10) ++width;
  return width;
}

std::string rank_directory(std::string_view dir, std::uint32_t rank, std::size_t job_size,
                           bool with_jobid, std::uint32_t job) {
  char buf[64];
  if (with_jobid) {
    std::snprintf(buf, sizeof buf, "/%u/rank.%0*u", job, static_cast<int>(rank_width(job_size)),
                  rank);
  } else {
    std::snprintf(buf, sizeof buf, "/rank.%0*u", static_cast<int>(rank_width(job_size)), rank);
  }
  std::string path(dir);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  path.append(buf);
  return path;
}

}  // namespace pm::io
