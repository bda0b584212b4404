// Host driver entry points for sharing: export dups the allocation's memfd for the
// caller; import accepts only a memfd some cuvmm host driver created and exported, and
// keeps its own dup (the caller's fd stays the caller's).
#include "host/host_internal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

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

    // Is it one of ours? Open, a regular read-write memfd named by a cuvmm host driver,
    // sealed against shrinking (so a mapping of it can never SIGBUS), sized in granules.
    if (::fcntl(fd, F_GETFD) < 0) return CUDA_ERROR_INVALID_VALUE;
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) return CUDA_ERROR_INVALID_VALUE;
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) return CUDA_ERROR_INVALID_VALUE;
    int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) return CUDA_ERROR_INVALID_VALUE;
    char link[64];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    char target[512];
    ssize_t n = ::readlink(link, target, sizeof target - 1);
    if (n <= 0 || n >= static_cast<ssize_t>(sizeof target - 1)) return CUDA_ERROR_INVALID_VALUE;
    target[n] = '\0';
    int device = 0;
    CUmemAllocationProp prop{};
    if (!parse_memfd_target(target, &device, &prop)) return CUDA_ERROR_INVALID_VALUE;
    if (sb.st_size <= 0 || !aligned(static_cast<unsigned long long>(sb.st_size))) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;

    int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps its fd
    if (own < 0) return CUDA_ERROR_OPERATING_SYSTEM;

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    *handle = register_allocation(st, own, static_cast<size_t>(sb.st_size), prop, true);
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
