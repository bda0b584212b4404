// Tests of the host library (native/hostcuda: libcuvmm-hostcuda.so, the CUDA driver API over
// the host driver), as a foreign process sees it: dlopen'ed, never linked.
//
//   H1  it exports exactly cuda.h 13.0's names for what it implements (dlsym), nothing for
//       what it does not (kernels, modules, the 32-bit variants)
//   H2  before cuInit: CUDA_ERROR_NOT_INITIALIZED (cuDriverGetVersion, cuGetErrorName aside)
//   H3  cuGetProcAddress v1 and v2 resolve every entry point of cuvmm's table at cuvmm's
//       versions to the export cuda.h's #defines name; not found / version not sufficient /
//       invalid value answers; the per-thread default stream variants are not found
//   H4  a VMM sequence (create / reserve / map / set access / copy / unmap / release), export
//       and import of a POSIX fd, cuMemGetAddressRange / cuPointerGetAttribute answers
//   H5  a stream, an event, async copies and a host function
//   H5b cuCtxSynchronize_v2(ctx): null = current, another context, an unknown one
//   H6  cuGetErrorName / cuGetErrorString
//   H7  cuvmm's own load_cuda_driver loads it, and says it is the host library (no GPU)
//   H8  `bad-config` mode (run with a bad CUVMM_HOST_* variable): cuInit refuses with
//       INVALID_VALUE, twice, and writes exactly one stderr line, holding <expected text>
// Usage: hostcuda_test <path of libcuda.so.1> [bad-config [<expected text>]] (default text:
// "CUVMM_HOST_DEVICES: \"9\" (expected: an integer from 1 to 8"). Sets CUVMM_HOST_DEVICES=2 itself
// otherwise. Plain main(): one line per failed check, then "N passed, M failed".
#include "cuvmm/driver.hpp"
#include "cuvmm/host_pointers.hpp"
#include "hostcuda/exports.hpp"
#include "test/hostcuda_test_util.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace cuvmm;

void* g_lib = nullptr;
static int g_passed = 0;
static int g_failed = 0;

void check_true(bool ok, const char* expr, int line) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL line %d: %s\n", line, expr);
    }
}

namespace {

using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProcV1 g_v1 = nullptr;
GetProcV2 g_v2 = nullptr;

template <class F>
F sym(const char* name) {
    return reinterpret_cast<F>(dlsym(g_lib, name));
}

// The symbol cuda.h 13.0's #defines name for a table entry (cuvmm asks for each at the
// version in driver_table.hpp, so each maps to that variant).
std::string exported_name(const std::string& base) {
    static const char* const v2[] = {"cuDeviceTotalMem", "cuDevicePrimaryCtxRelease", "cuStreamDestroy",
                                     "cuEventDestroy", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD",
                                     "cuMemsetD8", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                                     "cuMemcpyDtoDAsync", "cuMemHostRegister"};
    for (const char* n : v2) {
        if (base == n) return base + "_v2";
    }
    return base;
}

int open_fds() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d) != nullptr) ++n;
        closedir(d);
    }
    return n;
}

// ---- H1 -------------------------------------------------------------------------------
void test_exports() {
#define EXPORTED(symbol, impl, params, args) CHECK(dlsym(g_lib, #symbol) != nullptr);
    CUVMM_HOSTCUDA_EXPORTS(EXPORTED)
#undef EXPORTED
    CHECK(dlsym(g_lib, "cuInit") != nullptr);
    CHECK(dlsym(g_lib, "cuCtxSynchronize_v2") != nullptr);
    CHECK(g_v1 != nullptr && g_v2 != nullptr);
    CHECK(dlsym(g_lib, "cuvmmHostLibraryDescription") != nullptr);
    for (const char* absent : {"cuModuleLoadData", "cuLaunchKernel", "cuMemcpyHtoD", "cuMemsetD8", "cuDeviceTotalMem",
                               "cuMemGetAddressRange", "cuStreamSynchronize_ptsz",
                               "cuMemcpyHtoD_v2_ptds",
                               // the host driver's C++ functions stay local (exports.map; the
                               // script's nm -D check covers every other _Z* name)
                               "_ZN5cuvmm19install_host_driverERNS_11DriverTableERKNS_16HostDriverConfigE",
                               "_ZN5cuvmm28install_host_pointer_entriesERNS_18HostPointerEntriesE",
                               "_ZN5cuvmm8hostcuda7libraryEv"}) {
        CHECK(dlsym(g_lib, absent) == nullptr);
    }
}

// ---- H2 -------------------------------------------------------------------------------
void test_before_init() {
    int n = -1;
    CHECK(sym<CUresult (*)(int*)>("cuDeviceGetCount")(&n) == CUDA_ERROR_NOT_INITIALIZED);
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop{};
    CHECK(sym<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>(
                  "cuMemCreate")(&h, 2 << 20, &prop, 0) == CUDA_ERROR_NOT_INITIALIZED);
    CUdeviceptr base = 0;
    size_t size = 0;
    CHECK(sym<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>("cuMemGetAddressRange_v2")(&base, &size, 4096) ==
          CUDA_ERROR_NOT_INITIALIZED);
    int version = 0;
    CHECK(sym<CUresult (*)(int*)>("cuDriverGetVersion")(&version) == CUDA_SUCCESS && version == 13000);
    const char* name = nullptr;
    CHECK(sym<CUresult (*)(CUresult, const char**)>("cuGetErrorName")(CUDA_ERROR_NOT_INITIALIZED, &name) ==
              CUDA_SUCCESS &&
          name != nullptr && std::strcmp(name, "CUDA_ERROR_NOT_INITIALIZED") == 0);
}

// ---- H3 -------------------------------------------------------------------------------
struct Answer {
    CUresult rc;
    void* fn;
    CUdriverProcAddressQueryResult status;
};
Answer ask(const char* name, int version, cuuint64_t flags) {
    Answer a{CUDA_SUCCESS, reinterpret_cast<void*>(1), CU_GET_PROC_ADDRESS_SUCCESS};
    a.rc = g_v2(name, &a.fn, version, flags, &a.status);
    void* fn1 = reinterpret_cast<void*>(1);
    CUresult rc1 = g_v1(name, &fn1, version, flags);
    CHECK(rc1 == a.rc && fn1 == a.fn);  // v1 answers as v2 does, minus the status
    return a;
}
bool found(const Answer& a, const char* exported) {
    return a.rc == CUDA_SUCCESS && a.status == CU_GET_PROC_ADDRESS_SUCCESS && a.fn != nullptr &&
           a.fn == dlsym(g_lib, exported);
}
// cuda.h 13.0: "not found" is CUDA_SUCCESS with a null pfn and the symbol status.
bool not_found(const Answer& a, CUdriverProcAddressQueryResult status) {
    return a.rc == CUDA_SUCCESS && a.fn == nullptr && a.status == status;
}

void test_proc_address() {
#define RESOLVED(name, version, params)                                                                  \
    CHECK(found(ask(#name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM), exported_name(#name).c_str())); \
    CHECK(found(ask(#name, version, CU_GET_PROC_ADDRESS_DEFAULT), exported_name(#name).c_str()));
    CUVMM_DRIVER_ENTRY_POINTS(RESOLVED)
#undef RESOLVED
    CHECK(found(ask("cuMemGetAddressRange", 3020, 0), "cuMemGetAddressRange_v2"));
    CHECK(found(ask("cuPointerGetAttribute", 4000, 0), "cuPointerGetAttribute"));
    CHECK(found(ask("cuGetProcAddress", 11030, 0), "cuGetProcAddress"));
    CHECK(found(ask("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2"));
    // Older variants with the same ABI are ours; newer requests get the newest variant.
    CHECK(found(ask("cuStreamDestroy", 3020, 0), "cuStreamDestroy"));
    CHECK(found(ask("cuStreamDestroy", 13000, 0), "cuStreamDestroy_v2"));
    CHECK(found(ask("cuEventElapsedTime", 12080, 0), "cuEventElapsedTime_v2"));
    CHECK(found(ask("cuMemcpyHtoD", 13000, 0), "cuMemcpyHtoD_v2"));
    // Not implemented: unknown names, decorated names, kernels, ABI variants we lack.
    CHECK(not_found(ask("cuModuleLoadData", 13000, 0), CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    CHECK(not_found(ask("cuLaunchKernel", 4000, 0), CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    CHECK(not_found(ask("cuMemcpyHtoD_v2", 13000, 0), CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    CHECK(not_found(ask("cuMemcpyHtoD", 3010, 0), CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));  // 32-bit
    CHECK(found(ask("cuCtxSynchronize", 12080, 0), "cuCtxSynchronize"));
    CHECK(found(ask("cuCtxSynchronize", 13000, 0), "cuCtxSynchronize_v2"));  // (CUcontext ctx)
    // Older than the first variant.
    CHECK(not_found(ask("cuMemCreate", 10010, 0), CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
    CHECK(not_found(ask("cuMemRetainAllocationHandle", 10020, 0), CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
    CHECK(not_found(ask("cuGetProcAddress", 11020, 0), CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
    // Per-thread default stream: no _ptsz/_ptds variant here; names without one resolve.
    CHECK(not_found(ask("cuStreamSynchronize", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
                    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    CHECK(not_found(ask("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
                    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    CHECK(found(ask("cuStreamSynchronize", 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "cuStreamSynchronize"));
    CHECK(found(ask("cuMemCreate", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "cuMemCreate"));
    // Invalid requests.
    CHECK(ask("cuMemCreate", 13010, 0).rc == CUDA_ERROR_INVALID_VALUE);  // newer than the driver
    CHECK(ask("cuMemCreate", 13000, 4).rc == CUDA_ERROR_INVALID_VALUE);  // unknown flag
    CHECK(g_v2(nullptr, nullptr, 13000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
    void* fn = nullptr;
    CHECK(g_v2("cuInit", &fn, 13000, 0, nullptr) == CUDA_SUCCESS && fn == dlsym(g_lib, "cuInit"));  // status optional
}

// The table, filled through cuGetProcAddress_v2 as cuvmm's loader does.
DriverTable resolve_table() {
    DriverTable t;
#define FILL(name, version, params)                                                   \
    {                                                                                 \
        void* fn = nullptr;                                                           \
        g_v2(#name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr);        \
        t.name = reinterpret_cast<decltype(t.name)>(fn);                              \
    }
    CUVMM_DRIVER_ENTRY_POINTS(FILL)
#undef FILL
    return t;
}

}  // namespace

void test_vmm_and_streams(const DriverTable& t);  // hostcuda_test_vmm.cpp

namespace {

// ---- H5b: cuCtxSynchronize_v2(ctx) (CUDA 13.0): null = the current context; another
// context is synchronized without staying current; an unknown one is INVALID_CONTEXT.
void test_ctx_synchronize_v2(const DriverTable& t) {
    auto sync = sym<CUresult (*)(CUcontext)>("cuCtxSynchronize_v2");
    CHECK(sync != nullptr);
    if (sync == nullptr) return;
    CUcontext c0 = nullptr, c1 = nullptr, current = nullptr;
    CHECK(sync(nullptr) == CUDA_ERROR_INVALID_CONTEXT);  // none current, as cuCtxSynchronize()
    CHECK(t.cuDevicePrimaryCtxRetain(&c0, 0) == CUDA_SUCCESS && t.cuDevicePrimaryCtxRetain(&c1, 1) == CUDA_SUCCESS);
    CHECK(t.cuCtxSetCurrent(c0) == CUDA_SUCCESS);
    CHECK(sync(nullptr) == CUDA_SUCCESS);
    CHECK(sync(c0) == CUDA_SUCCESS);
    CHECK(sync(c1) == CUDA_SUCCESS);
    CHECK(t.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == c0);  // c0 stays current
    int bogus = 0;
    CHECK(sync(reinterpret_cast<CUcontext>(&bogus)) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(t.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == c0);
    CHECK(t.cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
    CHECK(t.cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS && t.cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

// ---- H6 -------------------------------------------------------------------------------
void test_error_strings(const DriverTable& t) {
    const char* s = nullptr;
    CHECK(t.cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s) == CUDA_SUCCESS && std::strcmp(s, "CUDA_ERROR_INVALID_VALUE") == 0);
    s = nullptr;
    CHECK(t.cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s) == CUDA_SUCCESS && s != nullptr && *s != '\0');
    s = "x";
    CHECK(t.cuGetErrorName(static_cast<CUresult>(99999), &s) == CUDA_ERROR_INVALID_VALUE && s == nullptr);
    CHECK(t.cuGetErrorName(CUDA_SUCCESS, nullptr) == CUDA_ERROR_INVALID_VALUE);
}

// ---- H7 -------------------------------------------------------------------------------
void test_cuvmm_loader(const char* path) {
    DriverTable t;
    std::string reason;
    bool host_library = false;
    CHECK(load_cuda_driver(t, path, reason, &host_library));
    CHECK(host_library);
    CHECK(reason.find("cuda driver API over the host library (no GPU)") != std::string::npos);
    // Said once: the library's description does not repeat it.
    CHECK(reason.find("(no GPU)") == reason.rfind("(no GPU)"));
    CHECK(reason.find("2 device(s)") != std::string::npos);
    std::printf("load_cuda_driver: %s\n", reason.c_str());
    // glibc loads the file once: cuvmm's table reaches the same exports, the same state.
    CHECK(reinterpret_cast<void*>(t.cuMemcpyHtoD) == dlsym(g_lib, "cuMemcpyHtoD_v2"));
    int n = 0;
    CHECK(t.cuDeviceGetCount(&n) == CUDA_SUCCESS && n == 2);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: hostcuda_test <path of libcuda.so.1> [bad-config [<expected text>]]\n");
        return 2;
    }
    alarm(120);
    const bool bad_config = argc > 2 && std::strcmp(argv[2], "bad-config") == 0;
    if (!bad_config) setenv("CUVMM_HOST_DEVICES", "2", 1);
    g_lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (g_lib == nullptr) {
        std::printf("FAIL: dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    g_v1 = sym<GetProcV1>("cuGetProcAddress");
    g_v2 = sym<GetProcV2>("cuGetProcAddress_v2");
    auto cu_init = sym<CUresult (*)(unsigned)>("cuInit");
    if (bad_config) {  // H8
        // cuInit refuses, twice, and says why on stderr exactly once (captured in a file).
        const char* expected = argc > 3 ? argv[3] : "CUVMM_HOST_DEVICES: \"9\" (expected: an integer from 1 to 8";
        char path[] = "/tmp/hostcuda_test_stderr_XXXXXX";
        int err_fd = mkstemp(path);
        CHECK(err_fd >= 0);
        if (err_fd < 0) return 1;
        unlink(path);
        std::fflush(stderr);
        int saved = dup(2);
        dup2(err_fd, 2);
        CUresult first = cu_init(0);
        CUresult second = cu_init(0);
        std::fflush(stderr);
        dup2(saved, 2);
        close(saved);
        CHECK(first == CUDA_ERROR_INVALID_VALUE);
        CHECK(second == CUDA_ERROR_INVALID_VALUE);  // stays refused
        std::string said;
        char buf[512];
        ssize_t got;
        lseek(err_fd, 0, SEEK_SET);
        while ((got = read(err_fd, buf, sizeof buf)) > 0) said.append(buf, static_cast<size_t>(got));
        close(err_fd);
        std::printf("bad config said: %s", said.c_str());
        size_t lines = 0;
        for (char c : said) lines += c == '\n' ? 1 : 0;
        CHECK(lines == 1);  // once, for both calls
        CHECK(said.rfind("cuvmm host library: cuInit refused: ", 0) == 0);
        CHECK(said.find(expected) != std::string::npos);
        int n = 0;
        CHECK(sym<CUresult (*)(int*)>("cuDeviceGetCount")(&n) == CUDA_ERROR_NOT_INITIALIZED);
    } else {
        const int fds_before = open_fds();
        test_exports();
        if (g_v1 == nullptr || g_v2 == nullptr || cu_init == nullptr) {
            std::printf("FAIL: no cuGetProcAddress / cuInit\n");
            return 1;
        }
        test_before_init();
        test_proc_address();
        CHECK(cu_init(1) == CUDA_ERROR_INVALID_VALUE);
        CHECK(cu_init(0) == CUDA_SUCCESS);
        DriverTable t = resolve_table();
        test_vmm_and_streams(t);
        test_ctx_synchronize_v2(t);
        test_error_strings(t);
        CHECK(open_fds() == fds_before);  // every fd the sequence made is closed again
        test_cuvmm_loader(argv[1]);
    }
    std::printf("hostcuda_test%s: %d passed, %d failed\n", bad_config ? " (bad config)" : "", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
