// Host driver entry points for physical memory: allocation properties and granularity,
// cuMemCreate (one sealed memfd per allocation), release, properties of a handle, and
// retaining a handle from a mapped address.
#include "host/host_internal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace cuvmm {
namespace host {
namespace {

// Validation shared by cuMemCreate and cuMemGetAllocationGranularity.
CUresult validate_prop(const CUmemAllocationProp* prop) {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (prop->type == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
            break;
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
            if (prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_MEM_LOCATION_TYPE_HOST:
            break;
        // cuda.h (cuMemCreate): "Specifying CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT as the
        // CUmemLocation::type will result in CUDA_ERROR_INVALID_VALUE."
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
    auto ht = static_cast<unsigned>(prop->requestedHandleTypes);
    if (ht & ~kKnownHandleBits) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h (cuMemCreate): "HOST allocations are not IPC capable and requestedHandleTypes
    // must be 0, any other value will result in CUDA_ERROR_INVALID_VALUE": any handle type,
    // checked before the types this driver does not support (audit B10: FABRIC or WIN32 on
    // a HOST location gave NOT_SUPPORTED).
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && ht != 0) return CUDA_ERROR_INVALID_VALUE;
    if (ht & kUnsupportedHandleBits) return CUDA_ERROR_NOT_SUPPORTED;
    // cuda.h (CUmemAllocationProp::win32HandleMetaData): needed only with a WIN32 handle
    // type (refused just above); "In all other cases, this field is required to be zero".
    // The code is not documented: INVALID_VALUE, a parameter outside its range.
    if (prop->win32HandleMetaData != nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (prop->allocFlags.gpuDirectRDMACapable != 0) return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->allocFlags.compressionType != 0) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

// The normalised location recorded for an allocation (ignored ids become 0).
CUmemLocation normalised_location(const CUmemLocation& loc) {
    CUmemLocation out{};
    out.type = loc.type;
    out.id = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : 0;
    return out;
}

}  // namespace

namespace entry {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
    CUVMM_REQUIRE_INIT();
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validate_prop(prop)) return r;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = g_state->config.granularity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validate_prop(prop)) return r;

    CUmemAllocationProp recorded{};
    recorded.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    recorded.requestedHandleTypes = prop->requestedHandleTypes;
    recorded.location = normalised_location(prop->location);

    // Before the memfd takes what may be the last fd: the budget's cgroup files need some.
    const size_t total = device_memory_bytes();
    // Sparse: ftruncate only, pages appear on first touch. Sealed against resizing so
    // that no holder (an importer included) can shrink it under a mapping (SIGBUS).
    std::string name = memfd_name(recorded);
    int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > static_cast<size_t>(INT64_MAX) || ::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        ::close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    // As a GPU's memory runs out (cuMemCreate commits it whole): the live allocations this
    // process created may not exceed the memory, though the memfd is sparse. One budget for
    // every location: their pages all come from this machine's (or cgroup's) memory.
    const size_t slot = created_slot(recorded.location);
    size_t created = 0;
    for (size_t b : st.created_bytes) created += b;
    if (total != 0 && size > total - std::min(total, created)) {
        lock.unlock();
        ::close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = register_allocation(st, fd, size, recorded, false);
    st.created_bytes[slot] += size;  // after the registration: a bad_alloc there counts nothing
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto h = st.handles.find(handle);
    if (h == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = h->second;
    Allocation* a = st.allocations.at(id).get();
    if (--a->refcount == 0) {
        st.handles.erase(h);
        a->handle = 0;
        drop_if_dead(st, id);  // memory stays while mapped
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
    CUVMM_REQUIRE_INIT();
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Shared lock(g_state->mutex);
    Allocation* a = find_handle(*g_state, handle);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *prop = a->prop;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto m = find_mapping(st, reinterpret_cast<uintptr_t>(addr));
    if (m == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = m->second.alloc_id;
    Allocation* a = st.allocations.at(id).get();
    if (a->handle == 0) {  // fully released but still mapped: its value again (never reused
                           // by another allocation: values come from a counter)
        const uint64_t value = a->mapped_handle != 0 ? a->mapped_handle : new_handle(st);
        st.handles.emplace(value, id);  // first: a bad_alloc leaves the record unchanged
        a->handle = value;
        a->refcount = 0;
    }
    ++a->refcount;
    *handle = a->handle;
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
