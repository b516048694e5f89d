// libpm-pmix.so's entry point (pmix_module.hpp): the server of pmix_host.cpp behind virtual calls.
#include "agent/pmix/pmix_host.hpp"
#include "agent/pmix/pmix_module.hpp"

#include <exception>
#include <memory>

namespace {

using namespace pm::agent::pmix;

class module_server final : public hosted_server {
 public:
  explicit module_server(std::unique_ptr<server> s) : s_(std::move(s)) {}
  int event_fd() const noexcept override { return s_->event_fd(); }
  std::string run_pending() noexcept override {
    try {
      s_->run_pending();
      return {};
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown failure";
    }
  }
  std::string register_job(const job_info& job) noexcept override {
    try {
      s_->register_job(job);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  std::string rank_env(const std::string& nspace, std::uint32_t rank,
                       std::vector<std::string>& env) noexcept override {
    try {
      env = s_->rank_env(nspace, rank);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  void local_modex(const proc& target,
                   std::function<void(status, std::vector<char>)> done) noexcept override {
    try {
      s_->local_modex(target, std::move(done));
    } catch (...) {  // out of memory before the request left: nothing to answer with here
    }
  }
  std::string notify(const event_notice& notice) noexcept override {
    try {
      s_->notify(notice);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  std::chrono::nanoseconds init_time() const noexcept override { return s_->init_time(); }
  std::vector<std::string> take_notices() noexcept override {
    try {
      return s_->take_notices();
    } catch (...) {
      return {};
    }
  }
  std::string deregister_job(const std::string& nspace) noexcept override {
    try {
      s_->deregister_job(nspace);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }

 private:
  std::unique_ptr<server> s_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) hosted_server* pm_pmix_start_v4(
    const options& opts, std::string& error) noexcept {
  try {
    return new module_server(server::start(opts));
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown failure";
  }
  return nullptr;
}
