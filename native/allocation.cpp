// Physical allocations: cuMemCreate / cuMemImportFromShareableHandle, released once by
// the destructor. A failed create or import says what the driver cannot: near the fd
// limit, that the limit is the cause (fd_limit_hint); on the host driver, why an fd was
// refused (host_import_refusal).
#include "cuvmm/object_counts.hpp"

#include "cuvmm/fd_utils.hpp"
#include "cuvmm/release_notices.hpp"

#include <atomic>

#include <cstdint>
#include <string>

namespace cuvmm {
namespace {

// The last allocation id handed out. 64 bits: at a billion allocations a second it would
// take centuries to wrap, so "never reused" holds for any process.
std::atomic<uint64_t> g_last_allocation_id{0};

std::string describe_location(const CUmemLocation& loc) {
    switch (loc.type) {
        case CU_MEM_LOCATION_TYPE_DEVICE: return "device " + std::to_string(loc.id);
        case CU_MEM_LOCATION_TYPE_HOST: return "host memory";
        case CU_MEM_LOCATION_TYPE_HOST_NUMA: return "host NUMA node " + std::to_string(loc.id);
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return "the current host NUMA node";
        default: return "location type " + std::to_string(static_cast<int>(loc.type));
    }
}

// The fd-limit hint for a failed create / import, or "". Only for the codes running out of
// descriptors produces: the host driver returns OPERATING_SYSTEM when it cannot dup an
// imported fd and OUT_OF_MEMORY when it cannot create a memfd; the NVIDIA driver's code
// for it is undocumented, so both are taken. Any other code (a forged fd refused with
// INVALID_VALUE, a missing device) has another cause, even near the limit.
std::string fd_limit_hint_for(CUresult rc) {
    if (rc != CUDA_ERROR_OPERATING_SYSTEM && rc != CUDA_ERROR_OUT_OF_MEMORY) return "";
    return fd_limit_hint();
}

}  // namespace

Allocation::Allocation(int device, CUmemGenericAllocationHandle handle, size_t size, bool imported,
                       CUmemAllocationHandleType types)
    : handle_(handle),
      size_(size),
      imported_(imported),
      handle_types_(types),
      device_(device),
      id_(g_last_allocation_id.fetch_add(1, std::memory_order_relaxed) + 1) {
    g_live_allocations.fetch_add(1, std::memory_order_relaxed);
}

Allocation::~Allocation() {
    TeardownContextScope context(device_);
    CUresult rc = CUVMM_CALL_NOTHROW(cuMemRelease, handle_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuMemRelease", rc, "releasing a physical allocation");
    g_live_allocations.fetch_sub(1, std::memory_order_relaxed);
    // After the release call returned (also when it failed: the box, and with it the id, is
    // gone either way). One atomic load when no one listens.
    note_allocation_released(id_);
}

std::shared_ptr<const Allocation> Allocation::create(const ChunkSpec& spec, size_t size, const Step& step) {
    CUmemGenericAllocationHandle handle = 0;
    count_call(Entry::cuMemCreate);
    CUresult rc = driver().cuMemCreate(&handle, size, &spec.prop, 0);
    if (rc != CUDA_SUCCESS) {
        // The host driver holds one memfd per allocation, so at the fd limit cuMemCreate
        // fails (OUT_OF_MEMORY): say that the limit is the cause and what to do.
        std::string detail = driver_kind() == DriverKind::host ? fd_limit_hint_for(rc) : "";
        throw DriverError(rc, "cuMemCreate", step.describe(), detail);
    }
    return own(spec.device, handle, size, false, spec.prop.requestedHandleTypes);
}

std::shared_ptr<const Allocation> Allocation::own(int device, CUmemGenericAllocationHandle handle, size_t size,
                                                  bool imported, CUmemAllocationHandleType types) {
    // Until the box exists nothing would release the handle, so a failed `new` releases it
    // here. Once the box exists its destructor owns the release: shared_ptr deletes the box
    // itself if its control block cannot be allocated, so that stays outside the try.
    Allocation* box = nullptr;
    try {
        box = new Allocation(device, handle, size, imported, types);
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemRelease, handle);
        throw;
    }
    return std::shared_ptr<const Allocation>(box);
}

std::shared_ptr<const Allocation> Allocation::import_fd(int device, int fd, size_t size,
                                                        const CUmemLocation& expected, const Step& step) {
    CUmemGenericAllocationHandle handle = 0;
    count_call(Entry::cuMemImportFromShareableHandle);
    CUresult rc = driver().cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc != CUDA_SUCCESS) {
        // The driver returns only a CUresult; on the host driver, ask it why (it re-checks
        // the fd), so a forged or altered memfd is refused with what is wrong with it. The
        // host driver duplicates the fd (the NVIDIA driver's handling is unverified, audit
        // B46), so at the fd limit the import fails: say so (the same sentence export and
        // fromFds use), but only for a code running out of fds can produce.
        std::string detail = driver_kind() == DriverKind::host ? host_import_refusal(fd) : "";
        std::string hint = fd_limit_hint_for(rc);
        if (!hint.empty()) detail += (detail.empty() ? "" : "; ") + hint;
        throw DriverError(rc, "cuMemImportFromShareableHandle", step.describe(), detail);
    }
    std::shared_ptr<const Allocation> owned = own(device, handle, size, true, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    // From here `owned` releases the handle if anything below throws.
    CUmemAllocationProp prop{};
    CUVMM_CALL(cuMemGetAllocationPropertiesFromHandle, step, &prop, handle);
    if (prop.location.type != expected.type || prop.location.id != expected.id) {
        throw DriverError(CUDA_ERROR_INVALID_DEVICE, "import", step.describe(),
                          "the memory lives at " + describe_location(prop.location) + " but this resource allocates at " +
                              describe_location(expected) +
                              "; import with a resource on the device (or host location) that owns the memory");
    }
    return owned;
}

}  // namespace cuvmm
