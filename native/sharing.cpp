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
                              "the memory was imported from another process and cannot be exported again; forward "
                              "the descriptor you imported it from, or copy it into a buffer you own and export that");
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
