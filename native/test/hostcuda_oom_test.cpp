// hostcuda_oom_test: the host library (libcuda.so.1 over the host driver) when memory runs
// out while it sets itself up. This program replaces the global operator new (exported
// with -rdynamic, so the dlopen'ed library's allocations come here too) and makes it throw
// std::bad_alloc during the first cuInit, which builds the library. No exception may cross
// the extern "C" exports: cuInit answers CUDA_ERROR_OUT_OF_MEMORY, and keeps answering it,
// every other export CUDA_ERROR_NOT_INITIALIZED (its table may be unfilled: never called).
// Built without sanitizers (they replace operator new themselves).
// Usage: hostcuda_oom_test <path of libcuda.so.1>. One line per failed check, then a summary.
#include "cuvmm/cuda_api.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_fail_new{false};
int g_passed = 0;
int g_failed = 0;

void check(bool ok, const char* what, int line) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL line %d: %s\n", line, what);
    }
}
#define CHECK(e) check((e), #e, __LINE__)
}  // namespace

void* operator new(std::size_t n) {
    if (g_fail_new.load()) throw std::bad_alloc();
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: hostcuda_oom_test <path of libcuda.so.1>\n");
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        std::printf("FAIL: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    auto cu_init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CUresult (*)(int*)>(dlsym(lib, "cuDeviceGetCount"));
    auto sync_v2 = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(lib, "cuCtxSynchronize_v2"));
    auto version = reinterpret_cast<CUresult (*)(int*)>(dlsym(lib, "cuDriverGetVersion"));
    if (cu_init == nullptr || count == nullptr || sync_v2 == nullptr || version == nullptr) {
        std::printf("FAIL: missing exports\n");
        return 1;
    }
    CUresult first = CUDA_SUCCESS;
    bool threw = false;
    g_fail_new = true;
    try {
        first = cu_init(0);  // builds the library: every allocation fails
    } catch (...) {
        threw = true;
    }
    g_fail_new = false;
    CHECK(!threw);  // no exception crosses extern "C"
    CHECK(first == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cu_init(0) == CUDA_ERROR_OUT_OF_MEMORY);  // set up once: stays refused
    int n = -1;
    CHECK(count(&n) == CUDA_ERROR_NOT_INITIALIZED && n == -1);
    CHECK(sync_v2(nullptr) == CUDA_ERROR_NOT_INITIALIZED);
    int v = 0;
    CHECK(version(&v) == CUDA_ERROR_NOT_INITIALIZED);
    std::printf("hostcuda_oom_test: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
