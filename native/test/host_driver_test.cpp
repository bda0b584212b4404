// Tests of the host driver (native/host/): every misuse rule returns its
// documented CUresult, the happy path works end to end, per-device access is enforced in
// the bookkeeping, foreign fds are refused on import, nothing leaks (fds, live counts),
// and copies racing unmap/map never crash. Plain main(): prints one line per failed
// check and last "N passed, M failed"; exits non-zero on any failure.
#include "cuvmm/cuda_errors.hpp"
#include "cuvmm/driver_table.hpp"
#include "fd_limit_test_util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <new>

// Fault injection for the exception rule (test_allocation_failure): once armed with n > 0,
// the n-th operator new on this thread throws std::bad_alloc; every other one allocates.
thread_local long tl_fail_new_at = 0;

void* operator new(std::size_t n) {
    if (tl_fail_new_at > 0 && --tl_fail_new_at == 0) throw std::bad_alloc();
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace cuvmm;

namespace cuvmm {
namespace host {
size_t cgroup_memory_limit(const char* proc_cgroup_path, const char* mountinfo_path);  // devices.cpp
}  // namespace host
}  // namespace cuvmm

namespace {

int g_passed = 0;
int g_failed = 0;
DriverTable T;
size_t G = 0;  // granularity

const char* name_of(CUresult r) {
    const char* n = result_name(r);
    return n ? n : "(unknown CUresult)";
}

void check_rc(CUresult got, CUresult want, const char* expr, int line) {
    if (got == want) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL line %d: %s returned %s (%d), expected %s (%d)\n", line, expr, name_of(got),
                    static_cast<int>(got), name_of(want), static_cast<int>(want));
    }
}

void check_true(bool ok, const char* expr, int line) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL line %d: %s\n", line, expr);
    }
}

#define EXPECT_RC(want, expr) check_rc((expr), (want), #expr, __LINE__)
#define OK(expr) check_rc((expr), CUDA_SUCCESS, #expr, __LINE__)
#define CHECK(cond) check_true((cond), #cond, __LINE__)

int open_fd_count() {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    return n;
}

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

CUmemAllocationProp prop_on(CUmemLocationType type, int id, unsigned handle_types) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    p.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
    return p;
}

CUmemAllocationProp dev_prop(int dev, unsigned handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return prop_on(CU_MEM_LOCATION_TYPE_DEVICE, dev, handle_types);
}

CUmemAccessDesc access(CUmemLocationType type, int id, CUmemAccess_flags flags) {
    CUmemAccessDesc d{};
    d.location.type = type;
    d.location.id = id;
    d.flags = flags;
    return d;
}

// One granule of `first` (an allocation made with `first_prop`) at va and one DEVICE-located
// granule of device 0 at va + G, in one reservation: the shape of the tests that compare what
// the host may do with host-located and with device-located memory side by side.
struct SideBySide {
    CUmemGenericAllocationHandle first = 0, device = 0;
    CUdeviceptr va = 0;

    explicit SideBySide(const CUmemAllocationProp& first_prop) {
        CUmemAllocationProp pd = dev_prop(0);
        OK(T.cuMemCreate(&first, G, &first_prop, 0));
        OK(T.cuMemCreate(&device, G, &pd, 0));
        OK(T.cuMemAddressReserve(&va, 2 * G, 0, 0, 0));
        OK(T.cuMemMap(va, G, 0, first, 0));
        OK(T.cuMemMap(va + G, G, 0, device, 0));
    }
    ~SideBySide() {
        OK(T.cuMemUnmap(va, 2 * G));
        OK(T.cuMemAddressFree(va, 2 * G));
        OK(T.cuMemRelease(first));
        OK(T.cuMemRelease(device));
    }
};

// cuMemGetAccess of `location` at `at`, or 1000 when the call fails.
unsigned long long access_at(const CUmemLocation& location, CUdeviceptr at) {
    unsigned long long f = 99;
    return T.cuMemGetAccess(&f, &location, at) == CUDA_SUCCESS ? f : 1000;
}

CUmemAccessDesc dev_access(int dev, CUmemAccess_flags flags) {
    return access(CU_MEM_LOCATION_TYPE_DEVICE, dev, flags);
}

unsigned long long get_access(int dev, CUdeviceptr p) {
    CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, dev};
    unsigned long long f = 99;
    CUresult r = T.cuMemGetAccess(&f, &loc, p);
    return r == CUDA_SUCCESS ? f : 1000 + static_cast<unsigned long long>(r);
}

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

// The seals cuMemCreate puts on its memfds; import requires exactly these.
constexpr int kDriverSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// A memfd created outside the driver, with a chosen name/size/seals, to feed import.
int make_memfd(const char* name, size_t size, int seals) {
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0 || (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

void* os_handle(int fd) { return reinterpret_cast<void*>(static_cast<intptr_t>(fd)); }

constexpr CUmemAllocationHandleType kPosix = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

// ---------------------------------------------------------------------------------------

void test_table_and_init() {
#define CUVMM_TEST_NONNULL(name, version, params) check_true(T.name != nullptr, "table." #name " set", __LINE__);
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_TEST_NONNULL)
#undef CUVMM_TEST_NONNULL

    int count = 0;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    char byte = 0;
    CUdeviceptr ptr = 0;
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuDeviceGetCount(&count));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuMemCreate(&h, G, &p, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuMemAddressReserve(&ptr, G, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuMemcpyHtoD(0x1000, &byte, 0));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuCtxSynchronize());
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuStreamSynchronize(nullptr));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuMemRelease(0x10000));

    int version = 0;
    OK(T.cuDriverGetVersion(&version));
    CHECK(version == CUDA_VERSION);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDriverGetVersion(nullptr));

    const char* s = nullptr;
    OK(T.cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(s != nullptr && std::strcmp(s, "CUDA_ERROR_INVALID_VALUE") == 0);
    OK(T.cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s != nullptr && s[0] != '\0');
    s = "sentinel";
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuGetErrorName(static_cast<CUresult>(123456), &s));
    CHECK(s == nullptr);
    s = "sentinel";
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuGetErrorString(static_cast<CUresult>(123456), &s));
    CHECK(s == nullptr);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuGetErrorName(CUDA_SUCCESS, nullptr));

    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuInit(1));
    EXPECT_RC(CUDA_ERROR_NOT_INITIALIZED, T.cuDeviceGetCount(&count));
    OK(T.cuInit(0));
    OK(T.cuInit(0));  // idempotent
}

void test_devices() {
    int count = 0;
    OK(T.cuDeviceGetCount(&count));
    CHECK(count == 2);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetCount(nullptr));

    CUdevice d = -1;
    OK(T.cuDeviceGet(&d, 1));
    CHECK(d == 1);
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceGet(&d, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceGet(&d, -1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGet(nullptr, 0));

    char name[64];
    OK(T.cuDeviceGetName(name, sizeof name, 1));
    CHECK(std::strcmp(name, "cuvmm host device 1") == 0);
    char small[5];
    OK(T.cuDeviceGetName(small, sizeof small, 0));
    CHECK(std::strcmp(small, "cuvm") == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetName(name, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetName(name, -3, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetName(nullptr, 10, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceGetName(name, sizeof name, 7));

    size_t mem = 0;
    OK(T.cuDeviceTotalMem(&mem, 0));
    CHECK(mem > 0);
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceTotalMem(&mem, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceTotalMem(nullptr, 0));

    struct {
        CUdevice_attribute a;
        int want;
    } attrs[] = {
            {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
            {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
            {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0},
            {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0},
            {CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
            {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
            {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
            {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0},
            {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0},
            {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0},
    };
    for (auto& at : attrs) {
        int v = -1;
        OK(T.cuDeviceGetAttribute(&v, at.a, 1));
        if (v != at.want) {
            ++g_failed;
            std::printf("FAIL: attribute %d = %d, expected %d\n", static_cast<int>(at.a), v, at.want);
        } else {
            ++g_passed;
        }
    }
    int v = 0;
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
    // An attribute outside the enum (audit B6): INVALID_VALUE, not 0.
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(99999), 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(0), 0));
}

CUcontext g_ctx[2] = {nullptr, nullptr};

void test_contexts() {
    CUcontext c = nullptr;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDevicePrimaryCtxRetain(nullptr, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDevicePrimaryCtxRetain(&c, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuDevicePrimaryCtxRelease(0));  // never retained
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDevicePrimaryCtxRelease(5));

    OK(T.cuDevicePrimaryCtxRetain(&g_ctx[0], 0));
    OK(T.cuDevicePrimaryCtxRetain(&g_ctx[1], 1));
    CHECK(g_ctx[0] != nullptr && g_ctx[1] != nullptr && g_ctx[0] != g_ctx[1]);
    OK(T.cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(c == g_ctx[0]);
    OK(T.cuDevicePrimaryCtxRelease(0));  // back to one retain

    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxSynchronize());
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxSetCurrent(reinterpret_cast<CUcontext>(uintptr_t(0xdeadbeef))));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuCtxGetCurrent(nullptr));
    OK(T.cuCtxGetCurrent(&c));
    CHECK(c == nullptr);
    OK(T.cuCtxSetCurrent(g_ctx[1]));
    OK(T.cuCtxGetCurrent(&c));
    CHECK(c == g_ctx[1]);
    OK(T.cuCtxSynchronize());
    OK(T.cuCtxSetCurrent(nullptr));
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxSynchronize());
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    OK(T.cuCtxSynchronize());

    // A context whose primary context was released is gone: the thread's current
    // context no longer works, and it cannot be made current again.
    CUcontext extra = nullptr;
    std::thread([&] {
        OK(T.cuDevicePrimaryCtxRetain(&extra, 1));
        OK(T.cuDevicePrimaryCtxRetain(&extra, 1));  // now 3 retains on device 1
        OK(T.cuCtxSetCurrent(extra));
        OK(T.cuDevicePrimaryCtxRelease(1));
        OK(T.cuDevicePrimaryCtxRelease(1));
        OK(T.cuDevicePrimaryCtxRelease(1));  // 0 retains
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxSynchronize());
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxSetCurrent(extra));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuDevicePrimaryCtxRelease(1));
        OK(T.cuDevicePrimaryCtxRetain(&g_ctx[1], 1));  // keep one for later tests
    }).join();
}

void test_streams() {
    CUstream s = nullptr, s2 = nullptr;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuStreamCreate(nullptr, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuStreamCreate(&s, 7));
    OK(T.cuStreamCreate(&s, 0));
    OK(T.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(s != nullptr && s2 != nullptr && s != s2);
    OK(T.cuStreamSynchronize(s));
    OK(T.cuStreamSynchronize(nullptr));
    OK(T.cuStreamSynchronize(CU_STREAM_LEGACY));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamSynchronize(reinterpret_cast<CUstream>(uintptr_t(0x4242))));
    OK(T.cuStreamDestroy(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamSynchronize(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(nullptr));
    OK(T.cuStreamDestroy(s2));
    std::thread([&] {  // no current context on a fresh thread
        CUstream t = nullptr;
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuStreamCreate(&t, 0));
    }).join();
}

void test_props_and_granularity() {
    size_t g = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(g == G);
    OK(T.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == G);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE,
              T.cuMemGetAllocationGranularity(&g, &p, static_cast<CUmemAllocationGranularity_flags>(2)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAllocationGranularity(nullptr, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAllocationGranularity(&g, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM));

    auto gran = [&](CUmemAllocationProp q) {
        return T.cuMemGetAllocationGranularity(&g, &q, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    };
    CUmemAllocationProp q = dev_prop(0);
    q.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(q));
    q.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(q));
    q.type = static_cast<CUmemAllocationType>(77);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(q));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, gran(dev_prop(2)));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, gran(dev_prop(-1)));
    OK(gran(dev_prop(1)));
    OK(gran(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, 0)));
    OK(gran(prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kPosix)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 1, kPosix)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, kPosix)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_INVALID, 0, 0)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(static_cast<CUmemLocationType>(9), 0, 0)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, kPosix)));  // HOST + fd
    // HOST + any handle type, supported or not: INVALID_VALUE (cuda.h, cuMemCreate; audit B10)
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_FABRIC)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_WIN32)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_WIN32_KMT)));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(dev_prop(0, CU_MEM_HANDLE_TYPE_FABRIC)));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(dev_prop(0, CU_MEM_HANDLE_TYPE_WIN32)));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(dev_prop(0, CU_MEM_HANDLE_TYPE_WIN32_KMT)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(dev_prop(0, 0x10)));
    OK(gran(dev_prop(0, CU_MEM_HANDLE_TYPE_NONE)));
    q = dev_prop(0);
    q.allocFlags.gpuDirectRDMACapable = 1;
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(q));
    q = dev_prop(0);
    q.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, gran(q));
    // win32HandleMetaData: "In all other cases [than a WIN32 handle type], this field is
    // required to be zero" (cuda.h, CUmemAllocationProp). The code is not documented: the
    // host driver refuses it with INVALID_VALUE, for every location and handle type.
    for (CUmemAllocationProp w : {dev_prop(0), dev_prop(0, CU_MEM_HANDLE_TYPE_NONE),
                                  prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, 0),
                                  prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kPosix)}) {
        w.win32HandleMetaData = &g;
        EXPECT_RC(CUDA_ERROR_INVALID_VALUE, gran(w));
    }
}

// Writes `text` to `path`, making the directories on the way.
void write_file(const std::string& path, const std::string& text) {
    for (size_t i = 1; i < path.size(); ++i) {
        if (path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0700);
    }
    FILE* f = std::fopen(path.c_str(), "w");
    CHECK(f != nullptr);
    if (f == nullptr) return;
    std::fputs(text.c_str(), f);
    std::fclose(f);
}

// The memory budget follows the process's memory cgroup (v1 and v2, ancestors included,
// a namespaced mount root, a path outside a mount), read through fake proc files.
void test_cgroup_memory_limit() {
    char tmpl[] = "/tmp/cuvmm-cgroup-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    CHECK(dir != nullptr);
    if (dir == nullptr) return;
    const std::string d = dir;
    const std::string cg = d + "/cgroup", mi = d + "/mountinfo";
    const std::string mem1 = d + "/v1mem", uni = d + "/unified";
    // v1: the cgroup says no limit, its parent 1 GiB: the parent bounds it.
    write_file(mem1 + "/a/b/memory.limit_in_bytes", "9223372036854771712\n");
    write_file(mem1 + "/a/memory.limit_in_bytes", "1073741824\n");
    write_file(mem1 + "/memory.limit_in_bytes", "9223372036854771712\n");
    write_file(mi, "31 30 0:28 / " + d + "/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                   "35 30 0:30 / " + mem1 + " rw,relatime shared:9 - cgroup cgroup rw,memory\n");
    write_file(cg, "5:cpu:/\n4:memory:/a/b\n0::/\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(1) << 30));
    // No memory line, or no mount for it: no limit.
    write_file(cg, "5:cpu:/\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == 0);
    // v2: "max" on the cgroup, 512 MiB on its parent; v1 and v2 both: the smaller.
    write_file(uni + "/x/y/memory.max", "max\n");
    write_file(uni + "/x/memory.max", "536870912\n");
    write_file(mi, "40 22 0:40 / " + uni + " rw,nosuid - cgroup2 cgroup2 rw\n"
                   "35 30 0:30 / " + mem1 + " rw,relatime - cgroup cgroup rw,memory\n");
    write_file(cg, "0::/x/y\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(512) << 20));
    write_file(cg, "4:memory:/a/b\n0::/x/y\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(512) << 20));
    // A cgroup namespace: the mount's root is /x, so /x/y lives at the mount point's y/.
    const std::string ns = d + "/ns";
    write_file(ns + "/y/memory.max", "268435456\n");
    write_file(mi, "40 22 0:40 /x " + ns + " rw - cgroup2 cgroup2 rw\n");
    write_file(cg, "0::/x/y\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(256) << 20));
    // A path outside the mount's root (/xz is not under /x): not read.
    write_file(cg, "0::/xz\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == 0);
    // Unreadable proc files: no limit.
    CHECK(host::cgroup_memory_limit((d + "/none").c_str(), (d + "/none").c_str()) == 0);
    // mountinfo escapes a space as \040 in a mount point and a mount root; /proc/self/cgroup
    // does not (a review: both were compared undecoded and found no limit).
    write_file(d + "/my cg/x/memory.max", "268435456\n");
    write_file(mi, "40 22 0:40 / " + d + "/my\\040cg rw - cgroup2 cgroup2 rw\n");
    write_file(cg, "0::/x\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(256) << 20));
    write_file(d + "/ns2/y/memory.max", "134217728\n");
    write_file(mi, "40 22 0:40 /a\\040b " + d + "/ns2 rw - cgroup2 cgroup2 rw\n");
    write_file(cg, "0::/a b/y\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(128) << 20));
    // v1 memory co-mounted with cpu.
    write_file(d + "/cm/g/memory.limit_in_bytes", "1073741824\n");
    write_file(mi, "35 30 0:30 / " + d + "/cm rw,relatime - cgroup cgroup rw,cpu,memory\n");
    write_file(cg, "4:cpu,memory:/g\n");
    CHECK(host::cgroup_memory_limit(cg.c_str(), mi.c_str()) == (size_t(1) << 30));
    std::string rm = "rm -rf '" + d + "'";
    CHECK(std::system(rm.c_str()) == 0);
}

// One budget for every location: 60% on device 0 leaves no room for 60% on device 1 or on
// the host, however sparse the memfds (they would all fill the same RAM).
void test_one_memory_budget() {
    size_t total = 0;
    OK(T.cuDeviceTotalMem(&total, 0));
    const size_t share = (total * 6 / 10) / G * G;
    CUmemGenericAllocationHandle a = 0, b = 0;
    CUmemAllocationProp d0 = dev_prop(0), d1 = dev_prop(1);
    CUmemAllocationProp hp = prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kPosix);
    OK(T.cuMemCreate(&a, share, &d0, 0));
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuMemCreate(&b, share, &d1, 0));
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuMemCreate(&b, share, &hp, 0));
    OK(T.cuMemRelease(a));
    OK(T.cuMemCreate(&b, share, &d1, 0));  // fits once the first is gone
    OK(T.cuMemRelease(b));
    CHECK(host_live_counts().allocations == 0 && host_live_counts().memfds == 0);
}

void test_create_release() {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(1);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(nullptr, G, &p, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(&h, G, &p, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(&h, 0, &p, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(&h, G + 4096, &p, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(&h, G, nullptr, 0));
    CUmemAllocationProp bad = dev_prop(3);
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuMemCreate(&h, G, &bad, 0));
    bad = dev_prop(0, CU_MEM_HANDLE_TYPE_FABRIC);
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemCreate(&h, G, &bad, 0));
    bad = dev_prop(1);
    bad.win32HandleMetaData = &bad;  // must be zero without a WIN32 handle type (cuda.h)
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemCreate(&h, G, &bad, 0));
    CHECK(h == 0);
    CHECK(host_live_counts().allocations == 0);

    OK(T.cuMemCreate(&h, 4 * G, &p, 0));
    CHECK(h != 0);
    CUmemAllocationProp got{};
    OK(T.cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
          got.location.id == 1 && got.requestedHandleTypes == kPosix);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAllocationPropertiesFromHandle(nullptr, h));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAllocationPropertiesFromHandle(&got, h + 1));
    CHECK(host_live_counts().allocations == 1 && host_live_counts().memfds == 1);

    CUmemGenericAllocationHandle h2 = 0;
    CUmemAllocationProp hp = prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kPosix);
    OK(T.cuMemCreate(&h2, G, &hp, 0));
    CHECK(h2 != h);
    OK(T.cuMemGetAllocationPropertiesFromHandle(&got, h2));
    CHECK(got.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && got.location.id == 0);

    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(0xdeadbeefcafeULL));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(h + 1));
    OK(T.cuMemRelease(h));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(h));  // double release
    OK(T.cuMemRelease(h2));
    CHECK(host_live_counts().allocations == 0 && host_live_counts().memfds == 0);
}

void test_reserve_free() {
    CUdeviceptr p = 0;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(nullptr, G, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, G, 0, 0, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, 0, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, G / 2, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, G, 3 * G, 0, 0));  // not a power of two
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, G, 0, G + 4096, 0));
    size_t huge = (SIZE_MAX / G) * G;
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuMemAddressReserve(&p, huge, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuMemAddressReserve(&p, size_t(1) << 62, 0, 0, 0));
    CHECK(host_live_counts().reservations == 0);

    OK(T.cuMemAddressReserve(&p, 4 * G, 4096, 0, 0));  // alignment below granularity
    CHECK(p != 0 && p % G == 0);
    CUdeviceptr q = 0;
    OK(T.cuMemAddressReserve(&q, G, 16 * G, 0, 0));
    CHECK(q % (16 * G) == 0);
    CHECK(host_live_counts().reservations == 2);

    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressFree(p, 2 * G));  // size mismatch
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressFree(p + G, 3 * G));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressFree(0x12345000, G));
    OK(T.cuMemAddressFree(p, 4 * G));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressFree(p, 4 * G));  // double free

    // The hint: a free, aligned address is honoured exactly.
    CUdeviceptr r = 0;
    OK(T.cuMemAddressReserve(&r, 2 * G, 0, p, 0));
    CHECK(r == p);
    // A hint on an occupied range is best effort: placed elsewhere, not an error.
    CUdeviceptr s = 0;
    OK(T.cuMemAddressReserve(&s, 2 * G, 0, p, 0));
    CHECK(s != 0 && s != p && s % G == 0 && (s + 2 * G <= p || s >= p + 2 * G));
    OK(T.cuMemAddressFree(r, 2 * G));
    OK(T.cuMemAddressFree(s, 2 * G));
    OK(T.cuMemAddressFree(q, G));
    CHECK(host_live_counts().reservations == 0);
}

void test_map_unmap_access() {
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    OK(T.cuMemCreate(&h2, G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 8 * G, 0, 0, 0));
    CUdeviceptr other = 0;
    OK(T.cuMemAddressReserve(&other, 2 * G, 0, 0, 0));

    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, 2 * G, 0, h, 1));         // flags
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, 2 * G, G, h, 0));         // offset
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, 2 * G, 0, h + 1, 0));     // handle
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, 0, 0, h, 0));             // size 0
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, G + 4096, 0, h, 0));      // not granular
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, 4 * G, 0, h, 0));         // > allocation
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va + 4096, G, 0, h, 0));      // ptr not granular
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va + 7 * G, 2 * G, 0, h, 0)); // past reservation end
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(0x200000, G, 0, h, 0));       // no reservation
    CHECK(host_live_counts().mappings == 0);

    OK(T.cuMemMap(va, 2 * G, 0, h, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, G, 0, h2, 0));           // same start
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va + G, G, 0, h2, 0));       // inside
    OK(T.cuMemMap(va + 2 * G, G, 0, h2, 0));                                     // adjacent
    OK(T.cuMemMap(va + 4 * G, G, 0, h2, 0));                                     // a handle may map twice
    CHECK(host_live_counts().mappings == 3);

    // New mappings have no access for anyone.
    CHECK(get_access(0, va) == 0 && get_access(1, va + G) == 0);
    unsigned long long f = 0;
    CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAccess(&f, &loc, va + 3 * G));  // hole
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAccess(nullptr, &loc, va));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAccess(&f, nullptr, va));
    CUmemLocation badloc{CU_MEM_LOCATION_TYPE_DEVICE, 2};
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuMemGetAccess(&f, &badloc, va));

    CUmemAccessDesc rw0 = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, nullptr, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, &rw0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, 0, &rw0, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + 4096, G, &rw0, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G + 4096, &rw0, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, 4 * G, &rw0, 1));  // hole at 3G
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(other, G, &rw0, 1));   // unmapped
    CUmemAccessDesc bad = dev_access(2, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuMemSetAccess(va, G, &bad, 1));
    bad = dev_access(0, static_cast<CUmemAccess_flags>(2));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, &bad, 1));
    bad = access(CU_MEM_LOCATION_TYPE_INVALID, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, &bad, 1));
    // All descriptors are validated before anything changes.
    CUmemAccessDesc mixed[2] = {rw0, dev_access(9, CU_MEM_ACCESS_FLAGS_PROT_READ)};
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuMemSetAccess(va, G, mixed, 2));
    CHECK(get_access(0, va) == 0);

    // Sub-range of a mapping, then a range spanning two mappings.
    OK(T.cuMemSetAccess(va + G, G, &rw0, 1));
    CHECK(get_access(0, va) == 0 && get_access(0, va + G) == 3 && get_access(0, va + 2 * G) == 0);
    CUmemAccessDesc both[2] = {rw0, dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ)};
    OK(T.cuMemSetAccess(va, 3 * G, both, 2));
    CHECK(get_access(0, va + 2 * G + 100) == 3 && get_access(1, va) == 1);
    // HOST_NUMA access on a DEVICE allocation: refused, as cuda.h says (test_host_numa_access).
    CUmemAccessDesc numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, &numa, 1));
    // Host access on a DEVICE allocation: NOT_SUPPORTED (B37, test_device_memory_is_not_host_memory).
    CUmemAccessDesc host = access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemSetAccess(va, G, &host, 1));

    // Unmap must be exactly whole, contiguous mappings.
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(va, G));            // part of a mapping
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(va + G, 2 * G));    // starts mid-mapping
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(va, 5 * G));        // hole at 3G
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(va + 3 * G, G));    // nothing mapped
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(va, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemUnmap(0x200000, G));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressFree(va, 8 * G));  // still mapped
    CHECK(host_live_counts().reservations == 2);
    OK(T.cuMemUnmap(va, 3 * G));                                          // two whole mappings
    CHECK(host_live_counts().mappings == 1);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAccess(&f, &loc, va));
    OK(T.cuMemUnmap(va + 4 * G, G));
    // The VA stays reserved: it can be mapped again.
    OK(T.cuMemMap(va + G, 2 * G, 0, h, 0));
    OK(T.cuMemUnmap(va + G, 2 * G));
    OK(T.cuMemAddressFree(va, 8 * G));
    OK(T.cuMemAddressFree(other, 2 * G));
    OK(T.cuMemRelease(h));
    OK(T.cuMemRelease(h2));
    HostLiveCounts c = host_live_counts();
    CHECK(c.allocations == 0 && c.reservations == 0 && c.mappings == 0 && c.memfds == 0);
}

void test_copies() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    OK(T.cuMemMap(va, 2 * G, 0, h, 0));

    std::vector<unsigned char> src(3 * G / 2), dst(3 * G / 2);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);

    // No access yet: refused, memory untouched, no crash.
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(va, src.data(), 64));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), va, 64));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8(va, 1, 64));

    CUmemAccessDesc d[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                            dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ)};
    OK(T.cuMemSetAccess(va, 2 * G, d, 2));

    OK(T.cuMemcpyHtoD(va + 100, src.data(), src.size()));
    OK(T.cuMemcpyDtoH(dst.data(), va + 100, dst.size()));
    CHECK(std::memcmp(src.data(), dst.data(), src.size()) == 0);
    // DtoD (not overlapping: an overlap is undefined, as on the driver).
    OK(T.cuMemcpyDtoD(va + 2000, va + 100, 1000));
    std::vector<unsigned char> back(1000);
    OK(T.cuMemcpyDtoH(back.data(), va + 2000, back.size()));
    CHECK(std::memcmp(back.data(), src.data(), back.size()) == 0);
    OK(T.cuMemsetD8(va + G - 10, 0xab, 20));
    OK(T.cuMemcpyDtoH(back.data(), va + G - 12, 24));
    CHECK(back[2] == 0xab && back[21] == 0xab);

    // Zero-byte copies succeed without any checks.
    OK(T.cuMemcpyHtoD(0, nullptr, 0));
    OK(T.cuMemcpyDtoD(0, 0, 0));
    OK(T.cuMemsetD8(0x1234, 0, 0));

    // Ranges: outside any mapping, running off the end, wrapping, null host pointers.
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(va + 2 * G - 8, src.data(), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), va + 3 * G, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), 0x1000, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), ~0ULL - 4, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoD(va + 2 * G, va, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoD(va, va + 2 * G, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8(va + 2 * G, 0, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(va, nullptr, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(nullptr, va, 16));
    // Device memory passed as host memory is refused (would fault on unmapped VA).
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE,
              T.cuMemcpyHtoD(va, reinterpret_cast<const void*>(static_cast<uintptr_t>(va + 3 * G)), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE,
              T.cuMemcpyDtoH(reinterpret_cast<void*>(static_cast<uintptr_t>(va + 3 * G)), va, 16));

    // Per-device access: device 1 has READ only (the CPU mapping is READWRITE because
    // of device 0, so this must be enforced by the bookkeeping).
    OK(T.cuCtxSetCurrent(g_ctx[1]));
    OK(T.cuMemcpyDtoH(dst.data(), va + 100, 100));
    CHECK(std::memcmp(dst.data(), src.data(), 100) == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(va, src.data(), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8(va, 0, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoD(va + G, va, 16));
    // Device 1 loses access to the second granule: a copy spanning it is refused.
    CUmemAccessDesc none1 = dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    OK(T.cuMemSetAccess(va + G, G, &none1, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), va + G - 8, 16));
    OK(T.cuMemcpyDtoH(dst.data(), va + G - 16, 16));
    CHECK(get_access(0, va + G) == 3);

    // No current context.
    OK(T.cuCtxSetCurrent(nullptr));
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuMemcpyDtoH(dst.data(), va, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuMemsetD8(va, 0, 16));
    OK(T.cuCtxSetCurrent(g_ctx[0]));

    // Revoking everything makes the CPU mapping PROT_NONE; copies are refused, not faults.
    CUmemAccessDesc none[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_NONE),
                               dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE)};
    OK(T.cuMemSetAccess(va, 2 * G, none, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), va, 16));
    OK(T.cuMemUnmap(va, 2 * G));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(dst.data(), va, 16));
    OK(T.cuMemAddressFree(va, 4 * G));
    OK(T.cuMemRelease(h));
}

// HOST_NUMA access (cuda.h, cuMemSetAccess): only for HOST_NUMA-located allocations, and
// its id is ignored.
void test_host_numa_access() {
    SideBySide m(prop_on(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kPosix));
    const CUdeviceptr va = m.va;
    CUmemLocation host_loc{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};  // its id is changed below
    auto host_access = [&](CUdeviceptr p) { return access_at(host_loc, p); };

    // The id is ignored: 0, 7 and -1 all name the host.
    CUmemAccessDesc numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 7, CU_MEM_ACCESS_FLAGS_PROT_READ);
    OK(T.cuMemSetAccess(va, G, &numa, 1));
    CHECK(host_access(va) == 1);
    numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, -1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemSetAccess(va, G, &numa, 1));
    CHECK(host_access(va) == 3);
    host_loc.id = 5;
    CHECK(host_access(va) == 3);
    host_loc.id = 0;

    // Not on a DEVICE allocation, alone, mixed with a device descriptor, or over a range
    // that also maps a HOST_NUMA allocation; nothing changes.
    numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + G, G, &numa, 1));
    CUmemAccessDesc mixed[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), numa};
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + G, G, mixed, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, 2 * G, mixed, 2));
    CHECK(get_access(0, va) == 0 && get_access(0, va + G) == 0 && host_access(va) == 3 && host_access(va + G) == 0);
    // HOST_NUMA_CURRENT names a host NUMA node too: the same rule (refused on the DEVICE
    // allocation, alone or mixed; accepted on the HOST_NUMA one).
    CUmemAccessDesc cur = access(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + G, G, &cur, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, 2 * G, &cur, 1));
    CUmemAccessDesc mixed_cur[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), cur};
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + G, G, mixed_cur, 2));
    CHECK(get_access(0, va + G) == 0 && host_access(va + G) == 0);
    OK(T.cuMemSetAccess(va, G, &cur, 1));
    CHECK(host_access(va) == 1);
    numa = access(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemSetAccess(va, G, &numa, 1));
    CHECK(host_access(va) == 3);
    // Device access over both is fine.
    OK(T.cuMemSetAccess(va, 2 * G, mixed, 1));
    CHECK(get_access(0, va) == 3 && get_access(0, va + G) == 3);

}

// A host pointer into mapped VMM memory (unified addressing: the real driver resolves it)
// is accepted when the CPU has the access the copy needs, refused where the memcpy would
// fault or the CPU was not granted access.
void test_host_pointers_into_mappings() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    CUmemAllocationProp hp = prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_NONE);
    CUmemAllocationProp dp = dev_prop(0);
    CUmemGenericAllocationHandle ha = 0, hb = 0, hd = 0;
    OK(T.cuMemCreate(&ha, G, &hp, 0));
    OK(T.cuMemCreate(&hb, G, &hp, 0));
    OK(T.cuMemCreate(&hd, G, &dp, 0));
    CUdeviceptr a = 0, b = 0, d = 0;
    OK(T.cuMemAddressReserve(&a, 2 * G, 0, 0, 0));
    OK(T.cuMemAddressReserve(&b, G, 0, 0, 0));
    OK(T.cuMemAddressReserve(&d, G, 0, 0, 0));
    OK(T.cuMemMap(a, G, 0, ha, 0));  // a + G stays reserved but unmapped
    OK(T.cuMemMap(b, G, 0, hb, 0));
    OK(T.cuMemMap(d, G, 0, hd, 0));
    CUmemAccessDesc both[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                               access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
    OK(T.cuMemSetAccess(a, G, both, 2));
    OK(T.cuMemSetAccess(b, G, both, 2));
    OK(T.cuMemSetAccess(d, G, both, 1));  // device 0 only: the CPU was granted nothing
    auto host = [](CUdeviceptr p) { return reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(p)); };

    // Between two host-accessible buffers, either way.
    for (int i = 0; i < 256; ++i) host(b)[i] = static_cast<unsigned char>(i ^ 0x5a);
    OK(T.cuMemcpyHtoD(a + 64, host(b), 256));
    CHECK(std::memcmp(host(a) + 64, host(b), 256) == 0);
    OK(T.cuMemsetD8(a, 0x33, 16));
    OK(T.cuMemcpyDtoH(host(b) + 1000, a, 16));
    CHECK(host(b)[1000] == 0x33 && host(b)[1015] == 0x33);
    // (Overlapping source and destination are undefined, as on the driver: not tested.)

    // Refused: into unmapped reservation memory, running off a mapping into it, memory the
    // CPU has no access to (even though the CPU mapping is readable because device 0 may),
    // and a destination the CPU may only read.
    std::vector<unsigned char> buf(64);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(b, host(a + G), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(host(a + G), b, 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(b, host(a + G - 8), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(b, host(d), 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(host(d), b, 16));
    CUmemAccessDesc host_ro = access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    OK(T.cuMemSetAccess(b, G, &host_ro, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoH(host(b), a, 16));
    OK(T.cuMemcpyHtoD(a, host(b), 16));  // reading it is still fine
    // Once unmapped, the same pointer is refused again (and nothing faults).
    OK(T.cuMemUnmap(b, G));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoD(a, host(b), 16));
    OK(T.cuMemcpyHtoD(a, buf.data(), buf.size()));  // ordinary host memory, of course

    OK(T.cuMemUnmap(a, G));
    OK(T.cuMemUnmap(d, G));
    OK(T.cuMemAddressFree(a, 2 * G));
    OK(T.cuMemAddressFree(b, G));
    OK(T.cuMemAddressFree(d, G));
    OK(T.cuMemRelease(ha));
    OK(T.cuMemRelease(hb));
    OK(T.cuMemRelease(hd));
}

void test_export_import_retain() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    const int fds_before = open_fd_count();
    CUmemGenericAllocationHandle h = 0, hnone = 0;
    CUmemAllocationProp p = dev_prop(1);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    CUmemAllocationProp pn = dev_prop(0, CU_MEM_HANDLE_TYPE_NONE);
    OK(T.cuMemCreate(&hnone, G, &pn, 0));

    int fd = -1;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemExportToShareableHandle(nullptr, h, kPosix, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemExportToShareableHandle(&fd, h, kPosix, 1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemExportToShareableHandle(&fd, h + 1, kPosix, 0));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_NONE, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemExportToShareableHandle(&fd, hnone, kPosix, 0));  // not requested
    CHECK(fd == -1);
    OK(T.cuMemExportToShareableHandle(&fd, h, kPosix, 0));
    CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));

    // Import in the same process; the driver keeps its own dup, our fd stays ours.
    CUmemGenericAllocationHandle imp = 0;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemImportFromShareableHandle(nullptr, os_handle(fd), kPosix));
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED,
              T.cuMemImportFromShareableHandle(&imp, os_handle(fd), CU_MEM_HANDLE_TYPE_FABRIC));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE,
              T.cuMemImportFromShareableHandle(&imp, os_handle(fd), CU_MEM_HANDLE_TYPE_NONE));
    OK(T.cuMemImportFromShareableHandle(&imp, os_handle(fd), kPosix));
    CHECK(imp != 0 && imp != h);
    CHECK(fd_is_open(fd));
    CUmemAllocationProp ip{};
    OK(T.cuMemGetAllocationPropertiesFromHandle(&ip, imp));
    CHECK(ip.location.type == CU_MEM_LOCATION_TYPE_DEVICE && ip.location.id == 1 && ip.requestedHandleTypes == kPosix);
    int fd2 = -1;
    EXPECT_RC(CUDA_ERROR_NOT_PERMITTED, T.cuMemExportToShareableHandle(&fd2, imp, kPosix, 0));
    CHECK(fd2 == -1);
    close(fd);  // the import does not depend on the caller's fd

    // Both views see the same bytes.
    CUdeviceptr a = 0, b = 0;
    OK(T.cuMemAddressReserve(&a, 2 * G, 0, 0, 0));
    OK(T.cuMemAddressReserve(&b, 2 * G, 0, 0, 0));
    OK(T.cuMemMap(a, 2 * G, 0, h, 0));
    OK(T.cuMemMap(b, 2 * G, 0, imp, 0));
    CUmemAccessDesc rw = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemSetAccess(a, 2 * G, &rw, 1));
    OK(T.cuMemSetAccess(b, 2 * G, &rw, 1));
    const char msg[] = "shared through a memfd";
    char out[sizeof msg] = {};
    OK(T.cuMemcpyHtoD(a + G + 5, msg, sizeof msg));
    OK(T.cuMemcpyDtoH(out, b + G + 5, sizeof msg));
    CHECK(std::memcmp(out, msg, sizeof msg) == 0);
    OK(T.cuMemsetD8(b, 0x11, 4));
    unsigned char four[4] = {};
    OK(T.cuMemcpyDtoH(four, a, 4));
    CHECK(four[0] == 0x11 && four[3] == 0x11);

    // Retain from an address: same handle, one more reference.
    CUmemGenericAllocationHandle r = 0;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void*>(a)));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRetainAllocationHandle(&r, reinterpret_cast<void*>(0x1000)));
    OK(T.cuMemRetainAllocationHandle(&r, reinterpret_cast<void*>(static_cast<uintptr_t>(a + G + 17))));
    CHECK(r == h);
    OK(T.cuMemRelease(r));
    OK(T.cuMemGetAllocationPropertiesFromHandle(&ip, h));  // still alive: one reference left

    // Release while mapped: the handle dies, the memory lives until unmapped.
    OK(T.cuMemRelease(h));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemGetAllocationPropertiesFromHandle(&ip, h));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(h));
    std::memset(out, 0, sizeof out);
    OK(T.cuMemcpyDtoH(out, a + G + 5, sizeof msg));
    CHECK(std::memcmp(out, msg, sizeof msg) == 0);
    CHECK(host_live_counts().allocations == 3);  // h (mapped), hnone, imp
    // Retain after full release: the value that mapped it, with one reference (cuda.h: "the
    // same handle value used to map the memory"; audit B47: it was a new value).
    OK(T.cuMemRetainAllocationHandle(&r, reinterpret_cast<void*>(static_cast<uintptr_t>(a))));
    CHECK(r == h);
    OK(T.cuMemGetAllocationPropertiesFromHandle(&ip, r));
    OK(T.cuMemRelease(r));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemRelease(r));
    OK(T.cuMemUnmap(a, 2 * G));  // now the memfd closes
    CHECK(host_live_counts().allocations == 2 && host_live_counts().memfds == 2);
    // The imported copy still has the bytes.
    OK(T.cuMemcpyDtoH(out, b + G + 5, sizeof msg));
    CHECK(std::memcmp(out, msg, sizeof msg) == 0);
    OK(T.cuMemUnmap(b, 2 * G));
    OK(T.cuMemRelease(imp));
    OK(T.cuMemRelease(hnone));
    OK(T.cuMemAddressFree(a, 2 * G));
    OK(T.cuMemAddressFree(b, 2 * G));
    CHECK(host_live_counts().allocations == 0 && host_live_counts().memfds == 0);
    CHECK(open_fd_count() == fds_before);
}

void test_import_refusals() {
    const int fds_before = open_fd_count();
    CUmemGenericAllocationHandle h = 0;
    auto import = [&](int fd) { return T.cuMemImportFromShareableHandle(&h, os_handle(fd), kPosix); };

    int pipefd[2];
    CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(pipefd[0]));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(pipefd[1]));
    int closed = pipefd[0];
    close(pipefd[0]);
    close(pipefd[1]);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(closed));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(-1));
    void* too_big = reinterpret_cast<void*>(intptr_t(1) << 40);  // not an int: not an fd
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemImportFromShareableHandle(&h, too_big, kPosix));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(100000));
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(devnull));
    close(devnull);
    char path[] = "/tmp/cuvmm-host-test-XXXXXX";
    int file = mkostemp(path, O_CLOEXEC);
    if (file >= 0) {
        unlink(path);
        CHECK(ftruncate(file, static_cast<off_t>(G)) == 0);
        EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(file));
        close(file);
    }
    // Memfds that are not ours, or are malformed.
    struct {
        const char* name;
        size_t size;
        int seals;
        CUresult want;
        const char* why;  // a fragment host_import_refusal must say
    } cases[] = {
            {"somebody-else", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd exported by cuvmm"},
            {"cuvmm-host:d0:h1:l1", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},      // truncated name
            {"cuvmm-host:d0:h1:l1:n0x", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},  // trailing junk
            {"cuvmm-host:d0:h1:l1:n1", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // d != n
            {"cuvmm-host:d0:h8:l1:n0", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // bad handle types
            {"cuvmm-host:d0:h0:l1:n0", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // never exportable
            {"cuvmm-host:d0:h1:l2:n0", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // HOST + fd
            {"cuvmm-host:d1:h1:l4:n0", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // host, d != 0
            {"cuvmm-host:d0:h1:l7:n0", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"},   // bad location
            {"cuvmm-host:d-1:h1:l1:n-1", G, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "not a memfd"}, // negative
            {"cuvmm-host:d0:h1:l1:n0", G + 4096, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "has size"},  // not granular
            {"cuvmm-host:d0:h1:l1:n0", 0, kDriverSeals, CUDA_ERROR_INVALID_VALUE, "has size 0"},       // empty
            {"cuvmm-host:d0:h1:l1:n0", G, 0, CUDA_ERROR_INVALID_VALUE, "seals none"},                  // not sealed
            // Seals other than the exporter's: a write seal makes the memory read-only (it
            // used to pass import and fail later in cuMemSetAccess), a missing GROW or SEAL
            // means somebody else made it.
            {"cuvmm-host:d0:h1:l1:n0", G, kDriverSeals | F_SEAL_WRITE, CUDA_ERROR_INVALID_VALUE, "F_SEAL_WRITE"},
            {"cuvmm-host:d0:h1:l1:n0", G, kDriverSeals | F_SEAL_FUTURE_WRITE, CUDA_ERROR_INVALID_VALUE,
             "F_SEAL_FUTURE_WRITE"},
            {"cuvmm-host:d0:h1:l1:n0", G, F_SEAL_SHRINK | F_SEAL_WRITE, CUDA_ERROR_INVALID_VALUE, "write seal"},
            {"cuvmm-host:d0:h1:l1:n0", G, F_SEAL_SHRINK | F_SEAL_SEAL, CUDA_ERROR_INVALID_VALUE, "F_SEAL_SHRINK|"},
            {"cuvmm-host:d0:h1:l1:n0", G, F_SEAL_SHRINK | F_SEAL_GROW, CUDA_ERROR_INVALID_VALUE, "expected: F_SEAL"},
            {"cuvmm-host:d0:h1:l1:n0", G, F_SEAL_GROW | F_SEAL_SEAL, CUDA_ERROR_INVALID_VALUE, "forged or altered"},
            // No device 5 here: the process "cannot support the memory described by this
            // shareable handle", CUDA_ERROR_NOT_SUPPORTED (cuda.h, cuMemImportFromShareableHandle).
            {"cuvmm-host:d5:h1:l1:n5", G, kDriverSeals, CUDA_ERROR_NOT_SUPPORTED, "device 5"},
            {"cuvmm-host:d0:h1:l3:n0", G, kDriverSeals, CUDA_SUCCESS, ""},                     // HOST_NUMA, fine
            {"cuvmm-host:d1:h1:l1:n1", 2 * G, kDriverSeals, CUDA_SUCCESS, ""},                 // device 1, fine
    };
    for (auto& c : cases) {
        int fd = make_memfd(c.name, c.size, c.seals);
        if (fd < 0) {
            ++g_failed;
            std::printf("FAIL: could not create memfd %s\n", c.name);
            continue;
        }
        CUresult r = import(fd);
        std::string why = host_import_refusal(fd);
        if (r != c.want) {
            ++g_failed;
            std::printf("FAIL: import of memfd \"%s\" (size %zu, seals 0x%x) returned %s, expected %s\n", c.name,
                        c.size, static_cast<unsigned>(c.seals), name_of(r), name_of(c.want));
        } else if (c.want == CUDA_SUCCESS ? !why.empty() : why.find(c.why) == std::string::npos) {
            ++g_failed;
            std::printf("FAIL: host_import_refusal of memfd \"%s\" (seals 0x%x) is \"%s\", expected it to say \"%s\"\n",
                        c.name, static_cast<unsigned>(c.seals), why.c_str(), c.why);
        } else {
            ++g_passed;
        }
        if (r == CUDA_SUCCESS) OK(T.cuMemRelease(h));
        close(fd);
    }
    // The refusals of non-memfds explain themselves too.
    int p2[2];
    CHECK(pipe2(p2, O_CLOEXEC) == 0);
    CHECK(host_import_refusal(p2[0]).find("not open read-write") != std::string::npos ||
          host_import_refusal(p2[0]).find("not a regular file") != std::string::npos);
    close(p2[0]);
    close(p2[1]);
    CHECK(host_import_refusal(p2[0]).find("not an open descriptor") != std::string::npos);
    // The name is the creator's choice (a peer's, over a socket): the refusal shows it with
    // control bytes escaped and at most 64 of its bytes, so it cannot forge log lines.
    {
        std::string evil = "evil\nFAIL: forged line\x1b[2J\x01\\";
        evil += std::string(200, 'x');
        int fd = make_memfd(evil.c_str(), G, kDriverSeals);
        CHECK(fd >= 0);
        if (fd >= 0) {
            EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(fd));
            std::string why = host_import_refusal(fd);
            bool control = false;
            for (char c : why) control |= static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f;
            CHECK(!control);
            CHECK(why.find("evil\\x0aFAIL: forged line\\x1b[2J\\x01\\\\") != std::string::npos);
            CHECK(why.find("xxx...") != std::string::npos);
            CHECK(why.find(std::string(100, 'x')) == std::string::npos);  // capped
            close(fd);
        }
    }
    // A read-only reopen of one of ours is refused (it could never be made writable).
    CUmemGenericAllocationHandle mine = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&mine, G, &p, 0));
    int fd = -1;
    OK(T.cuMemExportToShareableHandle(&fd, mine, kPosix, 0));
    char link[64];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int ro = open(link, O_RDONLY | O_CLOEXEC);
    CHECK(ro >= 0);
    if (ro >= 0) {
        EXPECT_RC(CUDA_ERROR_INVALID_VALUE, import(ro));
        CHECK(host_import_refusal(ro).find("not open read-write") != std::string::npos);
        CHECK(host_import_refusal(fd).empty());  // the exported fd itself is fine
        close(ro);
    }
    close(fd);
    OK(T.cuMemRelease(mine));
    CHECK(host_live_counts().allocations == 0 && host_live_counts().memfds == 0);
    CHECK(open_fd_count() == fds_before);
}

// The caller's fd number is swapped between one of ours and a forged memfd while import
// runs: whatever import keeps must be what it checked. It duplicates the fd first and
// checks the duplicate; checking the number and then duplicating it could keep the
// forged file (seen as its 0xEE bytes after a successful import).
void test_import_swap_race() {
    const int fds_before = open_fd_count();
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    CUmemGenericAllocationHandle mine = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&mine, G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, G, 0, 0, 0));
    CUmemAccessDesc rw = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemMap(va, G, 0, mine, 0));
    OK(T.cuMemSetAccess(va, G, &rw, 1));
    OK(T.cuMemsetD8(va, 0x11, G));
    OK(T.cuMemUnmap(va, G));
    int good = -1;
    OK(T.cuMemExportToShareableHandle(&good, mine, kPosix, 0));
    int forged = make_memfd("somebody-else", G, kDriverSeals);
    CHECK(forged >= 0);
    if (forged >= 0) {
        unsigned char* fm = static_cast<unsigned char*>(mmap(nullptr, G, PROT_READ | PROT_WRITE, MAP_SHARED, forged, 0));
        CHECK(fm != MAP_FAILED);
        if (fm != MAP_FAILED) {
            std::memset(fm, 0xEE, G);
            munmap(fm, G);
        }
    }
    int number = fcntl(good, F_DUPFD_CLOEXEC, 0);  // the number the importer is handed
    std::atomic<bool> stop{false};
    std::thread swapper([&] {
        while (!stop.load()) {
            dup3(forged, number, O_CLOEXEC);
            dup3(good, number, O_CLOEXEC);
        }
    });
    long kept_forged = 0, imported = 0, refused = 0, unexpected = 0;
    for (int i = 0; i < 20000 && kept_forged == 0; ++i) {
        CUmemGenericAllocationHandle h = 0;
        CUresult r = T.cuMemImportFromShareableHandle(&h, os_handle(number), kPosix);
        if (r == CUDA_ERROR_INVALID_VALUE) {
            ++refused;
            continue;
        }
        if (r != CUDA_SUCCESS) {
            ++unexpected;
            continue;
        }
        ++imported;
        unsigned char byte = 0;
        if (T.cuMemMap(va, G, 0, h, 0) != CUDA_SUCCESS || T.cuMemSetAccess(va, G, &rw, 1) != CUDA_SUCCESS ||
            T.cuMemcpyDtoH(&byte, va + G / 2, 1) != CUDA_SUCCESS || T.cuMemUnmap(va, G) != CUDA_SUCCESS) {
            ++unexpected;
        } else if (byte != 0x11) {
            ++kept_forged;
        }
        if (T.cuMemRelease(h) != CUDA_SUCCESS) ++unexpected;
    }
    stop.store(true);
    swapper.join();
    if (kept_forged != 0 || unexpected != 0) {
        ++g_failed;
        std::printf("FAIL: import under an fd swap kept a file it never checked: %ld kept forged, %ld unexpected "
                    "(%ld imported, %ld refused)\n", kept_forged, unexpected, imported, refused);
    } else {
        ++g_passed;
    }
    CHECK(imported > 0);
    close(number);
    close(forged);
    close(good);
    OK(T.cuMemAddressFree(va, G));
    OK(T.cuMemRelease(mine));
    CHECK(host_live_counts().allocations == 0 && host_live_counts().memfds == 0);
    CHECK(open_fd_count() == fds_before);
}

void test_fd_exhaustion() {
    const int fds_before = open_fd_count();
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, G, &p, 0));
    int fd = -1;
    OK(T.cuMemExportToShareableHandle(&fd, h, kPosix, 0));

    // Lower RLIMIT_NOFILE to the lowest free descriptor: every new fd now fails EMFILE.
    cuvmm_test::AtFdLimit limit;
    CHECK(limit.lowered());
    int fd2 = -1;
    CUresult r_export = T.cuMemExportToShareableHandle(&fd2, h, kPosix, 0);
    CUmemGenericAllocationHandle imp = 0;
    CUresult r_import = T.cuMemImportFromShareableHandle(&imp, os_handle(fd), kPosix);
    CUmemGenericAllocationHandle h2 = 0;
    CUresult r_create = T.cuMemCreate(&h2, G, &p, 0);
    limit.restore();
    EXPECT_RC(CUDA_ERROR_OPERATING_SYSTEM, r_export);
    CHECK(fd2 == -1);
    EXPECT_RC(CUDA_ERROR_OPERATING_SYSTEM, r_import);
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, r_create);
    CHECK(host_live_counts().allocations == 1 && host_live_counts().memfds == 1);
    close(fd);
    OK(T.cuMemRelease(h));
    CHECK(open_fd_count() == fds_before);
}

// Copies on several threads while another thread unmaps, remaps and changes access.
// Every call must return SUCCESS or INVALID_VALUE; nothing may fault.
void test_races() {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    std::atomic<bool> stop{false};
    std::atomic<long> unexpected{0}, ok_copies{0}, refused{0}, rounds{0};
    auto count = [&](CUresult r) {
        if (r == CUDA_SUCCESS) ++ok_copies;
        else if (r == CUDA_ERROR_INVALID_VALUE) ++refused;
        else ++unexpected;
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            if (T.cuCtxSetCurrent(g_ctx[t % 2]) != CUDA_SUCCESS) ++unexpected;
            std::vector<unsigned char> buf(64 * 1024, static_cast<unsigned char>(t));
            unsigned seed = 1234u + static_cast<unsigned>(t);
            while (!stop.load()) {
                seed = seed * 1103515245u + 12345u;
                // Each thread stays in its own granule of the VA, so the device bytes
                // themselves are never raced (keeps ThreadSanitizer runs clean).
                CUdeviceptr slice = va + static_cast<CUdeviceptr>(t) * G;
                size_t off = (seed >> 4) % (G - 2 * buf.size());
                switch (seed % 4) {
                    case 0: count(T.cuMemcpyHtoD(slice + off, buf.data(), buf.size())); break;
                    case 1: count(T.cuMemcpyDtoH(buf.data(), slice + off, buf.size())); break;
                    case 2: count(T.cuMemcpyDtoD(slice + off + 4096, slice + off, buf.size())); break;
                    default: count(T.cuMemsetD8(slice + off, 0x77, buf.size())); break;
                }
            }
        });
    }
    threads.emplace_back([&] {
        CUmemAccessDesc rw[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                                 dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
        CUmemAccessDesc ro[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READ),
                                 dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE)};
        // At least 20 rounds; then up to 300 while under 2 s (sanitizer builds are slow).
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20 || (i < 300 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)); ++i) {
            ++rounds;
            CUdeviceptr at = va + static_cast<CUdeviceptr>((i % 3) * G);
            if (T.cuMemMap(at, 2 * G, 0, h, 0) != CUDA_SUCCESS) ++unexpected;
            if (T.cuMemSetAccess(at, 2 * G, rw, 2) != CUDA_SUCCESS) ++unexpected;
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            if (T.cuMemSetAccess(at + (i % 2) * G, G, ro, 2) != CUDA_SUCCESS) ++unexpected;
            std::this_thread::yield();
            if (T.cuMemUnmap(at, 2 * G) != CUDA_SUCCESS) ++unexpected;
        }
        stop.store(true);
    });
    for (auto& th : threads) th.join();
    CHECK(unexpected.load() == 0);
    CHECK(rounds.load() >= 20);
    CHECK(ok_copies.load() > 0);
    CHECK(refused.load() > 0);
    CHECK(host_live_counts().mappings == 0);
    OK(T.cuMemAddressFree(va, 4 * G));
    OK(T.cuMemRelease(h));
}

// Copies whose host pointer lies inside mapping b (unified addressing), on several
// threads, while this thread maps b, changes its CPU access and unmaps it again. The copy
// holds the registry lock shared from its check to the end of its memcpy, so an unmap or
// mprotect waits for it: every copy returns SUCCESS or INVALID_VALUE, nothing faults.
void test_host_pointer_races() {
    CUmemAllocationProp hp = prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle ha = 0, hb = 0;
    OK(T.cuMemCreate(&ha, G, &hp, 0));
    OK(T.cuMemCreate(&hb, G, &hp, 0));
    CUdeviceptr a = 0, b = 0;
    OK(T.cuMemAddressReserve(&a, G, 0, 0, 0));
    OK(T.cuMemAddressReserve(&b, G, 0, 0, 0));
    OK(T.cuMemMap(a, G, 0, ha, 0));
    CUmemAccessDesc rw[3] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                             dev_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                             access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
    CUmemAccessDesc host_ro = access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CUmemAccessDesc host_none = access(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    OK(T.cuMemSetAccess(a, G, rw, 2));
    std::atomic<bool> stop{false};
    std::atomic<long> unexpected{0}, ok_copies{0}, refused{0};
    auto count = [&](CUresult r) {
        if (r == CUDA_SUCCESS) ++ok_copies;
        else if (r == CUDA_ERROR_INVALID_VALUE) ++refused;
        else ++unexpected;
    };
    auto host = [](CUdeviceptr p) { return reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(p)); };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            if (T.cuCtxSetCurrent(g_ctx[t % 2]) != CUDA_SUCCESS) ++unexpected;
            const size_t n = 64 * 1024;
            unsigned seed = 777u + static_cast<unsigned>(t);
            while (!stop.load()) {
                seed = seed * 1103515245u + 12345u;
                size_t off = (seed >> 4) % (G - n);
                // Each thread has its own quarter of a, so device bytes are never raced.
                CUdeviceptr at = a + static_cast<CUdeviceptr>(t) * (G / 4);
                size_t len = n < G / 4 ? n : G / 4;
                if (seed % 2 == 0) count(T.cuMemcpyHtoD(at, host(b) + off, len));
                else count(T.cuMemcpyDtoH(host(b) + off, at, len));
            }
        });
    }
    for (int i = 0; i < 200; ++i) {
        OK(T.cuMemMap(b, G, 0, hb, 0));
        OK(T.cuMemSetAccess(b, G, rw, 3));
        std::this_thread::yield();
        OK(T.cuMemSetAccess(b, G, i % 2 ? &host_ro : &host_none, 1));
        std::this_thread::yield();
        OK(T.cuMemUnmap(b, G));
    }
    stop.store(true);
    for (auto& th : threads) th.join();
    CHECK(unexpected.load() == 0);
    CHECK(ok_copies.load() + refused.load() > 0);
    OK(T.cuMemUnmap(a, G));
    OK(T.cuMemAddressFree(a, G));
    OK(T.cuMemAddressFree(b, G));
    OK(T.cuMemRelease(ha));
    OK(T.cuMemRelease(hb));
    CHECK(host_live_counts().mappings == 0 && host_live_counts().allocations == 0);
}

}  // namespace

// B22: a hint that is not a multiple of max(alignment, granularity) fails the call
// (INVALID_VALUE) instead of being ignored; a well-aligned hint is honoured.
void test_reserve_hint_alignment() {
    CUdeviceptr base = 0;
    OK(T.cuMemAddressReserve(&base, 8 * G, 4 * G, 0, 0));
    OK(T.cuMemAddressFree(base, 8 * G));
    CUdeviceptr p = 0;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemAddressReserve(&p, G, 4 * G, base + G, 0));
    CHECK(p == 0);
    OK(T.cuMemAddressReserve(&p, G, 4 * G, base + 4 * G, 0));
    CHECK(p == base + 4 * G);
    OK(T.cuMemAddressFree(p, G));
    CHECK(host_live_counts().reservations == 0);
}

// cuDeviceCanAccessPeer: distinct host devices are peers, a device is not its own.
void test_can_access_peer() {
    int can = -1;
    OK(T.cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1);
    OK(T.cuDeviceCanAccessPeer(&can, 1, 0));
    CHECK(can == 1);
    OK(T.cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK(can == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceCanAccessPeer(&can, 0, 2));
    EXPECT_RC(CUDA_ERROR_INVALID_DEVICE, T.cuDeviceCanAccessPeer(&can, -1, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuDeviceCanAccessPeer(nullptr, 0, 1));
    // The test seam turns one direction off, and back on; a device stays not its own peer.
    host_set_peer_access(1, 0, false);
    OK(T.cuDeviceCanAccessPeer(&can, 1, 0));
    CHECK(can == 0);
    OK(T.cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1);
    host_set_peer_access(0, 0, true);  // not a pair: ignored
    OK(T.cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK(can == 0);
    host_set_peer_access(1, 0, true);
    OK(T.cuDeviceCanAccessPeer(&can, 1, 0));
    CHECK(can == 1);
}

// B23: cuMemMap maps a whole allocation, never a shorter prefix.
void test_map_whole_allocation_only() {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 2 * G, 0, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemMap(va, G, 0, h, 0));
    CHECK(host_live_counts().mappings == 0);
    OK(T.cuMemMap(va, 2 * G, 0, h, 0));
    OK(T.cuMemUnmap(va, 2 * G));
    OK(T.cuMemAddressFree(va, 2 * G));
    OK(T.cuMemRelease(h));
}

// B37: HOST access on DEVICE-located memory is NOT_SUPPORTED, alone,
// with a device descriptor, or over a range that also maps host memory; nothing changes.
// On HOST-located memory it is fine.
void test_device_memory_is_not_host_memory() {
    SideBySide m(prop_on(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_NONE));
    const CUdeviceptr va = m.va;
    const CUmemLocation cpu{CU_MEM_LOCATION_TYPE_HOST, 0};
    auto cpu_access = [&](CUdeviceptr at) { return access_at(cpu, at); };
    // HOST_NUMA_CURRENT names a host NUMA node, so the HOST_NUMA rule (INVALID_VALUE on memory
    // not located at HOST_NUMA, test_host_numa_access) refuses it first, on both allocations.
    {
        CUmemAccessDesc hc = access(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va + G, G, &hc, 1));
        EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemSetAccess(va, G, &hc, 1));
        CHECK(cpu_access(va) == 0 && cpu_access(va + G) == 0);
    }
    for (CUmemLocationType type : {CU_MEM_LOCATION_TYPE_HOST}) {
        CUmemAccessDesc h = access(type, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemSetAccess(va + G, G, &h, 1));
        CUmemAccessDesc mixed[2] = {dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), h};
        EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemSetAccess(va + G, G, mixed, 2));
        EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemSetAccess(va, 2 * G, mixed, 2));
        CHECK(cpu_access(va) == 0 && cpu_access(va + G) == 0 && get_access(0, va + G) == 0);
        OK(T.cuMemSetAccess(va, G, &h, 1));  // host memory: fine
        CHECK(cpu_access(va) == 3);
        h.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        OK(T.cuMemSetAccess(va, G, &h, 1));
    }
}

// The permissions /proc/self/maps shows for the page at `p` ("rw-s", "---s", ...), or "".
std::string maps_perms(uintptr_t p) {
    FILE* f = std::fopen("/proc/self/maps", "r");
    if (!f) return "";
    char line[512];
    std::string perms;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        char pr[8] = {};
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, pr) == 3 && p >= lo && p < hi) {
            perms = pr;
            break;
        }
    }
    std::fclose(f);
    return perms;
}

// Mappings of host-driver memfds in /proc/self/maps (public mappings and private views).
int memfd_mappings() {
    FILE* f = std::fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strstr(line, "cuvmm-host:")) ++n;
    }
    std::fclose(f);
    return n;
}

// B40: DEVICE-located memory stays PROT_NONE to the CPU at its public address whatever the
// access; the driver's own copies and memset reach it through a private view, so an alias
// (the same allocation mapped twice) sees every write, and an overlapping copy between
// aliases has memmove semantics.
void test_device_memory_is_private() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    const int maps_before = memfd_mappings();
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp p = dev_prop(0);
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    OK(T.cuMemMap(va, 2 * G, 0, h, 0));
    OK(T.cuMemMap(va + 2 * G, 2 * G, 0, h, 0));  // an alias of the same memory
    CUmemAccessDesc rw0 = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemSetAccess(va, 4 * G, &rw0, 1));
    CHECK(maps_perms(static_cast<uintptr_t>(va)) == "---s");
    CHECK(maps_perms(static_cast<uintptr_t>(va + 3 * G)) == "---s");

    std::vector<unsigned char> data(G + 64), back(G + 64);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 1);
    OK(T.cuMemcpyHtoD(va, data.data(), data.size()));
    OK(T.cuMemcpyDtoH(back.data(), va + 2 * G, back.size()));  // through the alias
    CHECK(back == data);
    OK(T.cuMemsetD8(va + 2 * G + 8, 0xee, 4));
    OK(T.cuMemcpyDtoH(back.data(), va, 16));
    CHECK(back[7] == data[7] && back[8] == 0xee && back[11] == 0xee && back[12] == data[12]);
    // Overlapping copy between the aliases, shifted up by 16 bytes: memmove semantics.
    OK(T.cuMemcpyHtoD(va, data.data(), data.size()));
    OK(T.cuMemcpyDtoD(va + 2 * G + 16, va, G));
    OK(T.cuMemcpyDtoH(back.data(), va + 16, G));
    CHECK(std::memcmp(back.data(), data.data(), G) == 0);

    OK(T.cuMemUnmap(va, 4 * G));
    OK(T.cuMemAddressFree(va, 4 * G));
    OK(T.cuMemRelease(h));
    CHECK(memfd_mappings() == maps_before);  // the view went with the allocation
}

// B40, lazy view: mapping and granting access map no private view (only a copy or memset
// needs one); the first copies, racing on several threads under the shared lock, map exactly
// one; a DtoD between two untouched allocations maps both; the views go with the allocations.
void test_view_is_lazy() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    const int maps_before = memfd_mappings();
    CUmemAllocationProp p = dev_prop(0);
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    OK(T.cuMemCreate(&h, 2 * G, &p, 0));
    OK(T.cuMemCreate(&h2, 2 * G, &p, 0));
    CUdeviceptr va = 0;
    OK(T.cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    CUmemAccessDesc rw0 = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(T.cuMemMap(va, 2 * G, 0, h, 0));
    OK(T.cuMemSetAccess(va, 2 * G, &rw0, 1));
    CHECK(memfd_mappings() == maps_before + 1);  // the public mapping, no view
    OK(T.cuMemUnmap(va, 2 * G));
    CHECK(memfd_mappings() == maps_before);
    OK(T.cuMemMap(va, 2 * G, 0, h, 0));
    OK(T.cuMemSetAccess(va, 2 * G, &rw0, 1));

    constexpr int kThreads = 4;
    constexpr size_t kSlice = 64 * 1024;
    std::atomic<int> arrived{0};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            if (T.cuCtxSetCurrent(g_ctx[0]) != CUDA_SUCCESS) ++failures;
            std::vector<unsigned char> buf(kSlice, static_cast<unsigned char>(t + 1));
            ++arrived;
            while (arrived.load() < kThreads) std::this_thread::yield();  // all start together
            if (T.cuMemcpyHtoD(va + t * kSlice, buf.data(), buf.size()) != CUDA_SUCCESS) ++failures;
        });
    }
    for (auto& th : threads) th.join();
    CHECK(failures.load() == 0);
    CHECK(memfd_mappings() == maps_before + 2);  // public mapping + exactly one view
    std::vector<unsigned char> back(kSlice);
    for (int t = 0; t < kThreads; ++t) {
        OK(T.cuMemcpyDtoH(back.data(), va + t * kSlice, kSlice));
        CHECK(back[0] == t + 1 && back[kSlice - 1] == t + 1);
    }

    // A DtoD from the copied allocation into an untouched one maps the second view.
    OK(T.cuMemMap(va + 2 * G, 2 * G, 0, h2, 0));
    OK(T.cuMemSetAccess(va + 2 * G, 2 * G, &rw0, 1));
    CHECK(memfd_mappings() == maps_before + 3);
    OK(T.cuMemcpyDtoD(va + 2 * G, va + kSlice, kSlice));
    CHECK(memfd_mappings() == maps_before + 4);  // + the view of h2
    OK(T.cuMemcpyDtoH(back.data(), va + 2 * G, kSlice));
    CHECK(back[0] == 2 && back[kSlice - 1] == 2);

    OK(T.cuMemUnmap(va, 4 * G));
    CHECK(memfd_mappings() == maps_before + 2);  // the views live while the handles do
    OK(T.cuMemRelease(h));
    OK(T.cuMemRelease(h2));
    CHECK(memfd_mappings() == maps_before);
    OK(T.cuMemAddressFree(va, 4 * G));
}

// No C++ exception crosses a host-driver entry point: the n-th allocation inside any of
// them failing (std::bad_alloc) gives CUDA_ERROR_OUT_OF_MEMORY and leaves nothing behind,
// so the same call then succeeds. Runs the sequence failing the 1st, 2nd, ... allocation of
// each call until a round injects nothing.
void test_allocation_failure() {
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    const HostLiveCounts before = host_live_counts();
    const int fds_before = open_fd_count();
    const int maps_before = memfd_mappings();
    long injected_total = 0;
    for (long nth = 1; nth <= 200; ++nth) {
        long injected = 0;
        auto step = [&](const char* what, auto&& call) {
            tl_fail_new_at = nth;
            CUresult r = call();
            const bool hit = tl_fail_new_at == 0;  // the n-th allocation happened (and failed)
            tl_fail_new_at = 0;
            if (hit) {
                ++injected;
                if (r != CUDA_ERROR_OUT_OF_MEMORY) {
                    ++g_failed;
                    std::printf("FAIL: %s with allocation %ld failing returned %s\n", what, nth, name_of(r));
                }
                r = call();  // nothing was left behind, so it works now
            }
            if (r != CUDA_SUCCESS) {
                ++g_failed;
                std::printf("FAIL: %s (after allocation %ld failed) returned %s\n", what, nth, name_of(r));
            }
        };
        CUmemGenericAllocationHandle h = 0, imp = 0;
        CUmemAllocationProp p = dev_prop(0);
        CUdeviceptr va = 0;
        int fd = -1;
        CUmemAccessDesc rw0 = dev_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        std::vector<unsigned char> data(2 * 4096, 0x5a), back(2 * 4096);
        step("cuMemCreate", [&] { return T.cuMemCreate(&h, 2 * G, &p, 0); });
        step("cuMemAddressReserve", [&] { return T.cuMemAddressReserve(&va, 4 * G, 0, 0, 0); });
        step("cuMemMap", [&] { return T.cuMemMap(va, 2 * G, 0, h, 0); });
        step("cuMemExportToShareableHandle", [&] { return T.cuMemExportToShareableHandle(&fd, h, kPosix, 0); });
        step("cuMemImportFromShareableHandle",
             [&] { return T.cuMemImportFromShareableHandle(&imp, os_handle(fd), kPosix); });
        step("cuMemMap (imported)", [&] { return T.cuMemMap(va + 2 * G, 2 * G, 0, imp, 0); });
        step("cuMemSetAccess", [&] { return T.cuMemSetAccess(va + G, 2 * G, &rw0, 1); });
        // Across the two chunks: two views, two pieces.
        step("cuMemcpyHtoD", [&] { return T.cuMemcpyHtoD(va + 2 * G - 4096, data.data(), data.size()); });
        step("cuMemcpyDtoD", [&] { return T.cuMemcpyDtoD(va + G, va + 2 * G - 4096, data.size()); });
        step("cuMemcpyDtoH", [&] { return T.cuMemcpyDtoH(back.data(), va + G, back.size()); });
        CHECK(back == data);
        CUmemGenericAllocationHandle retained = 0;
        OK(T.cuMemRelease(h));
        step("cuMemRetainAllocationHandle",
             [&] { return T.cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)); });
        OK(T.cuMemUnmap(va, 4 * G));
        OK(T.cuMemAddressFree(va, 4 * G));
        OK(T.cuMemRelease(retained));
        OK(T.cuMemRelease(imp));
        close(fd);
        HostLiveCounts c = host_live_counts();
        CHECK(c.allocations == before.allocations && c.reservations == before.reservations &&
              c.mappings == before.mappings && c.memfds == before.memfds);
        CHECK(open_fd_count() == fds_before);
        CHECK(memfd_mappings() == maps_before);
        injected_total += injected;
        if (injected == 0) break;  // every call's allocations were all tried
    }
    CHECK(injected_total > 10);  // the hook did reach the driver's allocations
}

void on_timeout(int) {
    static const char msg[] = "FAIL: timed out (a deadlock or a starved writer?)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

int main() {
    std::signal(SIGALRM, on_timeout);
    alarm(300);  // a hang must fail the run, not stall CI
    HostLiveCounts c0 = host_live_counts();
    CHECK(c0.allocations == 0 && c0.reservations == 0 && c0.mappings == 0 && c0.memfds == 0);

    HostDriverConfig cfg;
    cfg.device_count = 2;
    install_host_driver(T, cfg);
    G = cfg.granularity;
    // A second install keeps the first configuration.
    DriverTable again;
    HostDriverConfig other;
    other.device_count = 5;
    install_host_driver(again, other);
    CHECK(again.cuMemCreate == T.cuMemCreate);

    test_table_and_init();
    const int fds_baseline = open_fd_count();
    test_devices();
    int count = 0;
    OK(T.cuDeviceGetCount(&count));
    CHECK(count == 2);  // not 5: the first config stays
    test_contexts();
    test_streams();
    test_props_and_granularity();
    test_create_release();
    test_cgroup_memory_limit();
    test_one_memory_budget();
    test_reserve_free();
    test_map_unmap_access();
    test_copies();
    test_host_numa_access();
    test_host_pointers_into_mappings();
    test_export_import_retain();
    test_import_refusals();
    test_import_swap_race();
    test_fd_exhaustion();
    test_races();
    test_host_pointer_races();
    test_reserve_hint_alignment();
    test_can_access_peer();
    test_map_whole_allocation_only();
    test_device_memory_is_not_host_memory();
    test_device_memory_is_private();
    test_view_is_lazy();
    test_allocation_failure();

    OK(T.cuCtxSetCurrent(nullptr));
    OK(T.cuDevicePrimaryCtxRelease(0));
    OK(T.cuDevicePrimaryCtxRelease(1));
    EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuDevicePrimaryCtxRelease(0));

    HostLiveCounts c = host_live_counts();
    if (c.allocations || c.reservations || c.mappings || c.memfds) {
        ++g_failed;
        std::printf("FAIL: live counts at end: allocations=%lld reservations=%lld mappings=%lld memfds=%lld\n",
                    c.allocations, c.reservations, c.mappings, c.memfds);
    } else {
        ++g_passed;
    }
    int fds_end = open_fd_count();
    if (fds_end != fds_baseline) {
        ++g_failed;
        std::printf("FAIL: /proc/self/fd has %d entries at the end, %d at the start\n", fds_end, fds_baseline);
    } else {
        ++g_passed;
    }
    std::printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
