#include "cuvmm/checked_copy.hpp"

#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace cuvmm {
namespace {

// One direction: `read` copies from the "remote" iovec (the mapping) into the local one;
// otherwise the local iovec (src) is written to the remote one (the mapping). The mapping
// is always the remote side, which the kernel reaches through get_user_pages: a page that
// is gone ends the copy there (a short count), or fails it (EFAULT) when it is the first.
long long copy_checked(void* local, void* remote, size_t n, bool read) {
    // The calling thread's id, not getpid(): it names the same memory, and this thread is
    // alive, where the process's first thread may have exited (an embedded JVM): ESRCH.
    const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
    size_t done = 0;
    while (done < n) {
        iovec l{static_cast<char*>(local) + done, n - done};
        iovec r{static_cast<char*>(remote) + done, n - done};
        ssize_t got = read ? ::process_vm_readv(self, &l, 1, &r, 1, 0) : ::process_vm_writev(self, &l, 1, &r, 1, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EFAULT) return static_cast<long long>(done);  // the page at `done` is gone
            return -static_cast<long long>(errno);  // not a lost page: the caller says which

        }
        if (got == 0) return static_cast<long long>(done);
        done += static_cast<size_t>(got);
        // A short count stops at the first page that could not be reached; asking again makes
        // the kernel say EFAULT for it, which ends the loop above.
    }
    return static_cast<long long>(done);
}

}  // namespace

long long copy_from_mapping(void* dst, const void* mapping, size_t n) {
    return copy_checked(dst, const_cast<void*>(mapping), n, true);
}

long long copy_to_mapping(void* mapping, const void* src, size_t n) {
    return copy_checked(const_cast<void*>(src), mapping, n, false);
}

}  // namespace cuvmm
