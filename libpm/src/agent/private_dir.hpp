// The agent's private directories (PMIx's tmpdir under $TMPDIR, Open MPI's shared-memory
// segments under /dev/shm): made, checked and removed without ever following a link or entering a
// directory another user owns or may write to (docs/security.md, "Files").
//
// Made: the parent must be this user's or root's, and writable by others only with the sticky
// bit (/tmp, /dev/shm), so that nobody else can rename what is made there; the directory is made
// 0700 by mkdir (which never follows a link and fails on anything that exists), then opened with
// O_NOFOLLOW and checked to be a directory of this user that nobody else may enter.
// Removed: each directory is opened with openat(O_NOFOLLOW | O_DIRECTORY) below the one holding
// it, checked to be this user's, and emptied with unlinkat. A link is removed, never followed; an
// entry of another user is left where it is, with what it holds.
#pragma once

#include <sys/types.h>

#include <string>

#include "link/socket.hpp"

namespace pm::agent {

/// Why `parent` may not hold a private directory ("" when it may): it is not a directory, belongs
/// to another user (not root), or others may write to it without the sticky bit. `parent` itself
/// is followed if it is a link (the user's own $TMPDIR may be one).
std::string unsafe_parent(const std::string& parent);

/// Makes the new directory `path` (0700) and returns it open (O_DIRECTORY, close-on-exec). Throws
/// pm::error(errc::system) with one line naming what is wrong: an unsafe parent, something at
/// `path` already, or a directory that is not this user's alone after all.
pm::link::owned_fd make_private_dir(const std::string& path);

/// Removes `path` and what it holds as described above. False (and `why`) when something was
/// left (another user's entry, an error); a `path` that does not exist is no error.
bool remove_private_tree(const std::string& path, std::string* why = nullptr) noexcept;

/// The private directories `<root>/<prefix><pid>.*` that this user's agents killed by SIGKILL
/// left behind (their pid runs no more): removed as remove_private_tree does. Directories of
/// other users, links and names of running processes are left alone. Returns how many went.
std::size_t remove_stale_private_dirs(const std::string& root, const std::string& prefix) noexcept;

}  // namespace pm::agent
