#include "transport/srun/refusal_log.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace pm::srun {

namespace {

// "10.0.0.5:41234" -> "10.0.0.5" (the port changes with every connection); "[fd00::1]:5" too.
std::string_view address_of(std::string_view peer) {
  if (peer.starts_with('[')) {
    const auto close = peer.find(']');
    return close == std::string_view::npos ? peer : peer.substr(0, close + 1);
  }
  const auto colon = peer.rfind(':');
  if (colon == std::string_view::npos || peer.find(':') != colon) return peer;
  return peer.substr(0, colon);
}

// 18246 -> "18,246".
std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::optional<std::string> refusal_log::refused(std::string_view peer, std::string_view reason,
                                                std::string_view why, clock::time_point now) {
  ++total_;
  std::string key = std::string(address_of(peer)) + " (" + std::string(reason) + ")";
  if (!shown_.contains(key) && shown_.size() < limits_.shown_keys) {
    shown_.insert(std::move(key));
    return std::string(limits_.verb) + " a connection from " + std::string(peer) + ": " +
           std::string(why);
  }
  if (pending_ == 0) window_start_ = now;
  ++pending_;
  if (auto it = counted_.find(key); it != counted_.end()) {
    ++it->second.pending;
  } else if (counted_.size() < limits_.tracked_keys) {
    counted_.emplace(std::move(key), count{1});
  } else {
    ++other_;
  }
  return std::nullopt;
}

std::optional<refusal_log::clock::time_point> refusal_log::summary_due() const {
  if (pending_ == 0) return std::nullopt;
  // One summary per interval: the first one an interval after the first counted refusal.
  const auto from = last_summary_ ? std::max(*last_summary_, *window_start_) : *window_start_;
  return from + limits_.summary_every;
}

std::optional<std::string> refusal_log::summary(clock::time_point now, bool force) {
  const auto due = summary_due();
  if (!due || (!force && now < *due)) return std::nullopt;
  std::vector<std::pair<std::uint64_t, const std::string*>> top;
  for (const auto& [key, c] : counted_) {
    if (c.pending > 0) top.emplace_back(c.pending, &key);
  }
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : *a.second < *b.second;
  });
  const auto since = last_summary_ ? std::max(*last_summary_, *window_start_) : *window_start_;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
  std::string line = std::string(limits_.verb) + " " + grouped(pending_) + " more connection" +
                     (pending_ == 1 ? "" : "s") + " in the last " +
                     std::to_string(std::max<long long>(1, (ms + 999) / 1000)) + " s:";
  const std::size_t named = std::min<std::size_t>(top.size(), 3);
  std::uint64_t rest = other_;
  for (std::size_t i = 0; i < top.size(); ++i) {
    if (i < named) {
      line += std::string(i == 0 ? " " : ", ") + grouped(top[i].first) + " from " + *top[i].second;
    } else {
      rest += top[i].first;
    }
  }
  if (rest > 0) {
    line += std::string(named > 0 ? ", " : " ") + grouped(rest) + " from other peers or reasons";
  }
  for (auto& [key, c] : counted_) c.pending = 0;
  // Keys with nothing pending are forgotten, so that the next interval may count others apart.
  std::erase_if(counted_, [](const auto& kv) { return kv.second.pending == 0; });
  other_ = 0;
  pending_ = 0;
  window_start_.reset();
  last_summary_ = now;
  return line;
}

}  // namespace pm::srun
