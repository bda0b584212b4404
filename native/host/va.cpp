// Host driver entry points for virtual address space: reservations (PROT_NONE anonymous
// mappings), cuMemMap / cuMemUnmap (the memfd mapped MAP_SHARED|MAP_FIXED over the
// reservation, and a placeholder put back on unmap) and per-location access (mprotect
// to the union, per-device rules in the bookkeeping).
#include "host/host_internal.hpp"

#include <cstdint>

namespace cuvmm {
namespace host {

namespace entry {

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    if (alignment != 0 && !is_pow2(alignment)) return CUDA_ERROR_INVALID_VALUE;
    if (!aligned(addr)) return CUDA_ERROR_INVALID_VALUE;
    const size_t gran = g_state->config.granularity;
    const size_t align = alignment > gran ? alignment : gran;
    // B22: the driver wants a hint that is a multiple of max(alignment, granularity) and
    // fails the call (INVALID_VALUE) otherwise; it does not quietly ignore it.
    if (addr != 0 && addr % align != 0) return CUDA_ERROR_INVALID_VALUE;
    constexpr int kProt = PROT_NONE;
    constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    uintptr_t base = 0;
    // The hint is best effort, like the driver's: exactly addr or anywhere.
    if (addr != 0 && range_ok(addr, size)) {
        void* want = reinterpret_cast<void*>(static_cast<uintptr_t>(addr));
        void* got = ::mmap(want, size, kProt, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
        if (got == want) {
            base = static_cast<uintptr_t>(addr);
        } else if (got != MAP_FAILED) {
            ::munmap(got, size);  // an old kernel treated NOREPLACE as a plain hint
        }
    }
    if (base == 0) {
        if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
        size_t span = size + align;
        void* got = ::mmap(nullptr, span, kProt, kFlags, -1, 0);
        if (got == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
        auto raw = reinterpret_cast<uintptr_t>(got);
        base = (raw + align - 1) & ~(static_cast<uintptr_t>(align) - 1);
        if (base > raw) ::munmap(got, base - raw);
        uintptr_t tail = base + size;
        if (raw + span > tail) ::munmap(reinterpret_cast<void*>(tail), raw + span - tail);
    }
    try {
        st.reservations.emplace(base, size);
    } catch (...) {  // bad_alloc (Guarded: OUT_OF_MEMORY): give the range back first
        ::munmap(reinterpret_cast<void*>(base), size);
        throw;
    }
    *ptr = static_cast<CUdeviceptr>(base);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto it = st.reservations.find(static_cast<uintptr_t>(ptr));
    if (it == st.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base = it->first;
    auto m = st.mappings.lower_bound(base);
    if (m != st.mappings.end() && m->first < base + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
    ::munmap(reinterpret_cast<void*>(base), size);
    st.reservations.erase(it);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (flags != 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto h = st.handles.find(handle);
    if (h == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
    Allocation* a = st.allocations.at(h->second).get();
    if (size == 0 || !aligned(size) || size > a->size) return CUDA_ERROR_INVALID_VALUE;
    // B23: cuda.h allows offset + size <= the allocation's size, but the driver maps whole
    // allocations only (cuda.core's notes, from GPU runs); refuse a shorter map so that a
    // descriptor with short chunk sizes fails here as it would on a GPU.
    if (size != a->size) return CUDA_ERROR_INVALID_VALUE;
    if (!aligned(ptr) || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    auto p = static_cast<uintptr_t>(ptr);
    if (find_reservation(st, p, size) == st.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
    // Overlap: the mapping starting at or before p reaching past p, or one starting in range.
    auto next = st.mappings.lower_bound(p);
    if (next != st.mappings.end() && next->first < p + size) return CUDA_ERROR_INVALID_VALUE;
    if (find_mapping(st, p) != st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;

    // The record first (its allocations may throw bad_alloc while nothing is mapped yet).
    Mapping m;
    m.size = size;
    m.alloc_id = h->second;
    m.segments.emplace(0, Access{});
    auto rec = st.mappings.emplace(p, std::move(m)).first;
    // No access for anyone until cuMemSetAccess.
    void* want = reinterpret_cast<void*>(p);
    void* got = ::mmap(want, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0);
    if (got != want) {
        // MAP_FIXED may have torn the reservation down already: put the placeholder back.
        if (got != MAP_FAILED) ::munmap(got, size);
        ::mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        st.mappings.erase(rec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ++a->mappings;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUVMM_REQUIRE_INIT();
    if (size == 0 || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    if (find_reservation(st, p, size) == st.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
    // Exactly whole, contiguous mappings from p to p + size.
    auto first = st.mappings.find(p);
    if (first == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    auto it = first;
    uintptr_t at = p, end = p + size;
    while (at < end) {
        if (it == st.mappings.end() || it->first != at || it->second.size > end - at) return CUDA_ERROR_INVALID_VALUE;
        at += it->second.size;
        ++it;
    }
    auto last = it;

    // Keep the VA reserved: replace the shared mapping with a fresh placeholder.
    void* want = reinterpret_cast<void*>(p);
    void* got = ::mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (got != want) return CUDA_ERROR_OUT_OF_MEMORY;
    for (it = first; it != last;) {
        uint64_t id = it->second.alloc_id;
        it = st.mappings.erase(it);
        auto a = st.allocations.find(id);
        if (a != st.allocations.end()) --a->second->mappings;
        drop_if_dead(st, id);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
    CUVMM_REQUIRE_INIT();
    if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size) || !aligned(ptr) || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    // Validate every descriptor before changing anything.
    std::array<int, kAccessSlots> wanted;  // -1: unchanged
    wanted.fill(-1);
    bool host_numa = false;                // some descriptor names a HOST_NUMA(_CURRENT) location
    bool host = false;                     // some descriptor names HOST or HOST_NUMA_CURRENT
    for (size_t i = 0; i < count; ++i) {
        // HOST_NUMA_CURRENT names a host NUMA node too (the current thread's), so the
        // HOST_NUMA rule below covers it: cuda.h says nothing of it for access, and the
        // safe reading refuses it wherever HOST_NUMA is refused.
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
            desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
            host_numa = true;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST ||
            desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
            host = true;
        int slot = 0;
        if (CUresult r = access_slot(desc[i].location, &slot)) return r;
        unsigned f = desc[i].flags;
        if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        wanted[slot] = static_cast<int>(f);  // a later descriptor for the same location wins
    }

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    // cuda.h (cuMemSetAccess): "Users cannot specify CU_MEM_LOCATION_TYPE_HOST_NUMA
    // accessibility for allocations created on with other location types." (HOST_NUMA_CURRENT too.)
    // B37: host access to DEVICE-located memory is NOT_SUPPORTED on NVIDIA's driver (audit
    // [E7]: hip-tests expect it there); device memory is never CPU memory.
    bool numa_ok = true;
    bool host_ok = true;
    bool covered = for_each_run(st, p, size, [&](uintptr_t, Mapping& m, size_t, size_t, Access&) {
        CUmemLocationType where = st.allocations.at(m.alloc_id)->prop.location.type;
        if (host_numa && where != CU_MEM_LOCATION_TYPE_HOST_NUMA) numa_ok = false;
        if (host && where == CU_MEM_LOCATION_TYPE_DEVICE) host_ok = false;
    });
    if (!covered || !numa_ok) return CUDA_ERROR_INVALID_VALUE;
    if (!host_ok) return CUDA_ERROR_NOT_SUPPORTED;

    // Split the runs at the range ends (no semantic change), then for each run: mprotect
    // to the new union first and record the new flags only if that worked, so the
    // bookkeeping never claims more access than the CPU mapping grants.
    uintptr_t end = p + size;
    for (auto it = find_mapping(st, p); it != st.mappings.end() && it->first < end; ++it) {
        size_t lo = p > it->first ? p - it->first : 0;
        size_t hi = end - it->first < it->second.size ? end - it->first : it->second.size;
        split_at(it->second, lo);
        split_at(it->second, hi);
    }
    CUresult result = CUDA_SUCCESS;
    for_each_run(st, p, size, [&](uintptr_t base, Mapping& m, size_t b, size_t e, Access& cur) {
        if (result != CUDA_SUCCESS) return;
        Access next = cur;
        for (int s = 0; s < kAccessSlots; ++s)
            if (wanted[s] >= 0) next[s] = static_cast<unsigned char>(wanted[s]);
        // B40: DEVICE-located memory is never CPU memory at its public address.
        const bool device = st.allocations.at(m.alloc_id)->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
        if (::mprotect(reinterpret_cast<void*>(base + b), e - b, device ? PROT_NONE : prot_of(next)) != 0) {
            result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
        cur = next;  // runs are exactly [b, e) after the splits
    });
    for (auto it = find_mapping(st, p); it != st.mappings.end() && it->first < end; ++it) coalesce(it->second);
    return result;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
    CUVMM_REQUIRE_INIT();
    if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int slot = 0;
    if (CUresult r = access_slot(*location, &slot)) return r;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    auto it = find_mapping(st, p);
    if (it == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    const Mapping& m = it->second;
    auto seg = m.segments.upper_bound(p - it->first);
    --seg;
    *flags = seg->second[slot];
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
