// Access rules of the host driver: which slot a location's access lives in (one per
// device, one for the CPU), the CPU protection a run's access implies, and whether a
// range is accessible to a slot.
#include "host/host_internal.hpp"

namespace cuvmm {
namespace host {

// Maps an access location to its slot, or returns the CUresult for a bad location.
CUresult access_slot(const CUmemLocation& loc, int* slot) {
    switch (loc.type) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (!valid_device(loc.id)) return CUDA_ERROR_INVALID_DEVICE;
            *slot = loc.id;
            return CUDA_SUCCESS;
        // cuda.h (cuMemSetAccess): "When CUmemAccessDesc::CUmemLocation::type is
        // CU_MEM_LOCATION_TYPE_HOST_NUMA, CUmemAccessDesc::CUmemLocation::id is ignored."
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        case CU_MEM_LOCATION_TYPE_HOST:
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
            *slot = kHostSlot;
            return CUDA_SUCCESS;
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
}

// The CPU protection of a run: the union of what every location may do, because a CPU
// mapping cannot tell devices apart (per-device checks happen in the bookkeeping).
int prot_of(const Access& a) {
    unsigned u = 0;
    for (unsigned char f : a) u |= f;
    if ((u & kReadWrite) == kReadWrite) return PROT_READ | PROT_WRITE;
    if (u & kReadBit) return PROT_READ;
    return PROT_NONE;
}

// True when [p, p+n) is covered by mappings on which `slot` has at least `need`.
bool accessible(State& st, uintptr_t p, size_t n, int slot, unsigned need) {
    bool ok = true;
    bool covered = for_each_run(st, p, n, [&](uintptr_t, Mapping&, size_t, size_t, Access& a) {
        if ((a[slot] & need) != need) ok = false;
    });
    return covered && ok;
}

}  // namespace host
}  // namespace cuvmm
