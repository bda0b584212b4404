// Physical allocations: cuMemCreate / cuMemImportFromShareableHandle, released once by
// the destructor.
#include "cuvmm/object_counts.hpp"

#include <cstdint>

namespace cuvmm {

Allocation::Allocation(CUmemGenericAllocationHandle handle, size_t size, bool imported,
                       CUmemAllocationHandleType types)
    : handle_(handle), size_(size), imported_(imported), handle_types_(types) {
    g_live_allocations.fetch_add(1, std::memory_order_relaxed);
}

Allocation::~Allocation() {
    CUresult rc = CUVMM_CALL_NOTHROW(cuMemRelease, handle_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuMemRelease", rc, "releasing a physical allocation");
    g_live_allocations.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<const Allocation> Allocation::create(const ChunkSpec& spec, size_t size, const Step& step) {
    CUmemGenericAllocationHandle handle = 0;
    CUVMM_CALL(cuMemCreate, step, &handle, size, &spec.prop, 0);
    // From here the handle is owned: if make_shared throws (bad_alloc), release it.
    try {
        return std::shared_ptr<const Allocation>(
            new Allocation(handle, size, false, spec.prop.requestedHandleTypes));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemRelease, handle);
        throw;
    }
}

std::shared_ptr<const Allocation> Allocation::import_fd(int fd, size_t size, const CUmemLocation& expected,
                                                        const Step& step) {
    CUmemGenericAllocationHandle handle = 0;
    CUVMM_CALL(cuMemImportFromShareableHandle, step, &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    std::shared_ptr<const Allocation> owned;
    try {
        owned.reset(new Allocation(handle, size, true, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemRelease, handle);
        throw;
    }
    // From here `owned` releases the handle if anything below throws.
    CUmemAllocationProp prop{};
    CUVMM_CALL(cuMemGetAllocationPropertiesFromHandle, step, &prop, handle);
    if (prop.location.type != expected.type || prop.location.id != expected.id) {
        throw DriverError(CUDA_ERROR_INVALID_DEVICE, "import", step.describe(),
                          "the memory lives at location type " + std::to_string(prop.location.type) + " id " +
                              std::to_string(prop.location.id) + " but this resource allocates at location type " +
                              std::to_string(expected.type) + " id " + std::to_string(expected.id) +
                              "; import with a resource on the device that owns the memory");
    }
    return owned;
}

}  // namespace cuvmm
