// The single table of CUDA driver entry points that everything in cuvmm calls.
//
// Two implementations fill it:
//   - cuda: libcuda.so.1, opened with dlopen and resolved with cuGetProcAddress
//           (cuda_driver.cpp). The library is never linked.
//   - host: our own strict implementation over memfd/mmap (native/host/).
// Code above this table (the VMM object model, the JNI facade) never knows which
// driver it talks to. Types come from our copy of cuda.h's declarations (cuda_api.hpp,
// checked against a real cuda.h when one is found) so signatures match the real driver
// exactly; a table entry is a plain function pointer with the driver's signature.
#pragma once

#include "cuvmm/cuda_api.hpp"

#include <atomic>
#include <cstdint>
#include <string>

namespace cuvmm {

// One row per entry point; the X-macro keeps the struct, the names used for
// cuGetProcAddress, the introducing versions and the call counters in one list.
//   X(name, introducing CUDA version, parameter list); every entry returns CUresult
#define CUVMM_DRIVER_ENTRY_POINTS(X)                                                              \
    X(cuInit, 2000, (unsigned int flags))                                                         \
    X(cuDriverGetVersion, 2020, (int* version))                                                   \
    X(cuDeviceGetCount, 2000, (int* count))                                                       \
    X(cuDeviceGet, 2000, (CUdevice * device, int ordinal))                                        \
    X(cuDeviceGetName, 2000, (char* name, int len, CUdevice dev))                                 \
    X(cuDeviceTotalMem, 3020, (size_t * bytes, CUdevice dev))                                     \
    X(cuDeviceGetAttribute, 2000, (int* value, CUdevice_attribute attrib, CUdevice dev))          \
    X(cuDeviceCanAccessPeer, 4000, (int* canAccessPeer, CUdevice dev, CUdevice peerDev))         \
    X(cuDevicePrimaryCtxRetain, 7000, (CUcontext * ctx, CUdevice dev))                            \
    X(cuDevicePrimaryCtxRelease, 11000, (CUdevice dev))                                           \
    X(cuCtxSetCurrent, 4000, (CUcontext ctx))                                                     \
    X(cuCtxGetCurrent, 4000, (CUcontext * ctx))                                                   \
    X(cuCtxSynchronize, 2000, ())                                                                 \
    X(cuMemGetAllocationGranularity, 10020,                                                       \
      (size_t * granularity, const CUmemAllocationProp* prop,                                     \
       CUmemAllocationGranularity_flags option))                                                  \
    X(cuMemCreate, 10020,                                                                         \
      (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,       \
       unsigned long long flags))                                                                 \
    X(cuMemRelease, 10020, (CUmemGenericAllocationHandle handle))                                 \
    X(cuMemAddressReserve, 10020,                                                                 \
      (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,                        \
       unsigned long long flags))                                                                 \
    X(cuMemAddressFree, 10020, (CUdeviceptr ptr, size_t size))                                    \
    X(cuMemMap, 10020,                                                                            \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,          \
       unsigned long long flags))                                                                 \
    X(cuMemUnmap, 10020, (CUdeviceptr ptr, size_t size))                                          \
    X(cuMemSetAccess, 10020,                                                                      \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))                  \
    X(cuMemGetAccess, 10020,                                                                      \
      (unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr))                \
    X(cuMemExportToShareableHandle, 10020,                                                        \
      (void* shareableHandle, CUmemGenericAllocationHandle handle,                                \
       CUmemAllocationHandleType handleType, unsigned long long flags))                           \
    X(cuMemImportFromShareableHandle, 10020,                                                      \
      (CUmemGenericAllocationHandle * handle, void* osHandle,                                     \
       CUmemAllocationHandleType shHandleType))                                                   \
    X(cuMemGetAllocationPropertiesFromHandle, 10020,                                              \
      (CUmemAllocationProp * prop, CUmemGenericAllocationHandle handle))                          \
    X(cuMemRetainAllocationHandle, 11000, (CUmemGenericAllocationHandle * handle, void* addr))    \
    X(cuMemcpyHtoD, 3020, (CUdeviceptr dst, const void* src, size_t bytes))                       \
    X(cuMemcpyDtoH, 3020, (void* dst, CUdeviceptr src, size_t bytes))                             \
    X(cuMemcpyDtoD, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))                       \
    X(cuMemsetD8, 3020, (CUdeviceptr dst, unsigned char value, size_t count))                     \
    X(cuStreamCreate, 2000, (CUstream * stream, unsigned int flags))                              \
    X(cuStreamDestroy, 4000, (CUstream stream))                                                   \
    X(cuStreamSynchronize, 2000, (CUstream stream))                                               \
    X(cuStreamCreateWithPriority, 5050, (CUstream * phStream, unsigned int flags, int priority))  \
    X(cuStreamQuery, 2000, (CUstream hStream))                                                    \
    X(cuStreamWaitEvent, 3020, (CUstream hStream, CUevent hEvent, unsigned int Flags))            \
    X(cuCtxGetStreamPriorityRange, 5050, (int* leastPriority, int* greatestPriority))             \
    X(cuEventCreate, 2000, (CUevent * phEvent, unsigned int Flags))                               \
    X(cuEventDestroy, 4000, (CUevent hEvent))                                                     \
    X(cuEventRecord, 2000, (CUevent hEvent, CUstream hStream))                                    \
    X(cuEventQuery, 2000, (CUevent hEvent))                                                       \
    X(cuEventSynchronize, 2000, (CUevent hEvent))                                                 \
    X(cuEventElapsedTime, 2000, (float* pMilliseconds, CUevent hStart, CUevent hEnd))             \
    X(cuLaunchHostFunc, 10000, (CUstream hStream, CUhostFn fn, void* userData))                   \
    X(cuMemcpyHtoDAsync, 3020, (CUdeviceptr dst, const void* src, size_t bytes, CUstream hStream)) \
    X(cuMemcpyDtoHAsync, 3020, (void* dst, CUdeviceptr src, size_t bytes, CUstream hStream))      \
    X(cuMemcpyDtoDAsync, 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream hStream)) \
    X(cuMemsetD8Async, 3020, (CUdeviceptr dst, unsigned char value, size_t count, CUstream hStream)) \
    X(cuMemHostAlloc, 2020, (void** pp, size_t bytesize, unsigned int Flags))                     \
    X(cuMemFreeHost, 2000, (void* p))                                                             \
    X(cuMemHostRegister, 6050, (void* p, size_t bytesize, unsigned int Flags))                    \
    X(cuMemHostUnregister, 4000, (void* p))                                                       \
    X(cuGetErrorName, 6000, (CUresult error, const char** str))                                   \
    X(cuGetErrorString, 6000, (CUresult error, const char** str))

// Index of each entry point, used for the per-entry-point call counters.
enum class Entry : int {
#define CUVMM_ENTRY_ENUM(name, version, params) name,
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_ENTRY_ENUM)
#undef CUVMM_ENTRY_ENUM
    count_
};
constexpr int kEntryCount = static_cast<int>(Entry::count_);

// Name of entry point `index` ("cuMemCreate"), or nullptr when out of range.
const char* entry_name(int index);

// The table itself. A null member means "not resolved"; loaders guarantee that a
// table they hand out has every member set.
struct DriverTable {
#define CUVMM_ENTRY_MEMBER(name, version, params) CUresult(CUDAAPI* name) params = nullptr;
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_ENTRY_MEMBER)
#undef CUVMM_ENTRY_MEMBER
};

// ---- host driver -------------------------------------------------------------------

// Configuration of the host driver, fixed when it is installed.
struct HostDriverConfig {
    int device_count = 1;                             // CUVMM_HOST_DEVICES, 1..8
    size_t granularity = size_t(2) << 20;             // minimum == recommended, like a GPU's 2 MiB
    long long stream_delay_micros = 0;                // CUVMM_HOST_STREAM_DELAY_MICROS: each queued op sleeps this first
};

// Live-object counters the host driver keeps (what is alive in the process right now).
struct HostLiveCounts {
    long long allocations = 0;   // handles created or imported and not yet fully released
    long long reservations = 0;  // address ranges reserved and not freed
    long long mappings = 0;      // mapped chunks not yet unmapped
    long long memfds = 0;        // memfds the driver holds open (one per live allocation)
};

// Fills `table` with the host driver. Never fails. Calling it again re-installs the
// same singleton state (config is taken from the first call).
void install_host_driver(DriverTable& table, const HostDriverConfig& config);

// Sets the delay every queued host-stream op sleeps before it runs (microseconds; <= 0: none),
// overriding HostDriverConfig::stream_delay_micros from now on. Lets a test prove that a
// missing synchronization reads stale data. Any thread, any time; ops already sleeping
// keep their delay.
void host_set_stream_delay_micros(long long micros);

// Test seam: the next cuEventRecord on `stream` (a created stream's CUstream) returns `code`
// without recording, once; CUDA_SUCCESS disarms. Lets a test take the path of a record that
// fails after its op was queued (AsyncCopies: the stream is synchronized, then the error
// thrown). Unarmed, it costs cuEventRecord one relaxed atomic load. Any thread, any time.
void host_fail_next_event_record(CUstream stream, CUresult code);

// Test seam: what cuDeviceCanAccessPeer(dev, peer) answers from now on for two distinct
// devices (both 0..7; every such pair answers 1 until set; a device is never its own peer).
// Lets a test take the path of devices that cannot reach each other's memory. Only the
// answer changes: cuMemSetAccess does not model the refusal (its code on a GPU is not known
// here). Any thread, any time.
void host_set_peer_access(int dev, int peer, bool can);

// Snapshot of the host driver's live counters (all zero before it is installed).
HostLiveCounts host_live_counts();

// Why the host driver's cuMemImportFromShareableHandle refuses `fd`: one sentence naming
// the fd and what is wrong with it (closed, not read-write, not a cuvmm host memfd, wrong
// seals, size, device), or "" when it would accept it or the host driver is not installed.
// Re-runs the import's checks on the fd's current metadata (no per-thread "last error"),
// so callers use it to explain a refusal they just got. Never throws.
std::string host_import_refusal(int fd);

// True when `fd` is the host driver's own fd of one of its live allocations (the memfd it
// maps for cuMemMap and copies): closing it would pull the memory from under the driver.
// False when the host driver is not installed. Never throws.
bool host_owns_fd(int fd);

}  // namespace cuvmm
