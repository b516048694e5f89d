// Writing to a pipe whose reader is gone raises SIGPIPE, whose default action kills the process.
// libpm runs inside programs that did not ignore it (an embedding scheduler, a C program), so
// where it writes to pipes (output destinations, the pipes of an agent link over ssh) it blocks
// SIGPIPE in the writing thread and takes back the one the write raised: the write fails with
// EPIPE, and the process's own signal handling stays as the program set it.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

namespace pm::io {

/// True when the process ignores SIGPIPE (then no guard is needed).
bool sigpipe_ignored() noexcept;

/// writev(); with `guard`, SIGPIPE cannot kill the process (the call fails with EPIPE instead).
ssize_t writev_guarded(int fd, const iovec* iov, int n, bool guard) noexcept;

}  // namespace pm::io
