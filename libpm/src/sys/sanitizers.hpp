#pragma once
// Which sanitizer this file is compiled under, in one spelling for GCC (__SANITIZE_*__) and clang
// (__has_feature), for the few places that must act differently under one.

#if defined(__SANITIZE_THREAD__)
#define PM_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PM_THREAD_SANITIZER 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define PM_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PM_ADDRESS_SANITIZER 1
#endif
#endif
