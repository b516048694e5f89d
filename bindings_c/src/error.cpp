// Status codes, the thread-local last error, versions and the memory the API hands out.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "guard.hpp"
#include "pm/version.hpp"

static_assert(PM_C_VERSION_MAJOR == PM_VERSION_MAJOR && PM_C_VERSION_MINOR == PM_VERSION_MINOR &&
                  PM_C_VERSION_PATCH == PM_VERSION_PATCH,
              "pm.h's PM_C_VERSION_* must equal version.hpp's PM_VERSION_*");

// pm_status mirrors pm::errc: the C code is minus the C++ one.
static_assert(PM_E_USAGE == -static_cast<int>(pm::errc::usage));
static_assert(PM_E_PARSE == -static_cast<int>(pm::errc::parse));
static_assert(PM_E_ALLOCATION == -static_cast<int>(pm::errc::allocation));
static_assert(PM_E_MAPPING == -static_cast<int>(pm::errc::mapping));
static_assert(PM_E_ENV == -static_cast<int>(pm::errc::env));
static_assert(PM_E_LAUNCH == -static_cast<int>(pm::errc::launch));
static_assert(PM_E_NOT_FOUND == -static_cast<int>(pm::errc::not_found));
static_assert(PM_E_NOT_EXECUTABLE == -static_cast<int>(pm::errc::not_executable));
static_assert(PM_E_SYSTEM == -static_cast<int>(pm::errc::system));
static_assert(PM_E_INTERNAL == -static_cast<int>(pm::errc::internal));

namespace pm::c {
namespace {

// The last error of this thread: a fixed buffer, so that storing a message never allocates.
constexpr std::size_t message_capacity = 1024;
thread_local char last_message[message_capacity];

}  // namespace

int set_error(int status, const char* message, const char* prefix) noexcept {
  if (message == nullptr) message = "";
  if (prefix != nullptr) {
    std::snprintf(last_message, message_capacity, "%s: %s", prefix, message);
  } else {
    std::snprintf(last_message, message_capacity, "%s", message);
  }
  return status;
}

void clear_error() noexcept {
  last_message[0] = '\0';
}

int status_of(pm::errc code) noexcept {
  const int value = static_cast<int>(code);
  if (value >= static_cast<int>(pm::errc::usage) && value <= static_cast<int>(pm::errc::internal))
    return -value;
  return PM_E_INTERNAL;
}

void invalid(const char* function, const std::string& what) {
  throw c_error{PM_E_INVALID, std::string(function) + ": " + what};
}

void check_rank(const char* function, std::uint64_t rank, std::uint64_t size) {
  if (rank >= size) {
    invalid(function, "rank " + std::to_string(rank) + " is outside the job (" +
                          std::to_string(size) + " ranks)");
  }
}

void check_version(const char* function, const char* type, unsigned version, unsigned current) {
  if (version >= 1 && version <= current) return;
  throw c_error{PM_E_VERSION, std::string(function) + ": " + type + " version " +
                                  std::to_string(version) + " is not known to libpm-c " +
                                  PM_VERSION_STRING + " (it knows 1.." + std::to_string(current) +
                                  "; start from the *_INIT macro)"};
}

char* copy_string(const std::string& s) {
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

char** copy_strings(const std::vector<std::string>& v) {
  auto** out = static_cast<char**>(std::calloc(v.size() + 1, sizeof(char*)));
  if (out == nullptr) throw std::bad_alloc();
  for (std::size_t i = 0; i < v.size(); ++i) {
    try {
      out[i] = copy_string(v[i]);
    } catch (...) {
      pm_strings_free(out);
      throw;
    }
  }
  return out;
}

std::vector<std::string> to_strings(const char* const* array) {
  std::vector<std::string> out;
  if (array == nullptr) return out;
  for (; *array != nullptr; ++array) out.emplace_back(*array);
  return out;
}

}  // namespace pm::c

extern "C" {

unsigned pm_version(void) {
  return PM_VERSION_MAJOR * 10000u + PM_VERSION_MINOR * 100u + PM_VERSION_PATCH;
}

const char* pm_version_string(void) {
  return pm::version_string();
}

const char* pm_last_error(void) {
  return pm::c::last_message;
}

const char* pm_status_name(int status) {
  switch (status) {
    case PM_OK:
      return "PM_OK";
    case PM_E_USAGE:
      return "PM_E_USAGE";
    case PM_E_PARSE:
      return "PM_E_PARSE";
    case PM_E_ALLOCATION:
      return "PM_E_ALLOCATION";
    case PM_E_MAPPING:
      return "PM_E_MAPPING";
    case PM_E_ENV:
      return "PM_E_ENV";
    case PM_E_LAUNCH:
      return "PM_E_LAUNCH";
    case PM_E_NOT_FOUND:
      return "PM_E_NOT_FOUND";
    case PM_E_NOT_EXECUTABLE:
      return "PM_E_NOT_EXECUTABLE";
    case PM_E_SYSTEM:
      return "PM_E_SYSTEM";
    case PM_E_INTERNAL:
      return "PM_E_INTERNAL";
    case PM_E_INVALID:
      return "PM_E_INVALID";
    case PM_E_NOMEM:
      return "PM_E_NOMEM";
    case PM_E_VERSION:
      return "PM_E_VERSION";
    default:
      return "unknown status";
  }
}

void pm_free(void* p) {
  std::free(p);
}

void pm_strings_free(char** strings) {
  if (strings == nullptr) return;
  for (char** s = strings; *s != nullptr; ++s) std::free(*s);
  std::free(static_cast<void*>(strings));
}

}  // extern "C"
