// Host driver: pointer queries (cuMemGetAddressRange, cuPointerGetAttribute) over the
// registry, for bindings other than cuvmm's table (cuvmm/host_pointers.hpp).
//
// What they report, and why:
//   cuMemGetAddressRange(ptr)      the mapping holding ptr (base and size of that cuMemMap
//                                  chunk; audit A7: a GPU may report the chunk or more, the
//                                  callers accept any range holding the chunk). Not inside a
//                                  mapping: CUDA_ERROR_NOT_FOUND. Null pbase/psize: ignored.
//   RANGE_START_ADDR / RANGE_SIZE  the reservation holding the mapping (CUdeviceptr / size_t):
//                                  cuda.h 13.0 says these are the mappable address range the
//                                  pointer references (e.g. from cuMemAddressReserve), not
//                                  the mapped chunk cuMemGetAddressRange reports
//   MAPPED                         bool (one byte): 1 inside a mapping; 0 inside a
//                                  reservation but unmapped; else CUDA_ERROR_INVALID_VALUE
//   MEMORY_TYPE                    CUmemorytype (4 bytes): DEVICE for DEVICE-located
//                                  allocations, HOST for HOST / HOST_NUMA ones
//   DEVICE_ORDINAL                 int: the location id of a DEVICE-located allocation;
//                                  host-located ones: CUDA_ERROR_INVALID_VALUE (a GPU to confirm)
//   ALLOWED_HANDLE_TYPES           64-bit bitmask: the allocation's requestedHandleTypes
//   IS_MANAGED                     bool (one byte): 0 (VMM memory is never managed)
//   anything else, or an address outside every mapping (MAPPED aside)   CUDA_ERROR_INVALID_VALUE
// Null data: CUDA_ERROR_INVALID_VALUE. Before cuInit: CUDA_ERROR_NOT_INITIALIZED.
#include "cuvmm/host_pointers.hpp"

#include "host/host_internal.hpp"

#include <cstring>

namespace cuvmm {
namespace host {
namespace {

template <class T>
void put(void* data, T value) {
    std::memcpy(data, &value, sizeof value);
}

CUresult address_range(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
    CUVMM_REQUIRE_INIT();
    State& st = *g_state;
    Shared lock(st.mutex);
    auto it = find_mapping(st, static_cast<uintptr_t>(dptr));
    if (it == st.mappings.end()) return CUDA_ERROR_NOT_FOUND;
    if (pbase != nullptr) *pbase = static_cast<CUdeviceptr>(it->first);
    if (psize != nullptr) *psize = it->second.size;
    return CUDA_SUCCESS;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    CUVMM_REQUIRE_INIT();
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    State& st = *g_state;
    Shared lock(st.mutex);
    const auto p = static_cast<uintptr_t>(ptr);
    auto it = find_mapping(st, p);
    if (it == st.mappings.end()) {
        if (attribute == CU_POINTER_ATTRIBUTE_MAPPED && find_reservation(st, p, 1) != st.reservations.end()) {
            put<bool>(data, false);
            return CUDA_SUCCESS;
        }
        return CUDA_ERROR_INVALID_VALUE;
    }
    auto a = st.allocations.find(it->second.alloc_id);
    if (a == st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;  // a mapping always has its allocation
    const CUmemLocation& loc = a->second->prop.location;
    const bool on_device = loc.type == CU_MEM_LOCATION_TYPE_DEVICE;
    switch (attribute) {
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
            auto r = find_reservation(st, p, 1);  // a mapping always lies inside a reservation
            if (r == st.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
            if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
                put<CUdeviceptr>(data, r->first);
            } else {
                put<size_t>(data, r->second);
            }
            return CUDA_SUCCESS;
        }
        case CU_POINTER_ATTRIBUTE_MAPPED: put<bool>(data, true); return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: put<bool>(data, false); return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            put<unsigned int>(data, on_device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
            return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            if (!on_device) return CUDA_ERROR_INVALID_VALUE;
            put<int>(data, loc.id);
            return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            put<unsigned long long>(data, a->second->prop.requestedHandleTypes);
            return CUDA_SUCCESS;
        default: return CUDA_ERROR_INVALID_VALUE;
    }
}

// No exception crosses an entry point (the registry's rule): a bad_alloc is OUT_OF_MEMORY.
CUresult CUDAAPI guarded_address_range(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) noexcept {
    try {
        return address_range(pbase, psize, dptr);
    } catch (...) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

CUresult CUDAAPI guarded_pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) noexcept {
    try {
        return pointer_attribute(data, attribute, ptr);
    } catch (...) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

}  // namespace
}  // namespace host

void install_host_pointer_entries(HostPointerEntries& out) {
    out.cuMemGetAddressRange = &host::guarded_address_range;
    out.cuPointerGetAttribute = &host::guarded_pointer_attribute;
}

}  // namespace cuvmm
