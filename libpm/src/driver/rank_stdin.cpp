#include "driver/rank_stdin.hpp"

#include <fcntl.h>

#include <algorithm>
#include <boost/asio/post.hpp>

namespace pm::driver {

namespace {

link::owned_fd copy_of(int fd) {
  return link::owned_fd(fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 3));
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
  pumps_.push_back(
      std::make_unique<stdin_pump>(io_, host, rank, source_of(rank), std::move(hooks)));
  pump_later(rank);
}

void rank_stdin::resume(std::uint32_t host) {
  for (const auto& p : pumps_) {
    if (p->host() == host) pump_later(p->rank());
  }
}

// Looked up when it runs, not held: a release may have ended the pump meanwhile. By index: a
// pump's hand-over may add a pump (the erase of one is always posted).
void rank_stdin::pump_later(std::uint32_t rank) {
  boost::asio::post(io_, [this, alive = alive_, rank] {
    if (!*alive) return;
    for (std::size_t i = 0; i < pumps_.size(); ++i) {
      if (pumps_[i]->rank() == rank) pumps_[i]->pump();
    }
  });
}

void rank_stdin::release(std::uint32_t rank) {
  if (per_rank_.empty()) {
    shared_.reset();
  } else if (rank < per_rank_.size()) {
    per_rank_[rank].reset();
  }
  boost::asio::post(io_, [this, alive = alive_, rank] {
    if (*alive) std::erase_if(pumps_, [rank](const auto& p) { return p->rank() == rank; });
  });
}

}  // namespace pm::driver
