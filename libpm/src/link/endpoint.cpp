#include "link/endpoint.hpp"

#include <algorithm>
#include <cstdio>

#include "pm/error.hpp"

// GCC 12 sees std::variant moves as "maybe uninitialized" (see libpm/src/agent/agent.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace pm::link {

namespace {

std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

endpoint::endpoint(endpoint_options options) : opts_(options), scanner_(options.max_noise) {}

const char* endpoint::peer_name() const noexcept {
  return opts_.self == role::launcher ? "agent" : "launcher";
}

void endpoint::start(link_time now, hello mine) {
  if (started_) return;
  started_ = true;
  started_at_ = now;
  last_heard_ = now;
  mine.version = protocol_version;
  mine.nonce = opts_.nonce;
  out_.insert(out_.end(), magic.begin(), magic.end());
  queue_control(mine, 0);
}

void endpoint::queue_control(const message& m, std::uint32_t fds) {
  append_message(out_, m, fds);
}

std::uint64_t endpoint::send(const message& m, std::uint32_t fds) {
  const std::uint64_t offset = consumed_ + (out_.size() - out_start_);
  if (down_) return offset;
  queue_control(m, fds);
  return offset;
}

void endpoint::send_relay(std::uint32_t host, std::span<const std::uint8_t> bytes) {
  if (down_) return;
  append_relay_frames(out_, host, bytes);
}

std::uint64_t endpoint::credit() const noexcept {
  const std::uint64_t in_flight = sent_data_ - acked_data_;
  return in_flight >= opts_.send_window ? 0 : opts_.send_window - in_flight;
}

void endpoint::send_output(std::uint32_t rank, output_stream stream,
                           std::span<const std::uint8_t> bytes) {
  if (down_ || bytes.empty()) return;
  if (bytes.size() > credit()) {
    throw error(errc::internal, "agent link: " + std::to_string(bytes.size()) +
                                    " output bytes exceed the credit of " +
                                    std::to_string(credit()));
  }
  while (!bytes.empty()) {
    const auto n = std::min(bytes.size(), max_data_bytes);
    append_output_frame(out_, rank, stream, bytes.first(n));
    bytes = bytes.subspan(n);
    sent_data_ += n;
  }
  if (credit() == 0) credit_exhausted_ = true;
}

void endpoint::send_input(std::uint32_t rank, std::span<const std::uint8_t> bytes) {
  if (down_ || bytes.empty()) return;
  if (bytes.size() > credit()) {
    throw error(errc::internal, "agent link: " + std::to_string(bytes.size()) +
                                    " input bytes exceed the credit of " +
                                    std::to_string(credit()));
  }
  while (!bytes.empty()) {
    const auto n = std::min(bytes.size(), max_data_bytes);
    append_input_frame(out_, rank, bytes.first(n));
    bytes = bytes.subspan(n);
    sent_data_ += n;
  }
  if (credit() == 0) credit_exhausted_ = true;
}

void endpoint::acknowledge(std::uint64_t bytes) {
  if (down_) return;
  unacked_in_ += bytes;
  // Acknowledged in batches far below the window: the sender then always has most of its window,
  // and a trickle (a prompt, a few lines) never waits for an ack.
  if (unacked_in_ >= std::max<std::uint64_t>(1, opts_.ack_batch)) {
    queue_control(ack{unacked_in_}, 0);
    unacked_in_ = 0;
  }
}

void endpoint::set_heartbeats(link_time now, std::chrono::milliseconds interval,
                              std::chrono::milliseconds silence) {
  opts_.heartbeat_interval = interval;
  opts_.silence_timeout = silence;
  last_heard_ = now;
  next_beat_ = now + interval;
}

void endpoint::suspend(link_time /*now*/) {
  if (down_ || !started_) return;
  queue_control(link::suspend{}, 0);
}

void endpoint::resume(link_time now) {
  if (down_ || !started_) return;
  last_heard_ = now;  // nothing could be read while this side was stopped
  next_beat_ = now;
  queue_control(link::resume{}, 0);
}

std::span<const std::uint8_t> endpoint::output() const noexcept {
  return {out_.data() + out_start_, out_.size() - out_start_};
}

void endpoint::consume_output(std::size_t n) {
  n = std::min(n, out_.size() - out_start_);
  out_start_ += n;
  consumed_ += n;
  if (out_start_ == out_.size()) {
    out_.clear();
    out_start_ = 0;
  } else if (out_start_ > (std::size_t{1} << 20) && out_start_ > out_.size() / 2) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_start_));
    out_start_ = 0;
  }
}

void endpoint::shrink() {
  if (out_start_ == out_.size()) {
    std::vector<std::uint8_t>().swap(out_);
    out_start_ = 0;
  }
  decoder_.shrink();
}

void endpoint::fail(std::vector<link_event>& out, std::string reason) {
  if (down_) return;
  down_ = true;
  out_.clear();
  out_start_ = 0;
  out.push_back(link_down{std::move(reason)});
}

void endpoint::received(link_time now, std::span<const std::uint8_t> bytes,
                        std::vector<link_event>& out) {
  if (down_ || bytes.empty()) return;
  try {
    if (!scanner_.found()) {
      const auto at = scanner_.scan(bytes);
      if (!at) return;
      bytes = bytes.subspan(*at);
    }
    if (greeted_) last_heard_ = now;
    // Whole frames are read where they arrived (no copy); only a partial one is kept.
    decoder_.feed_view(bytes);
    while (!down_) {
      const auto f = decoder_.next();
      if (!f) break;
      handle(now, *f, out);
    }
  } catch (const pm::error& e) {
    fail(out, e.what());
  }
  if (down_) decoder_ = frame_decoder();  // it may still point into `bytes`
}

void endpoint::closed(link_time /*now*/, std::vector<link_event>& out, const std::string& why) {
  if (down_) return;
  if (!why.empty()) {
    fail(out, "the link to the " + std::string(peer_name()) + " broke: " + why);
    return;
  }
  if (!scanner_.found()) {
    const std::string said = scanner_.noise_text();
    fail(out, std::string("the ") + peer_name() + " closed the link before its hello" +
                  (said.empty() ? std::string() : " (it printed: '" + said + "')"));
    return;
  }
  try {
    decoder_.finish();
  } catch (const pm::error& e) {
    fail(out, e.what());
    return;
  }
  fail(out, std::string("the ") + peer_name() + " closed the link");
}

void endpoint::peer_silent(std::chrono::nanoseconds quiet, std::vector<link_event>& out) {
  fail(out, std::string("no word from the ") + peer_name() + " for " + seconds_text(quiet));
}

std::optional<link_time> endpoint::deadline() const {
  if (down_ || !started_) return std::nullopt;
  std::optional<link_time> d;
  const auto earliest = [&](link_time t) {
    if (!d || t < *d) d = t;
  };
  if (!greeted_) {
    if (opts_.hello_timeout.count() > 0) earliest(started_at_ + opts_.hello_timeout);
    return d;
  }
  if (opts_.heartbeat_interval.count() > 0) earliest(next_beat_);
  if (opts_.silence_timeout.count() > 0 && !peer_suspended_) {
    earliest(last_heard_ + opts_.silence_timeout);
  }
  return d;
}

void endpoint::tick(link_time now, std::vector<link_event>& out) {
  if (down_ || !started_) return;
  if (!greeted_) {
    if (opts_.hello_timeout.count() > 0 && now - started_at_ >= opts_.hello_timeout) {
      const std::string said = scanner_.noise_text();
      fail(out, std::string("no hello from the ") + peer_name() + " within " +
                    seconds_text(opts_.hello_timeout) +
                    (said.empty() ? std::string() : " (it printed: '" + said + "')"));
    }
    return;
  }
  if (opts_.silence_timeout.count() > 0 && !peer_suspended_ &&
      now - last_heard_ >= opts_.silence_timeout) {
    peer_silent(now - last_heard_, out);
    return;
  }
  if (opts_.heartbeat_interval.count() > 0 && now >= next_beat_) {
    queue_control(heartbeat{}, 0);
    next_beat_ = now + opts_.heartbeat_interval;
  }
}

void endpoint::handle(link_time now, const frame& f, std::vector<link_event>& out) {
  if (f.kind == frame_kind::control) {
    handle_message(now, decode(f.payload), out);
    return;
  }
  if (!greeted_) {
    fail(out, std::string("data from the ") + peer_name() + " before its hello");
    return;
  }
  if (f.kind == frame_kind::relay) {
    // Either side relays (child_data), like the message it stands for.
    if (opts_.self == role::launcher) {
      out.push_back(relay_in{f.rank, f.payload});
    } else {
      out.push_back(
          message_in{child_data{f.rank, std::string(reinterpret_cast<const char*>(f.payload.data()),
                                                    f.payload.size())},
                     0});
    }
    return;
  }
  if (f.kind == frame_kind::output) {
    if (opts_.self != role::launcher) {
      fail(out, "output data from the launcher");
      return;
    }
    out.push_back(output_in{f.rank, f.stream, f.payload});
    return;
  }
  if (opts_.self != role::agent) {
    fail(out, "stdin data from the agent");
    return;
  }
  out.push_back(input_in{f.rank, f.payload});
}

void endpoint::handle_message(link_time now, envelope e, std::vector<link_event>& out) {
  if (auto* h = std::get_if<hello>(&e.msg)) {
    if (greeted_) {
      fail(out, std::string("a second hello from the ") + peer_name());
    } else if (h->version != protocol_version) {
      fail(out, std::string("the ") + peer_name() + " speaks agent link version " +
                    std::to_string(h->version) + ", this " +
                    (opts_.self == role::launcher ? "launcher" : "agent") + " speaks " +
                    std::to_string(protocol_version));
    } else if (h->nonce != opts_.nonce) {
      fail(out, std::string("the ") + peer_name() +
                    " answered with another job's nonce (a stale or foreign peer)");
    } else {
      greeted_ = true;
      last_heard_ = now;
      next_beat_ = now + opts_.heartbeat_interval;
      out.push_back(peer_greeted{std::move(*h)});
    }
    return;
  }
  if (!greeted_) {
    fail(out, "'" + std::string(type_name(e.msg)) + "' message from the " + peer_name() +
                  " before its hello");
    return;
  }
  const sender who = sent_by(e.msg);
  const sender peer = opts_.self == role::launcher ? sender::agent : sender::launcher;
  if (who != sender::either && who != peer) {
    fail(out, "unexpected '" + std::string(type_name(e.msg)) + "' message from the " + peer_name());
    return;
  }
  if (std::holds_alternative<heartbeat>(e.msg)) return;
  if (const auto* a = std::get_if<ack>(&e.msg)) {
    const bool was_exhausted = credit() == 0 || credit_exhausted_;
    if (a->bytes > sent_data_ - acked_data_) {
      fail(out, std::string("the ") + peer_name() + " acknowledged more data than was sent");
      return;
    }
    acked_data_ += a->bytes;
    if (was_exhausted && credit() > 0) {
      credit_exhausted_ = false;
      out.push_back(credit_granted{});
    }
    return;
  }
  // Suspend and resume also go on to the agent: ranks that start while its launcher is stopped
  // are stopped too (agent.cpp).
  if (std::holds_alternative<link::suspend>(e.msg)) peer_suspended_ = true;
  if (std::holds_alternative<link::resume>(e.msg)) {
    peer_suspended_ = false;
    last_heard_ = now;
  }
  out.push_back(message_in{std::move(e.msg), e.fds});
}

}  // namespace pm::link
