#include "cuvmm/fd_utils.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

namespace cuvmm {

int dup_cloexec(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }

bool fd_is_open(int fd) { return fd >= 0 && fcntl(fd, F_GETFD) != -1; }

int close_fd(int fd) { return close(fd); }

long long fd_soft_limit() {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long long>(rl.rlim_cur);
}

long long count_open_fds() {
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    long long n = 0;
    while (struct dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    return n - 1;  // the directory's own fd
}

std::string fd_limit_hint() {
    int saved = errno;
    long long limit = fd_soft_limit();
    long long open = count_open_fds();
    bool at_limit = open < 0 && (errno == EMFILE || errno == ENFILE);  // could not even open /proc/self/fd
    errno = saved;
    if (at_limit) {
        return "the process is at its file descriptor limit (RLIMIT_NOFILE soft limit " + std::to_string(limit) +
               "): raise it (ulimit -n, or setrlimit) or close descriptors you no longer need";
    }
    if (limit < 0 || open < 0 || open + 2 < limit) return "";
    return "the process is at its file descriptor limit (" + std::to_string(open) + " open, RLIMIT_NOFILE soft limit " +
           std::to_string(limit) + "): raise it (ulimit -n, or setrlimit) or close descriptors you no longer need";
}

}  // namespace cuvmm
