#include "cuvmm/sharing.hpp"

#include "cuvmm/fd_utils.hpp"

namespace cuvmm {

size_t exported_chunk_count(const Range& range) {
    size_t covered = 0, count = 0;
    for (const auto& m : range.mappings()) {
        if (covered >= range.size()) break;
        covered += m->size();
        ++count;
    }
    return count;
}

std::vector<int> export_range_fds(const Range& range) {
    const size_t chunks = exported_chunk_count(range);
    for (size_t i = 0; i < chunks; ++i) {
        if (range.mappings()[i]->allocation()->imported()) {
            throw DriverError(CUDA_ERROR_NOT_PERMITTED, "export", "checking chunk " + std::to_string(i + 1),
                              // The same words as org.cuvmm.internal.ErrorMessages (ErrorMessagesTest checks).
                              "imported memory cannot be exported again; share it from the process that owns it "
                              "(forward the BufferDescriptor it was imported from, or publish the owner's buffer), "
                              "or copy the data into a buffer this process owns (resource.allocate + copyFrom) and "
                              "export that");
        }
    }
    if (range.spec()->prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "export", "checking the handle type",
                          "the buffer's allocations were not created with handle type POSIX_FD");
    }
    std::vector<int> fds;
    fds.reserve(chunks);
    try {
        DeviceContextScope context(range.spec()->device);
        for (size_t i = 0; i < chunks; ++i) {
            int fd = -1;
            Step step{"exporting chunk", static_cast<int>(i + 1), static_cast<int>(chunks)};
            count_call(Entry::cuMemExportToShareableHandle);
            CUresult rc = driver().cuMemExportToShareableHandle(&fd, range.mappings()[i]->allocation()->handle(),
                                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (rc != CUDA_SUCCESS) {
                throw DriverError(rc, "cuMemExportToShareableHandle", step.describe(), fd_limit_hint());
            }
            fds.push_back(fd);
        }
    } catch (...) {
        for (int fd : fds) close_fd(fd);
        throw;
    }
    return fds;
}

}  // namespace cuvmm
