// Host driver entry points for initialisation, devices, primary contexts and error
// strings. A primary context is a fake pointer derived from the device ordinal; the
// current context is per thread (tl_current_device).
#include "host/host_internal.hpp"

#include "cuvmm/cuda_errors.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cstdio>

namespace cuvmm {
namespace host {
namespace {

CUcontext context_of(int dev) {
    return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + 16 * dev));
}

// Device whose primary context `ctx` is, or -1.
int device_of(CUcontext ctx) {
    auto v = reinterpret_cast<uintptr_t>(ctx);
    if (v < 0x1000 || (v - 0x1000) % 16 != 0) return -1;
    uintptr_t dev = (v - 0x1000) / 16;
    return dev < static_cast<uintptr_t>(g_state->config.device_count) ? static_cast<int>(dev) : -1;
}

// Bit 8 * dev + peer set: cuDeviceCanAccessPeer(dev, peer) answers 0 (host_set_peer_access).
std::atomic<uint64_t> g_peer_refused{0};

bool peer_access_refused(int dev, int peer) {
    return (g_peer_refused.load(std::memory_order_relaxed) >> (8 * dev + peer)) & 1;
}

}  // namespace

namespace {

// Set when a file could not be opened for want of an fd (EMFILE/ENFILE): the answer is then
// incomplete and must not be kept (device_memory_bytes).
thread_local bool tl_out_of_fds = false;

// The whole of a small file (a cgroup or proc file), or "" when it cannot be read.
std::string read_small_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        if (errno == EMFILE || errno == ENFILE) tl_out_of_fds = true;
        return "";
    }
    std::ostringstream all;
    all << in.rdbuf();
    return all.str();
}

// A mountinfo field with its octal escapes decoded: the kernel writes a space, tab, newline
// and backslash in a path as \040, \011, \012 and \134 (proc_pid_mountinfo(5)).
std::string unescape_mountinfo(const std::string& field) {
    std::string out;
    out.reserve(field.size());
    for (size_t i = 0; i < field.size(); ++i) {
        if (field[i] == '\\' && i + 3 < field.size() &&
            field[i + 1] >= '0' && field[i + 1] <= '3' && field[i + 2] >= '0' && field[i + 2] <= '7' &&
            field[i + 3] >= '0' && field[i + 3] <= '7') {
            out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0'));
            i += 3;
        } else {
            out += field[i];
        }
    }
    return out;
}

// A cgroup limit file's value in bytes: memory.max (v2: "max" is none) or
// memory.limit_in_bytes (v1: "no limit" is a number near 2^63). 0: none or unreadable.
size_t parse_limit(const std::string& text) {
    if (text.empty() || text.compare(0, 3, "max") == 0) return 0;
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || v == 0 || v >= (1ULL << 62)) return 0;
    return static_cast<size_t>(v);
}

size_t smaller_limit(size_t a, size_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

}  // namespace

size_t cgroup_memory_limit(const char* proc_cgroup_path, const char* mountinfo_path) {
    // Where the memory controllers are mounted: {fs kind (2 or 1), mount root, mount point}.
    struct Mount {
        int version;
        std::string root;
        std::string point;
    };
    std::vector<Mount> mounts;
    std::istringstream mountinfo(read_small_file(mountinfo_path));
    for (std::string line; std::getline(mountinfo, line);) {
        // "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS"
        size_t dash = line.find(" - ");
        if (dash == std::string::npos) continue;
        std::istringstream head(line.substr(0, dash));
        std::istringstream tail(line.substr(dash + 3));
        std::string id, parent, dev, root, point, fstype, source, super;
        if (!(head >> id >> parent >> dev >> root >> point) || !(tail >> fstype >> source)) continue;
        tail >> super;
        if (fstype == "cgroup2") {
            mounts.push_back({2, unescape_mountinfo(root), unescape_mountinfo(point)});
        } else if (fstype == "cgroup" && ("," + super + ",").find(",memory,") != std::string::npos) {
            mounts.push_back({1, unescape_mountinfo(root), unescape_mountinfo(point)});
        }
    }
    size_t limit = 0;
    std::istringstream cgroups(read_small_file(proc_cgroup_path));
    for (std::string line; std::getline(cgroups, line);) {
        // "HIERARCHY:CONTROLLERS:PATH"; v2 is "0::PATH", v1's memory line names "memory".
        size_t c1 = line.find(':');
        size_t c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
        if (c2 == std::string::npos) continue;
        std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
        std::string path = line.substr(c2 + 1);
        int version = controllers.empty() ? 2 : ("," + controllers + ",").find(",memory,") != std::string::npos ? 1 : 0;
        if (version == 0) continue;
        for (const Mount& m : mounts) {
            if (m.version != version) continue;
            // The cgroup's directory under this mount; a path outside the mount's root is not here.
            std::string rel;
            if (m.root == "/") {
                rel = path == "/" ? "" : path;
            } else if (path.compare(0, m.root.size(), m.root) == 0 &&
                       (path.size() == m.root.size() || path[m.root.size()] == '/')) {
                rel = path.substr(m.root.size());
            } else {
                continue;
            }
            const char* file = version == 2 ? "/memory.max" : "/memory.limit_in_bytes";
            // The smallest limit of the cgroup and its ancestors up to the mount point: each bounds it.
            for (;;) {
                limit = smaller_limit(limit, parse_limit(read_small_file(m.point + rel + file)));
                if (rel.empty()) break;
                size_t slash = rel.rfind('/');
                rel = slash == std::string::npos ? "" : rel.substr(0, slash);
            }
        }
    }
    return limit;
}

size_t device_memory_bytes() {
    // Kept once read whole: the cgroup files are a few reads, and cuMemCreate asks under the
    // state lock. A read that ran out of fds is not kept (a review: "no limit" read at the fd
    // limit stayed for good): it answers this once and the next call reads again. The driver's
    // install reads it first, normally with fds to spare.
    static std::atomic<size_t> kept{0};
    size_t bytes = kept.load(std::memory_order_acquire);
    if (bytes != 0) return bytes;
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGESIZE);
    size_t physical = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
    tl_out_of_fds = false;
    bytes = smaller_limit(physical, cgroup_memory_limit("/proc/self/cgroup", "/proc/self/mountinfo"));
    if (!tl_out_of_fds) kept.store(bytes, std::memory_order_release);
    return bytes;
}

namespace entry {

CUresult CUDAAPI cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    g_initialized.store(true, std::memory_order_release);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
    CUVMM_REQUIRE_INIT();
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *count = g_state->config.device_count;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
    CUVMM_REQUIRE_INIT();
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, static_cast<size_t>(len), "cuvmm host device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = device_memory_bytes();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    // Not an attribute of this driver's CUDA version: the real driver's INVALID_VALUE (audit
    // B6; an unknown attribute used to answer 0).
    if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
            *value = 1;
            break;
        default:  // RDMA, fabric, Win32 handles and everything we do not model: 0
            *value = 0;
            break;
    }
    return CUDA_SUCCESS;
}

// Every pair of distinct host devices is peer-capable (they share the CPU's memory) unless a
// test said otherwise (host_set_peer_access); a device is not its own peer (0), as on a GPU.
CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
    CUVMM_REQUIRE_INIT();
    if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev) || !valid_device(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev && !peer_access_refused(dev, peerDev) ? 1 : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Exclusive lock(g_state->mutex);
    ++g_state->ctx_retains[dev];
    *ctx = context_of(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Exclusive lock(g_state->mutex);
    if (g_state->ctx_retains[dev] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    // cuda.h: the context is reset once the last reference is released, and with it go the
    // streams and events created in it. Under this lock, so a retain cannot make a new
    // context (and streams in it) in between (lock order: registry, then queue mutex).
    if (--g_state->ctx_retains[dev] == 0) forget_streams_and_events(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) {
        tl_current_device = -1;
        return CUDA_SUCCESS;
    }
    int dev = device_of(ctx);
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    Shared lock(g_state->mutex);
    if (g_state->ctx_retains[dev] <= 0) return CUDA_ERROR_INVALID_CONTEXT;  // not retained
    tl_current_device = dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *ctx = tl_current_device < 0 ? nullptr : context_of(tl_current_device);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
    CUVMM_REQUIRE_INIT();
    return synchronize_current_device();  // every stream of the current device (stream_queue.cpp)
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** str) {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = result_name(error);
    return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = result_description(error);
    return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace entry

}  // namespace host

void host_set_peer_access(int dev, int peer, bool can) {
    if (dev < 0 || dev >= 8 || peer < 0 || peer >= 8 || dev == peer) return;
    const uint64_t bit = uint64_t(1) << (8 * dev + peer);
    if (can) host::g_peer_refused.fetch_and(~bit, std::memory_order_relaxed);
    else host::g_peer_refused.fetch_or(bit, std::memory_order_relaxed);
}

}  // namespace cuvmm
