// Host driver entry points for sharing: export dups the allocation's memfd for the
// caller; import accepts only a memfd some cuvmm host driver created and exported, and
// keeps its own dup (the caller's fd stays the caller's).
#include "host/host_internal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace cuvmm {
namespace host {

namespace entry {

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    // Shared: a concurrent cuMemRelease (exclusive) cannot close the fd while we dup it.
    Shared lock(g_state->mutex);
    Allocation* a = find_handle(*g_state, handle);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto ht = static_cast<unsigned>(handleType);
    if (ht == CU_MEM_HANDLE_TYPE_FABRIC || ht == CU_MEM_HANDLE_TYPE_WIN32 || ht == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (ht != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    if (!(static_cast<unsigned>(a->prop.requestedHandleTypes) & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (a->imported) return CUDA_ERROR_NOT_PERMITTED;
    int fd = ::fcntl(a->fd, F_DUPFD_CLOEXEC, 0);  // the caller owns this one
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    *static_cast<int*>(shareableHandle) = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto ht = static_cast<unsigned>(shHandleType);
    if (ht == CU_MEM_HANDLE_TYPE_FABRIC || ht == CU_MEM_HANDLE_TYPE_WIN32 || ht == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (ht != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    auto raw = reinterpret_cast<intptr_t>(osHandle);
    if (raw < 0 || raw > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    int fd = static_cast<int>(raw);

    // Duplicate first, then check the duplicate: the caller's fd number may be closed and
    // reused by another thread at any moment, so checking the number and then duplicating
    // it could keep a file that was never checked. The duplicate is ours alone: what is
    // checked is what is kept. The caller keeps its fd either way.
    int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return errno == EBADF ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;

    // Is it one of ours? (check_import_fd: open read-write, named by a cuvmm host
    // driver, sealed exactly as cuMemCreate seals, sized in granules, a device we have.)
    ImportableMemfd memfd;
    CUresult checked = CUDA_ERROR_OUT_OF_MEMORY;
    try {
        checked = check_import_fd(own, &memfd, nullptr);
    } catch (...) {  // bad_alloc in its strings (Guarded: OUT_OF_MEMORY): the dup is ours
        ::close(own);
        throw;
    }
    if (checked != CUDA_SUCCESS) {
        ::close(own);
        return checked;
    }

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    *handle = register_allocation(st, own, memfd.size, memfd.prop, true);
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
