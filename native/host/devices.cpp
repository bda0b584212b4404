// Host driver entry points for initialisation, devices, primary contexts and error
// strings. A primary context is a fake pointer derived from the device ordinal; the
// current context is per thread (tl_current_device).
#include "host/host_internal.hpp"

#include "cuvmm/cuda_errors.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdint>

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

size_t device_memory_bytes() {
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
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
