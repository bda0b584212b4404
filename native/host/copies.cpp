// Host driver entry points for copies and memset: synchronous memmove/memset under the
// shared registry lock, after checking the current context and that the
// current device may read the source and write the destination. They are ordered as
// legacy-stream operations (wait_legacy).
#include "host/stream_queue.hpp"

#include <cstring>

namespace cuvmm {
namespace host {
namespace {

// Shared prologue of the copies: n > 0 here. Returns the device of the current context.
CUresult copy_context(State& st, int* dev) {
    return current_device(st, dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// Synchronous copies are legacy-stream operations: before touching memory they wait for
// what an op queued on the current device's legacy stream now would wait for (the legacy
// queue and, through it, the blocking streams' queued work). They then run on the calling
// thread rather than as a queued op: the caller waits for them either way, and work queued
// later by this thread is ordered after them because they are done when they return.
// No lock is held while waiting. Returns INVALID_CONTEXT or the device's sticky error.
CUresult wait_legacy() {
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex);
    StreamRef legacy = resolve_stream(q, nullptr, dev);
    wait_for(lock, barrier_of(q, legacy));
    return sticky_error(dev);
}

}  // namespace

// A host range for a copy that the CPU can touch with `need` without faulting: outside
// every reservation (ordinary host memory), or, since the real driver resolves any
// pointer through unified addressing, entirely inside mapped memory whose CPU access
// (the host slot, granted with a HOST / HOST_NUMA location) includes `need`. Reservation
// memory that is unmapped, or mapped without CPU access, is refused: the memcpy would
// fault. Caller holds the mutex (shared is enough: it is held across the memcpy).
bool host_range_ok(State& st, const void* p, size_t n, unsigned need) {
    auto v = reinterpret_cast<uintptr_t>(p);
    if (p == nullptr || !range_ok(v, n)) return false;
    if (!overlaps_reservation(st, v, n)) return true;
    return accessible(st, v, n, kHostSlot, need);
}

// True when the device range [p, p+n) is mapped and device `dev` holds `need` on all of it.
// Caller holds the mutex.
bool device_range_ok(State& st, CUdeviceptr p, size_t n, int dev, unsigned need) {
    return range_ok(p, n) && accessible(st, p, n, dev, need);
}

namespace entry {

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    if (CUresult r = wait_legacy()) return r;
    Shared lock(g_state->mutex);  // held across the memcpy: no unmap/mprotect underneath
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!host_range_ok(st, src, bytes, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
    if (!device_range_ok(st, dst, bytes, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    // Overlapping source and destination are undefined, as on the driver (two addresses
    // mapping one allocation overlap in a way no memmove sees). Promise nothing.
    return device_write(st, static_cast<uintptr_t>(dst), src, bytes);
}

CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    if (CUresult r = wait_legacy()) return r;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!host_range_ok(st, dst, bytes, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    if (!device_range_ok(st, src, bytes, dev, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
    // Overlap: undefined, as on the driver (see cuMemcpyHtoD).
    return device_read(st, dst, static_cast<uintptr_t>(src), bytes);
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    if (CUresult r = wait_legacy()) return r;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!device_range_ok(st, src, bytes, dev, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
    if (!device_range_ok(st, dst, bytes, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    // Overlap: undefined, as on the driver (see cuMemcpyHtoD).
    return device_copy(st, static_cast<uintptr_t>(dst), static_cast<uintptr_t>(src), bytes);
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
    CUVMM_REQUIRE_INIT();
    if (count == 0) return CUDA_SUCCESS;
    if (CUresult r = wait_legacy()) return r;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!device_range_ok(st, dst, count, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    return device_fill(st, static_cast<uintptr_t>(dst), value, count);
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
