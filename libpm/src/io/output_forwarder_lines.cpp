// How a stream's lines become output (output_forwarder.hpp): the chunk's time, each destination's
// format (raw, tagged and/or timestamped text, JSON lines, the sink), whole lines and pieces of
// long or unterminated ones, and a prompt's partial line shown on the terminal after a quiet time.
#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "io/output_forwarder.hpp"
#include "io/output_forwarder_impl.hpp"

namespace pm::io {

// ---- time --------------------------------------------------------------------------------
std::chrono::system_clock::time_point output_forwarder::impl::now() {
  if (!chunk_time) {
    chunk_time = std::chrono::system_clock::now();
    rfc_valid = false;
  }
  return *chunk_time;
}

std::string_view output_forwarder::impl::ctime_now() {
  return ctime_text.at(std::chrono::system_clock::to_time_t(now()));
}

std::string_view output_forwarder::impl::rfc_now() {
  now();
  if (!rfc_valid) {
    rfc_text = format_rfc3339_utc(*chunk_time);
    rfc_valid = true;
  }
  return rfc_text;
}

// ---- formatting --------------------------------------------------------------------------
void output_forwarder::impl::append_formatted(std::string& out, format_mode fm,
                                              const stream_state& s, std::string_view a,
                                              std::string_view b, line_flags f) {
  if (fm == format_mode::json) {
    append_json_line(out, s.rank, s.which, rfc_now(), a, b, f);
    return;
  }
  if (opt.timestamp) out.append(ctime_now());
  out.append(f.continued ? s.tag_piece : s.tag_line);
  out.append(a);
  out.append(b);
  out.push_back('\n');
}

void output_forwarder::impl::to_sink(const stream_state& s, std::string_view a, std::string_view b,
                                     line_flags f) {
  if (a.empty() || b.empty()) {
    opt.sink(s.rank, s.which, a.empty() ? b : a, f);
    return;
  }
  line.assign(a).append(b);
  opt.sink(s.rank, s.which, line, f);
}

// What of `prefix` (the assembler's tail) destination `d` still needs: the terminal already
// has the part a quiet-time flush showed.
std::string_view output_forwarder::impl::unshown(const stream_state& s, const destination* d,
                                                 std::string_view prefix) {
  return d == s.terminal ? prefix.substr(std::min(s.shown, prefix.size())) : prefix;
}

// Makes room for `size` bytes in `tagged`, keeping the first tagged_size.
void output_forwarder::impl::reserve_tagged(std::size_t size) {
  if (size <= tagged_capacity) return;
  const std::size_t capacity = std::max(size, tagged_capacity * 2);
  std::unique_ptr<char[]> bigger(new char[capacity]);
  if (tagged_size > 0) std::memcpy(bigger.get(), tagged.get(), tagged_size);
  tagged = std::move(bigger);
  tagged_capacity = capacity;
}

// --tag-output and/or --timestamp-output: every line of prefix + body (whole lines) becomes
// stamp + tag + line in `tagged`, by plain copies into a buffer sized once per chunk (the stamp
// is the chunk's, as on the general path). The general path's std::string appends, four per
// 100-byte line, made pmrun the bottleneck of a tagged flood. False, with nothing written, when
// a line is longer than max_line: the general path cuts it into marked pieces.
bool output_forwarder::impl::tag_whole_lines(const stream_state& s, std::string_view prefix,
                                             std::string_view body, std::string_view stamp) {
  const std::string_view tag = s.tag_line;
  tagged_size = 0;
  reserve_tagged(prefix.size() + body.size() +
                 (body.size() / 64 + 1) * (stamp.size() + tag.size()));
  std::string_view head = prefix;  // the kept tail starts the first line only
  while (!body.empty()) {
    const void* nl = std::memchr(body.data(), '\n', body.size());
    const std::size_t length =  // of the line, without its newline
        nl != nullptr ? static_cast<std::size_t>(static_cast<const char*>(nl) - body.data())
                      : body.size();
    if (head.size() + length > max_line) return false;
    reserve_tagged(tagged_size + stamp.size() + tag.size() + head.size() + length + 1);
    char* out = tagged.get() + tagged_size;
    if (!stamp.empty()) std::memcpy(out, stamp.data(), stamp.size());
    out += stamp.size();
    std::memcpy(out, tag.data(), tag.size());
    out += tag.size();
    if (!head.empty()) std::memcpy(out, head.data(), head.size());
    out += head.size();
    std::memcpy(out, body.data(), length);
    out += length;
    *out++ = '\n';
    tagged_size = static_cast<std::size_t>(out - tagged.get());
    body.remove_prefix(nl != nullptr ? length + 1 : length);
    head = {};
  }
  return true;
}

// Complete lines: prefix + body ends with '\n'.
void output_forwarder::impl::emit_whole(stream_state& s, std::string_view prefix,
                                        std::string_view body) {
  for (destination* d : {s.terminal, s.file.get()}) {
    if (d == nullptr) continue;
    if (d->format == format_mode::raw) {
      const auto p = unshown(s, d, prefix);
      const slice parts[] = {{p.data(), p.size()}, {body.data(), body.size()}};
      write(*d, s, parts, 2, true);
    } else if (d->format == format_mode::text &&
               tag_whole_lines(s, prefix, body, opt.timestamp ? ctime_now() : std::string_view{})) {
      const slice parts[] = {{tagged.get(), tagged_size}};
      write(*d, s, parts, 1, true);
    } else {
      fmt.clear();
      fmt.reserve(prefix.size() + body.size() + body.size() / 4 + 256);
      for_each_line(prefix, body, max_line,
                    [&](std::string_view a, std::string_view b, line_flags f) {
                      append_formatted(fmt, d->format, s, a, b, f);
                    });
      const slice parts[] = {{fmt.data(), fmt.size()}};
      write(*d, s, parts, 1, true);
    }
  }
  if (opt.sink) {
    for_each_line(
        prefix, body, max_line,
        [&](std::string_view a, std::string_view b, line_flags f) { to_sink(s, a, b, f); });
  }
}

// An unterminated piece: a long line's first max_line bytes, or a last line without '\n'.
void output_forwarder::impl::emit_piece(stream_state& s, std::string_view prefix,
                                        std::string_view body, line_flags f) {
  for (destination* d : {s.terminal, s.file.get()}) {
    if (d == nullptr) continue;
    if (d->format == format_mode::raw) {
      const auto p = unshown(s, d, prefix);
      const slice parts[] = {{p.data(), p.size()}, {body.data(), body.size()}};
      write(*d, s, parts, 2, false);
    } else {
      fmt.clear();
      append_formatted(fmt, d->format, s, prefix, body, f);
      const slice parts[] = {{fmt.data(), fmt.size()}};
      write(*d, s, parts, 1, true);
    }
  }
  if (opt.sink) to_sink(s, prefix, body, f);
}

// ---- partial lines on the terminal (prompts) ----------------------------------------------
// Not for a rank on another host (pushed): a pause in its bytes may be the link's (credit,
// the network), not the rank's, and a line shown early there was cut by the lines piling up
// behind it under back-pressure. Its prompt shows when its line ends.
bool output_forwarder::impl::shows_partial_lines(const stream_state& s) const {
  return opt.partial_line_delay.count() > 0 && !opt.sink && s.terminal != nullptr &&
         s.terminal->format == format_mode::raw && !s.pushed;
}

// After a feed: a tail not shown yet waits for the destination to be quiet.
void output_forwarder::impl::after_feed(stream_state& s) {
  if (!shows_partial_lines(s)) return;
  s.terminal->last_feed = std::chrono::steady_clock::now();
  if (s.assembler.pending() <= s.shown) return;
  if (s.quiet) return;  // armed: it re-arms itself from last_feed
  s.quiet.emplace(io);
  arm_quiet(s, opt.partial_line_delay);
}

void output_forwarder::impl::arm_quiet(stream_state& s, std::chrono::steady_clock::duration after) {
  s.quiet->expires_after(after);
  s.quiet->async_wait([weak = weak_from_this(), sp = &s](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!self || ec == asio::error::operation_aborted) return;
    self->quiet_time(*sp);
  });
}

void output_forwarder::impl::quiet_time(stream_state& s) {
  if (s.eof) {
    s.quiet.reset();
    return;
  }
  const auto silent = std::chrono::steady_clock::now() - s.terminal->last_feed;
  if (silent < opt.partial_line_delay) {
    arm_quiet(s, opt.partial_line_delay - silent);  // bytes came meanwhile: wait on
    return;
  }
  if (s.terminal->queued > 0 || s.terminal->waiting) {
    // The destination is the one that is slow (a stalled terminal or pipe): everyone stopped
    // because output waits, not because a rank waits for input. Showing the tail now would cut
    // a line that goes on once the queue drains, so wait on.
    arm_quiet(s, opt.partial_line_delay);
    return;
  }
  s.quiet.reset();
  const auto tail = s.assembler.held();
  if (tail.size() <= s.shown) return;
  const auto rest = tail.substr(s.shown);
  const slice parts[] = {{rest.data(), rest.size()}};
  destination& d = *s.terminal;
  write(d, s, parts, 1, false);                // the line stays open: its rest follows directly
  if (d.open_line == &s) d.open_shown = true;  // (else it was held behind another shown line)
  s.shown = tail.size();
}

}  // namespace pm::io
