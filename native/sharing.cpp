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
    std::vector<size_t> chunks(exported_chunk_count(range));
    for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = i;
    return export_chunk_fds(range, chunks);
}

std::vector<int> export_chunk_fds(const Range& range, const std::vector<size_t>& chunks) {
    const size_t mapped = range.mappings().size();
    std::vector<bool> named(mapped, false);
    for (size_t k = 0; k < chunks.size(); ++k) {
        const size_t i = chunks[k];
        if (i >= mapped) {
            throw DriverError(CUDA_ERROR_INVALID_VALUE, "export", "checking the chunk indices",
                              "chunk index " + std::to_string(i) + " (expected: 0 to " + std::to_string(mapped) +
                                  " exclusive, the chunks of the buffer)");
        }
        if (named[i]) {
            throw DriverError(CUDA_ERROR_INVALID_VALUE, "export", "checking the chunk indices",
                              "chunk index " + std::to_string(i) + " is named twice (expected: distinct indices)");
        }
        named[i] = true;
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
    fds.reserve(chunks.size());
    if (chunks.empty()) return fds;
    try {
        DeviceContextScope context(range.spec()->device);
        const int count = static_cast<int>(chunks.size());
        for (int k = 0; k < count; ++k) {
            int fd = -1;
            Step step{"exporting chunk", k + 1, count};
            count_call(Entry::cuMemExportToShareableHandle);
            CUresult rc = driver().cuMemExportToShareableHandle(&fd, range.mappings()[chunks[k]]->allocation()->handle(),
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
    // Handed out: from here another process may hold this memory (Allocation::exported).
    for (size_t i : chunks) range.mappings()[i]->allocation()->mark_exported();
    return fds;
}

}  // namespace cuvmm
