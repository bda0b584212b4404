// The native tests' way to put this process at its open-file limit: RLIMIT_NOFILE lowered to
// the lowest free descriptor, so that every new fd fails with EMFILE until it is restored.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace cuvmm_test {

// Lowers the soft limit on construction (lowered() says whether it could), restores the old
// one on restore() or destruction, whichever comes first.
class AtFdLimit {
public:
    AtFdLimit() {
        if (getrlimit(RLIMIT_NOFILE, &old_) != 0) return;
        int probe = fcntl(0, F_DUPFD_CLOEXEC, 0);  // the lowest free descriptor
        if (probe < 0) return;
        close(probe);
        rlimit low = old_;
        low.rlim_cur = static_cast<rlim_t>(probe);
        lowered_ = setrlimit(RLIMIT_NOFILE, &low) == 0;
    }
    AtFdLimit(const AtFdLimit&) = delete;
    AtFdLimit& operator=(const AtFdLimit&) = delete;
    ~AtFdLimit() { restore(); }

    bool lowered() const { return lowered_; }

    void restore() {
        if (lowered_) setrlimit(RLIMIT_NOFILE, &old_);
        lowered_ = false;
    }

private:
    rlimit old_{};
    bool lowered_ = false;
};

}  // namespace cuvmm_test
