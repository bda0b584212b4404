// Host driver entry points for page-locked host memory: cuMemHostAlloc / cuMemFreeHost
// (an anonymous mapping the driver owns) and cuMemHostRegister / cuMemHostUnregister (a
// range of the caller's memory, which stays the caller's). A copy whose host side lies
// entirely inside one such range is fully asynchronous (async_copies.cpp) and counts as a
// pending use of it until it has run. cuda.h does not say what freeing or unregistering
// memory that queued copies still target does; the host driver waits for those copies
// (never a use-after-free), which a host function must not do anyway (NOT_PERMITTED).
#include "host/stream_queue.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

namespace cuvmm {
namespace host {
namespace {

constexpr unsigned kAllocFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                    CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

// The range containing all of [p, p+n), or end(). Queue mutex held.
std::map<uintptr_t, PinnedRange>::iterator containing(Queues& q, uintptr_t p, size_t n) {
    auto it = q.pinned.upper_bound(p);
    if (it == q.pinned.begin()) return q.pinned.end();
    --it;
    if (p - it->first >= it->second.size || n > it->second.size - (p - it->first)) return q.pinned.end();
    return it;
}

bool overlaps(Queues& q, uintptr_t p, size_t n) {
    auto it = q.pinned.upper_bound(p);
    if (it != q.pinned.begin()) {
        auto prev = std::prev(it);
        if (p - prev->first < prev->second.size) return true;
    }
    return it != q.pinned.end() && it->first < p + n;
}

// Removes the range at exactly `base` of the given kind once no queued op uses it.
// Returns false (nothing removed) when there is none. Size via *size.
bool remove_when_idle(uintptr_t base, bool allocated, size_t* size) {
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex);
    auto it = q.pinned.find(base);
    if (it == q.pinned.end() || it->second.allocated != allocated) return false;
    q.changed.wait(lock, [&] {
        auto cur = q.pinned.find(base);
        return cur == q.pinned.end() || cur->second.pending == 0;
    });
    it = q.pinned.find(base);  // a concurrent free of the same pointer may have won
    if (it == q.pinned.end() || it->second.allocated != allocated) return false;
    *size = it->second.size;
    q.pinned.erase(it);
    return true;
}

// 1 when every page of [p, p+n) is mapped readable and writable in this process, read from
// /proc/self/maps (contiguous entries covering the range); 0 when not; -1 when it cannot
// tell (/proc/self/maps would not open: at the fd limit, EMFILE, errno kept). A GPU driver
// pins the pages and fails on memory it cannot pin; the host driver must refuse it at the
// call, or a queued copy would fault on the worker (SIGSEGV) later. n > 0, no wrap (checked
// by the caller).
int mapped_read_write(uintptr_t p, size_t n) {
    std::FILE* f = std::fopen("/proc/self/maps", "re");
    if (f == nullptr) return -1;
    uintptr_t need = p;  // first address not yet known to be covered
    const uintptr_t end = p + n;
    char* line = nullptr;  // getline: whole lines, however long the path
    size_t cap = 0;
    while (need < end && ::getline(&line, &cap, f) > 0) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = {};
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (hi <= need) continue;
        if (lo > need || perms[0] != 'r' || perms[1] != 'w') break;  // a hole or a page without RW
        need = hi;
    }
    std::free(line);
    std::fclose(f);
    return need >= end ? 1 : 0;
}

}  // namespace

bool pinned_use(Queues& q, const void* p, size_t n, bool use) {
    auto it = containing(q, reinterpret_cast<uintptr_t>(p), n);
    if (it == q.pinned.end()) return false;
    if (use) ++it->second.pending;
    return true;
}

PinnedRange* pinned_acquire(Queues& q, const void* p, size_t n) {
    auto it = containing(q, reinterpret_cast<uintptr_t>(p), n);
    if (it == q.pinned.end()) return nullptr;
    ++it->second.pending;
    return &it->second;
}

void pinned_release(Queues& q, PinnedRange* range) {
    --range->pending;
    q.changed.notify_all();
}

void pinned_release(Queues& q, const void* p) {
    auto it = containing(q, reinterpret_cast<uintptr_t>(p), 1);
    if (it == q.pinned.end()) return;
    --it->second.pending;
    q.changed.notify_all();
}

namespace entry {

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
    CUVMM_REQUIRE_INIT();
    if (pp == nullptr || bytesize == 0 || (Flags & ~kAllocFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    void* p = ::mmap(nullptr, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    PinnedRange r;
    r.size = bytesize;
    r.allocated = true;
    q.pinned.emplace(reinterpret_cast<uintptr_t>(p), r);
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
    CUVMM_REQUIRE_INIT();
    size_t size = 0;
    if (!remove_when_idle(reinterpret_cast<uintptr_t>(p), true, &size)) return CUDA_ERROR_INVALID_VALUE;
    ::munmap(p, size);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
    CUVMM_REQUIRE_INIT();
    auto v = reinterpret_cast<uintptr_t>(p);
    if (p == nullptr || bytesize == 0 || !range_ok(v, bytesize) || (Flags & ~kRegisterFlags) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    // cuda.h: READ_ONLY with a device whose CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
    // is 0 (every host device reports 0) -> NOT_SUPPORTED.
    if ((Flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0) return CUDA_ERROR_NOT_SUPPORTED;
    {
        Shared lock(g_state->mutex);
        if (overlaps_reservation(*g_state, v, bytesize)) return CUDA_ERROR_INVALID_VALUE;  // device VA, not host memory
    }
    // Unmapped or not RW: cannot be pinned. Not known (no fd to read the maps): an OS failure,
    // not the caller's bad value (an independent probe at the fd limit was told its memory was
    // refused as the driver's own).
    int mapped = mapped_read_write(v, bytesize);
    if (mapped < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    if (mapped == 0) return CUDA_ERROR_INVALID_VALUE;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    if (overlaps(q, v, bytesize)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    PinnedRange r;
    r.size = bytesize;
    q.pinned.emplace(v, r);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
    CUVMM_REQUIRE_INIT();
    size_t size = 0;
    if (!remove_when_idle(reinterpret_cast<uintptr_t>(p), false, &size)) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
