// Mappings: cuMemMap + cuMemSetAccess, undone by cuMemUnmap in the destructor.
#include "cuvmm/object_counts.hpp"

namespace cuvmm {

Mapping::Mapping(std::shared_ptr<const Reservation> reservation, CUdeviceptr address,
                 std::shared_ptr<const Allocation> allocation, std::vector<CUmemAccessDesc> access)
    : reservation_(std::move(reservation)),
      allocation_(std::move(allocation)),
      address_(address),
      access_(std::move(access)) {
    g_live_mappings.fetch_add(1, std::memory_order_relaxed);
}

Mapping::~Mapping() {
    TeardownContextScope context(reservation_->device());
    CUresult rc = CUVMM_CALL_NOTHROW(cuMemUnmap, address_, allocation_->size());
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuMemUnmap", rc, "unmapping a chunk");
    g_live_mappings.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<const Mapping> Mapping::map(std::shared_ptr<const Reservation> reservation, CUdeviceptr address,
                                            std::shared_ptr<const Allocation> allocation,
                                            const std::vector<CUmemAccessDesc>& access, const Step& step) {
    const size_t size = allocation->size();
    CUVMM_CALL(cuMemMap, step, address, size, 0, allocation->handle(), 0);
    // A failed `new` unmaps here; after that the box owns the mapping, so any failure
    // below (shared_ptr's control block included) unmaps through ~Mapping.
    Mapping* box = nullptr;
    try {
        box = new Mapping(std::move(reservation), address, std::move(allocation), access);
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemUnmap, address, size);
        throw;
    }
    std::shared_ptr<const Mapping> mapping(box);
    if (!access.empty()) {
        CUVMM_CALL(cuMemSetAccess, step, address, size, access.data(), access.size());
    }
    return mapping;
}

unsigned long long Mapping::granted(const CUmemLocation& location, const Step& step) const {
    unsigned long long flags = 0;
    CUVMM_CALL(cuMemGetAccess, step, &flags, &location, address_);
    return flags;
}

}  // namespace cuvmm
