// Small POSIX file-descriptor helpers for descriptors (export, import, fromFds).
// None throws; each reports failure through its return value and errno.
#pragma once

#include <string>

namespace cuvmm {

// fcntl(F_DUPFD_CLOEXEC): a new fd the caller owns, or -1 with errno set.
int dup_cloexec(int fd);

// True when `fd` is an open descriptor of this process.
bool fd_is_open(int fd);

// close(fd), retried on EINTR is NOT done (Linux closes the fd even then). 0 or -1.
int close_fd(int fd);

// Soft RLIMIT_NOFILE, or -1 when unknown.
long long fd_soft_limit();

// Descriptors open now (entries of /proc/self/fd), or -1 when unknown.
long long count_open_fds();

// "" normally; when the process is at (or within 2 of) its fd limit, a sentence saying so
// and what to do, for appending to an error message.
std::string fd_limit_hint();

}  // namespace cuvmm
