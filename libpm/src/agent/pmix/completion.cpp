// The answers a host gives PMIx requests (pmix_host.hpp): pure, so that pmd uses them without
// loading libpmix.
#include "agent/pmix/pmix_host.hpp"

namespace pm::agent::pmix {

completion& completion::operator=(completion&& other) noexcept {
  if (this != &other) {
    if (fn_) (*this)(status::error);
    fn_ = std::move(other.fn_);
    other.fn_ = nullptr;
  }
  return *this;
}
completion::~completion() {
  if (fn_) (*this)(status::error);
}
void completion::operator()(status s) {
  auto fn = std::move(fn_);
  fn_ = nullptr;
  if (fn) fn(s);
}

data_completion& data_completion::operator=(data_completion&& other) noexcept {
  if (this != &other) {
    if (fn_) (*this)(status::error);
    fn_ = std::move(other.fn_);
    other.fn_ = nullptr;
  }
  return *this;
}
data_completion::~data_completion() {
  if (fn_) (*this)(status::error);
}
void data_completion::operator()(status s, std::vector<char> data) {
  auto fn = std::move(fn_);
  fn_ = nullptr;
  if (fn) fn(s, std::move(data));
}

query_completion& query_completion::operator=(query_completion&& other) noexcept {
  if (this != &other) {
    if (fn_) (*this)(status::error);
    fn_ = std::move(other.fn_);
    other.fn_ = nullptr;
  }
  return *this;
}
query_completion::~query_completion() {
  if (fn_) (*this)(status::error);
}
void query_completion::operator()(status s, std::vector<query_value> values) {
  auto fn = std::move(fn_);
  fn_ = nullptr;
  if (fn) fn(s, std::move(values));
}

spawn_completion& spawn_completion::operator=(spawn_completion&& other) noexcept {
  if (this != &other) {
    if (fn_) (*this)(status::error);
    fn_ = std::move(other.fn_);
    other.fn_ = nullptr;
  }
  return *this;
}
spawn_completion::~spawn_completion() {
  if (fn_) (*this)(status::error);
}
void spawn_completion::operator()(status s, std::string nspace) {
  auto fn = std::move(fn_);
  fn_ = nullptr;
  if (fn) fn(s, std::move(nspace));
}

lookup_completion& lookup_completion::operator=(lookup_completion&& other) noexcept {
  if (this != &other) {
    if (fn_) (*this)(status::error);
    fn_ = std::move(other.fn_);
    other.fn_ = nullptr;
  }
  return *this;
}
lookup_completion::~lookup_completion() {
  if (fn_) (*this)(status::error);
}
void lookup_completion::operator()(status s, std::vector<found_value> values) {
  auto fn = std::move(fn_);
  fn_ = nullptr;
  if (fn) fn(s, std::move(values));
}

}  // namespace pm::agent::pmix
