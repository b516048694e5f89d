// Symbol visibility: libpm is built with hidden visibility; PM_API marks what it exports.
#pragma once

#if defined(PM_STATIC_DEFINE)
#define PM_API
#else
#define PM_API __attribute__((visibility("default")))
#endif
