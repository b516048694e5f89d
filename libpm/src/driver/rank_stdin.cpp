#include "driver/rank_stdin.hpp"

#include <fcntl.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "pm/error.hpp"

namespace pm::driver {

namespace {

link::owned_fd copy_of(int fd) {
  if (fd < 0) return {};
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (copy < 0) {
    throw error(errc::system,
                std::string("cannot keep a copy of a rank's stdin: ") + std::strerror(errno));
  }
  return link::owned_fd(copy);
}

}  // namespace

rank_stdin::rank_stdin(boost::asio::io_context& io, int& shared_fd, std::vector<int>& per_rank)
    : io_(io), shared_(copy_of(shared_fd)) {
  shared_fd = shared_.get();
  per_rank_.reserve(per_rank.size());
  for (int& fd : per_rank) {
    per_rank_.push_back(copy_of(fd));
    fd = per_rank_.back().get();
  }
}

rank_stdin::~rank_stdin() {
  *alive_ = false;
}

int rank_stdin::source_of(std::uint32_t rank) const {
  if (per_rank_.empty()) return shared_.get();
  return rank < per_rank_.size() ? per_rank_[rank].get() : -1;
}

link::owned_fd rank_stdin::copy_for(std::uint32_t rank) const {
  return copy_of(source_of(rank));
}

void rank_stdin::pump(std::uint32_t host, std::uint32_t rank, stdin_pump_hooks hooks) {
  pumps_[rank].push_back(
      std::make_unique<stdin_pump>(io_, host, rank, source_of(rank), std::move(hooks)));
  ranks_of_host_[host].push_back(rank);
  pump_later(rank);
}

void rank_stdin::resume(std::uint32_t host) {
  const auto it = ranks_of_host_.find(host);
  if (it == ranks_of_host_.end()) return;
  for (const auto rank : it->second) pump_later(rank);
}

// Looked up when it runs, not held: a release may have ended the pump meanwhile. By index: a
// pump's hand-over may add one (an erase is always posted).
void rank_stdin::pump_later(std::uint32_t rank) {
  boost::asio::post(io_, [this, alive = alive_, rank] {
    if (!*alive) return;
    const auto it = pumps_.find(rank);
    if (it == pumps_.end()) return;
    auto& list = it->second;  // a reference survives a rehash; the iterator would not
    for (std::size_t i = 0; i < list.size(); ++i) list[i]->pump();
  });
}

void rank_stdin::release(std::uint32_t rank) {
  if (per_rank_.empty()) {
    shared_.reset();
  } else if (rank < per_rank_.size()) {
    per_rank_[rank].reset();
  }
  boost::asio::post(io_, [this, alive = alive_, rank] {
    if (!*alive) return;
    const auto it = pumps_.find(rank);
    if (it == pumps_.end()) return;
    const auto host = it->second.front()->host();
    pumps_.erase(it);
    std::erase(ranks_of_host_[host], rank);
  });
}

}  // namespace pm::driver
