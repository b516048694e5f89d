// The one guard around every extern "C" body, and the helpers the bodies share.
//
// guard(function, body): clears this thread's last error, runs body(function) — the function's
// name, for messages, since __func__ in a lambda is "operator()" — which returns PM_OK or throws,
// clears the last error again on success (a callback's re-entrant call that failed must not leave
// its message behind a call that succeeded), and turns whatever it throws into a pm_status plus a
// message in a fixed thread-local buffer. Nothing escapes: pm::error keeps its code and its
// one-line message, std::bad_alloc becomes PM_E_NOMEM (with a message copied from a literal: no
// allocation on that path), anything else PM_E_INTERNAL. Bodies report bad arguments by throwing
// c_error.
#pragma once

#include <boost/system/system_error.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "pm/error.hpp"
#include "pm/pm.h"

namespace pm::c {

/// A failure the C layer itself detects (a NULL argument, an unknown options version, ...).
struct c_error {
  int status;
  std::string message;
};

/// Stores `status` and "prefix: message" (or `message`) as this thread's last error, truncated to
/// the buffer; never allocates. Returns `status`.
int set_error(int status, const char* message, const char* prefix = nullptr) noexcept;
void clear_error() noexcept;
int status_of(pm::errc code) noexcept;

template <class Body>
int guard(const char* function, Body&& body) noexcept {
  clear_error();
  try {
    const int status = body(function);
    if (status == PM_OK) clear_error();
    return status;
  } catch (const c_error& e) {
    return set_error(e.status, e.message.c_str());
  } catch (const pm::error& e) {
    return set_error(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(PM_E_NOMEM, "out of memory");
  } catch (const std::system_error& e) {
    // The system refused (EMFILE, ENOMEM from a system call), not a bug of libpm.
    return set_error(PM_E_SYSTEM, e.what(), function);
  } catch (const boost::system::system_error& e) {
    return set_error(PM_E_SYSTEM, e.what(), function);
  } catch (const std::exception& e) {
    return set_error(PM_E_INTERNAL, e.what(), function);
  } catch (...) {
    return set_error(PM_E_INTERNAL, "internal error: an unknown exception", function);
  }
}

/// Throws c_error(PM_E_INVALID) "function: 'name' is NULL" when `p` is NULL.
template <class T>
void require(const char* function, const char* name, const T* p) {
  if (p == nullptr) throw c_error{PM_E_INVALID, std::string(function) + ": '" + name + "' is NULL"};
}

[[noreturn]] void invalid(const char* function, const std::string& what);
/// invalid() "rank R is outside the job (N ranks)" unless rank < size.
void check_rank(const char* function, std::uint64_t rank, std::uint64_t size);

/// Checks an options or output struct's version: 1 .. `current`, else PM_E_VERSION naming both.
void check_version(const char* function, const char* type, unsigned version, unsigned current);

/// The integer a C caller stored in an enum-typed field or parameter. C allows any int there; in
/// C++ loading a value outside the enumerators' range is undefined (UBSan's -fsanitize=enum), so
/// the bits are copied instead of loaded as the enum.
template <class E>
std::underlying_type_t<E> raw_value(const E& e) noexcept {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

/// A malloc'd copy (pm_free frees it); throws std::bad_alloc.
char* copy_string(const std::string& s);
/// A malloc'd NULL-terminated array of malloc'd copies (pm_strings_free frees it).
char** copy_strings(const std::vector<std::string>& v);
/// A NULL-terminated C array as strings (NULL: empty).
std::vector<std::string> to_strings(const char* const* array);

}  // namespace pm::c
