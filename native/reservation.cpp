// Virtual address reservations: cuMemAddressReserve, freed once by the destructor.
#include "cuvmm/object_counts.hpp"

namespace cuvmm {

Reservation::Reservation(int device, CUdeviceptr base, size_t size) : base_(base), size_(size), device_(device) {
    g_live_reservations.fetch_add(1, std::memory_order_relaxed);
}

Reservation::~Reservation() {
    TeardownContextScope context(device_);
    CUresult rc = CUVMM_CALL_NOTHROW(cuMemAddressFree, base_, size_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuMemAddressFree", rc, "freeing a reserved address range");
    g_live_reservations.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<const Reservation> Reservation::reserve(int device, size_t size, size_t alignment, CUdeviceptr hint,
                                                        const Step& step) {
    CUdeviceptr base = 0;
    CUVMM_CALL(cuMemAddressReserve, step, &base, size, alignment, hint, 0);
    // A failed `new` frees the range here; after that the box's destructor owns it (and
    // shared_ptr deletes the box if its control block cannot be allocated).
    Reservation* box = nullptr;
    try {
        box = new Reservation(device, base, size);
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemAddressFree, base, size);
        throw;
    }
    return std::shared_ptr<const Reservation>(box);
}

std::shared_ptr<const Reservation> Reservation::reserve_preferring(int device, size_t size, size_t alignment,
                                                                   CUdeviceptr hint, const Step& step) {
    if (hint == 0) return reserve(device, size, alignment, 0, step);
    try {
        return reserve(device, size, alignment, hint, step);
    } catch (const DriverError& e) {
        // The hint is a preference, never a requirement (VirtualMemoryResourceOptions), so
        // a failure the hint may have caused is retried once without it. cuda.h calls addr
        // a hint, yet some drivers refuse one they cannot honour with INVALID_VALUE instead
        // of placing the range elsewhere (DALI #3128/#3145, audit A1), and OUT_OF_MEMORY may
        // mean "no room there" only. Every other code (no context, not supported, a sticky
        // error, ...) does not depend on the hint: retrying would fail the same way and
        // hide the first failure.
        if (e.code() != CUDA_ERROR_INVALID_VALUE && e.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
    }
    return reserve(device, size, alignment, 0, step);
}

}  // namespace cuvmm
