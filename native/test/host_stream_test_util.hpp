// Shared helpers of host_stream_test*.cpp: checks (thread-safe counters), the driver table,
// device memory and pinned memory that clean up after themselves, a Gate (a host function
// that blocks its stream until the test opens it, bounded) and a Counter host function.
#pragma once

#include "cuvmm/cuda_errors.hpp"
#include "cuvmm/driver_table.hpp"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

using namespace cuvmm;

inline std::atomic<int> g_passed{0};
inline std::atomic<int> g_failed{0};
inline DriverTable T;
inline CUcontext g_ctx[2] = {nullptr, nullptr};

inline void check_rc(CUresult got, CUresult want, const char* expr, const char* file, int line) {
    if (got == want) {
        ++g_passed;
        return;
    }
    ++g_failed;
    const char* g = result_name(got);
    const char* w = result_name(want);
    std::printf("FAIL %s:%d: %s returned %s, expected %s\n", file, line, expr, g ? g : "?", w ? w : "?");
}

inline void check_true(bool ok, const char* expr, const char* file, int line) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL %s:%d: %s\n", file, line, expr);
    }
}

#define EXPECT_RC(want, expr) check_rc((expr), (want), #expr, __FILE__, __LINE__)
#define OK(expr) check_rc((expr), CUDA_SUCCESS, #expr, __FILE__, __LINE__)
#define CHECK(cond) check_true((cond), #cond, __FILE__, __LINE__)

// One granule of device memory on `dev`, read-write for `dev`.
struct Dev {
    CUdeviceptr p = 0;
    size_t size = 0;
    CUmemGenericAllocationHandle h = 0;
    // One granule of device `dev`.
    explicit Dev(int dev) : Dev(dev, 0) {}
    // `bytes` (a multiple of the granularity) of device `dev`; 0: one granule.
    Dev(int dev, size_t bytes) {
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        if (bytes == 0) OK(T.cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        else size = bytes;
        OK(T.cuMemCreate(&h, size, &prop, 0));
        OK(T.cuMemAddressReserve(&p, size, 0, 0, 0));
        OK(T.cuMemMap(p, size, 0, h, 0));
        CUmemAccessDesc a{};
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = dev;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        OK(T.cuMemSetAccess(p, size, &a, 1));
    }
    void unmap() {
        if (h == 0) return;
        OK(T.cuMemUnmap(p, size));
        OK(T.cuMemRelease(h));
        h = 0;
    }
    ~Dev() {
        unmap();
        OK(T.cuMemAddressFree(p, size));
    }
};

struct Pinned {
    unsigned char* p = nullptr;
    explicit Pinned(size_t n) {
        void* v = nullptr;
        OK(T.cuMemHostAlloc(&v, n, 0));
        p = static_cast<unsigned char*>(v);
        if (p) std::memset(p, 0, n);
    }
    ~Pinned() {
        if (p) OK(T.cuMemFreeHost(p));
    }
};

// A host function that holds its stream until open() (or 30 s, so a broken test ends).
struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool is_open = false;
    std::atomic<bool> entered{false};
    void open() {
        std::lock_guard<std::mutex> l(m);
        is_open = true;
        cv.notify_all();
    }
    static void CUDA_CB fn(void* p) {
        auto* g = static_cast<Gate*>(p);
        g->entered = true;
        std::unique_lock<std::mutex> l(g->m);
        g->cv.wait_for(l, std::chrono::seconds(30), [&] { return g->is_open; });
    }
};

struct Counter {
    std::atomic<int> n{0};
    static void CUDA_CB fn(void* p) { ++static_cast<Counter*>(p)->n; }
};

// Polls cuStreamQuery until SUCCESS, for at most 10 s (a bounded wait, not a timing check).
inline bool wait_done(CUstream s) {
    for (int i = 0; i < 10000; ++i) {
        CUresult r = T.cuStreamQuery(s);
        if (r == CUDA_SUCCESS) return true;
        if (r != CUDA_ERROR_NOT_READY) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

// Runs `body` in a fork()ed child (it faults its device for good); the child's exit status
// is its number of failed checks, which the parent adds to its own.
template <class Fn>
void in_child(const char* what, Fn body) {
    if (const char* e = std::getenv("CUVMM_TEST_NO_FORK"); e && *e == '1') return;
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        g_failed = 0;
        body();
        std::fflush(stdout);
        _exit(g_failed.load() > 100 ? 100 : g_failed.load());
    }
    int status = 0;
    waitpid(pid, &status, 0);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) std::printf("FAIL child test %s: status %d\n", what, status);
    check_true(ok, what, __FILE__, __LINE__);
}

// Runs `call` on another thread and reports whether it returned within 10 s (a bounded
// wait: false means it blocked, e.g. behind a gate; the thread is joined either way once
// the caller opens the gate).
template <class Fn>
bool returns_while_blocked(std::thread& t, Fn call) {
    std::atomic<bool> done{false};
    t = std::thread([call, &done] {
        T.cuCtxSetCurrent(g_ctx[0]);
        call();
        done = true;
    });
    for (int i = 0; i < 10000 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done.load();
}

// Waits (bounded, 10 s) until the thread `tid` is asleep in the kernel (state S in
// /proc/self/task/<tid>/stat: blocked on a futex, e.g. waiting for a stream) or `done` is
// set. A condition, not a delay: a call that wrongly returns sets `done` first, one that
// correctly waits is seen blocked. Returns `done` as last seen.
inline bool blocked_or_done(pid_t tid, const std::atomic<bool>& done) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
    for (int i = 0; i < 100000 && !done.load(); ++i) {
        if (std::FILE* f = std::fopen(path, "r")) {
            char buf[256] = {};
            size_t n = std::fread(buf, 1, sizeof buf - 1, f);
            std::fclose(f);
            const char* close = n > 0 ? std::strrchr(buf, ')') : nullptr;
            if (close != nullptr && close[1] == ' ' && close[2] == 'S') break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return done.load();
}

inline pid_t this_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

void run_more_tests();
void run_inline_tests();  // host_stream_test_inline.cpp

inline void setup() {
    HostDriverConfig c;
    c.device_count = 2;
    c.granularity = size_t(64) << 10;
    install_host_driver(T, c);
    CUstream s = nullptr;
    CUevent e = nullptr;
    void* p = nullptr;
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuStreamCreateWithPriority(&s, 0, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuEventCreate(&e, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuMemHostAlloc(&p, 4096, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuStreamQuery(nullptr));
    OK(T.cuInit(0));
    OK(T.cuDevicePrimaryCtxRetain(&g_ctx[0], 0));
    OK(T.cuDevicePrimaryCtxRetain(&g_ctx[1], 1));
    OK(T.cuCtxSetCurrent(g_ctx[0]));
}
