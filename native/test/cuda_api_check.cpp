// Compile-only check (native/Makefile builds it with -fsyntax-only whenever a real cuda.h is
// found): every declaration of cuvmm/cuda_api.hpp matches cuda.h. It includes cuda.h first,
// records cuda.h's macros and #undefs them, then includes our header with
// CUVMM_CUDA_API_CHECK (our declarations land in namespace cuvmm_cuda_api, our macros are
// defined again) and static_asserts enumerator values, enum and typedef sizes and types,
// struct sizes, alignments and member offsets, macro values, and that every driver-table
// entry (the X-macro in driver_table.hpp, whose types then resolve to cuda.h's) has exactly
// the function pointer type of cuda.h's function. Our types and cuda.h's being
// layout-identical, and the table's signatures spelled with them being cuda.h's, together
// prove the table we call libcuda through is cuda.h's ABI. Any mismatch fails the build.
// When an enumerator, struct or macro is added to cuda_api.hpp, add its line here.
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_<name>_v<version>: each ABI variant's type, by first version

#include <cstddef>
#include <type_traits>

#define CUVMM_STR2(x) #x
#define CUVMM_STR(x) CUVMM_STR2(x)

namespace cuda_h {

constexpr long long CU_MEMHOSTALLOC_PORTABLE_ = CU_MEMHOSTALLOC_PORTABLE;
constexpr long long CU_MEMHOSTALLOC_DEVICEMAP_ = CU_MEMHOSTALLOC_DEVICEMAP;
constexpr long long CU_MEMHOSTALLOC_WRITECOMBINED_ = CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr long long CU_MEMHOSTREGISTER_PORTABLE_ = CU_MEMHOSTREGISTER_PORTABLE;
constexpr long long CU_MEMHOSTREGISTER_DEVICEMAP_ = CU_MEMHOSTREGISTER_DEVICEMAP;
constexpr long long CU_MEMHOSTREGISTER_IOMEMORY_ = CU_MEMHOSTREGISTER_IOMEMORY;
constexpr long long CU_MEMHOSTREGISTER_READ_ONLY_ = CU_MEMHOSTREGISTER_READ_ONLY;
constexpr const char CU_STREAM_LEGACY_[] = CUVMM_STR(CU_STREAM_LEGACY);
constexpr const char CU_STREAM_PER_THREAD_[] = CUVMM_STR(CU_STREAM_PER_THREAD);
constexpr const char CUDAAPI_[] = CUVMM_STR(CUDAAPI);
constexpr const char CUDA_CB_[] = CUVMM_STR(CUDA_CB);
constexpr long long CUDA_VERSION_ = CUDA_VERSION;
}  // namespace cuda_h

#undef CU_MEMHOSTALLOC_PORTABLE
#undef CU_MEMHOSTALLOC_DEVICEMAP
#undef CU_MEMHOSTALLOC_WRITECOMBINED
#undef CU_MEMHOSTREGISTER_PORTABLE
#undef CU_MEMHOSTREGISTER_DEVICEMAP
#undef CU_MEMHOSTREGISTER_IOMEMORY
#undef CU_MEMHOSTREGISTER_READ_ONLY
#undef CU_STREAM_LEGACY
#undef CU_STREAM_PER_THREAD

#define CUVMM_CUDA_API_CHECK
#include "cuvmm/cuda_api.hpp"
#include "cuvmm/driver_table.hpp"
#include "hostcuda/exports.hpp"

namespace {

constexpr bool same_text(const char* a, const char* b) {
    while (*a != 0 && *a == *b) { ++a; ++b; }
    return *a == *b;
}

namespace ours = cuvmm_cuda_api;

// ---- the header we copied from is this one or a later, ABI-compatible one
static_assert(cuda_h::CUDA_VERSION_ >= CUVMM_CUDA_API_VERSION, "cuda.h is older than the one cuda_api.hpp copies");

// ---- macros

static_assert(CU_MEMHOSTALLOC_PORTABLE == cuda_h::CU_MEMHOSTALLOC_PORTABLE_, "CU_MEMHOSTALLOC_PORTABLE");
static_assert(CU_MEMHOSTALLOC_DEVICEMAP == cuda_h::CU_MEMHOSTALLOC_DEVICEMAP_, "CU_MEMHOSTALLOC_DEVICEMAP");
static_assert(CU_MEMHOSTALLOC_WRITECOMBINED == cuda_h::CU_MEMHOSTALLOC_WRITECOMBINED_, "CU_MEMHOSTALLOC_WRITECOMBINED");
static_assert(CU_MEMHOSTREGISTER_PORTABLE == cuda_h::CU_MEMHOSTREGISTER_PORTABLE_, "CU_MEMHOSTREGISTER_PORTABLE");
static_assert(CU_MEMHOSTREGISTER_DEVICEMAP == cuda_h::CU_MEMHOSTREGISTER_DEVICEMAP_, "CU_MEMHOSTREGISTER_DEVICEMAP");
static_assert(CU_MEMHOSTREGISTER_IOMEMORY == cuda_h::CU_MEMHOSTREGISTER_IOMEMORY_, "CU_MEMHOSTREGISTER_IOMEMORY");
static_assert(CU_MEMHOSTREGISTER_READ_ONLY == cuda_h::CU_MEMHOSTREGISTER_READ_ONLY_, "CU_MEMHOSTREGISTER_READ_ONLY");
static_assert(same_text(CUVMM_STR(CU_STREAM_LEGACY), cuda_h::CU_STREAM_LEGACY_), "CU_STREAM_LEGACY");
static_assert(same_text(CUVMM_STR(CU_STREAM_PER_THREAD), cuda_h::CU_STREAM_PER_THREAD_), "CU_STREAM_PER_THREAD");
static_assert(same_text(cuda_h::CUDAAPI_, "") && same_text(cuda_h::CUDA_CB_, ""), "CUDAAPI/CUDA_CB are empty on Linux");

// ---- enum types: size and underlying type
static_assert(sizeof(ours::CUstream_flags) == sizeof(::CUstream_flags) && std::is_same_v<std::underlying_type_t<ours::CUstream_flags>, std::underlying_type_t<::CUstream_flags>>, "CUstream_flags");
static_assert(sizeof(ours::CUevent_flags) == sizeof(::CUevent_flags) && std::is_same_v<std::underlying_type_t<ours::CUevent_flags>, std::underlying_type_t<::CUevent_flags>>, "CUevent_flags");
static_assert(sizeof(ours::CUevent_wait_flags) == sizeof(::CUevent_wait_flags) && std::is_same_v<std::underlying_type_t<ours::CUevent_wait_flags>, std::underlying_type_t<::CUevent_wait_flags>>, "CUevent_wait_flags");
static_assert(sizeof(ours::CUdevice_attribute) == sizeof(::CUdevice_attribute) && std::is_same_v<std::underlying_type_t<ours::CUdevice_attribute>, std::underlying_type_t<::CUdevice_attribute>>, "CUdevice_attribute");
static_assert(sizeof(ours::CUdriverProcAddress_flags) == sizeof(::CUdriverProcAddress_flags) && std::is_same_v<std::underlying_type_t<ours::CUdriverProcAddress_flags>, std::underlying_type_t<::CUdriverProcAddress_flags>>, "CUdriverProcAddress_flags");
static_assert(sizeof(ours::CUdriverProcAddressQueryResult) == sizeof(::CUdriverProcAddressQueryResult) && std::is_same_v<std::underlying_type_t<ours::CUdriverProcAddressQueryResult>, std::underlying_type_t<::CUdriverProcAddressQueryResult>>, "CUdriverProcAddressQueryResult");
static_assert(sizeof(ours::CUresult) == sizeof(::CUresult) && std::is_same_v<std::underlying_type_t<ours::CUresult>, std::underlying_type_t<::CUresult>>, "CUresult");
static_assert(sizeof(ours::CUmemAllocationHandleType) == sizeof(::CUmemAllocationHandleType) && std::is_same_v<std::underlying_type_t<ours::CUmemAllocationHandleType>, std::underlying_type_t<::CUmemAllocationHandleType>>, "CUmemAllocationHandleType");
static_assert(sizeof(ours::CUmemAccess_flags) == sizeof(::CUmemAccess_flags) && std::is_same_v<std::underlying_type_t<ours::CUmemAccess_flags>, std::underlying_type_t<::CUmemAccess_flags>>, "CUmemAccess_flags");
static_assert(sizeof(ours::CUmemLocationType) == sizeof(::CUmemLocationType) && std::is_same_v<std::underlying_type_t<ours::CUmemLocationType>, std::underlying_type_t<::CUmemLocationType>>, "CUmemLocationType");
static_assert(sizeof(ours::CUmemAllocationType) == sizeof(::CUmemAllocationType) && std::is_same_v<std::underlying_type_t<ours::CUmemAllocationType>, std::underlying_type_t<::CUmemAllocationType>>, "CUmemAllocationType");
static_assert(sizeof(ours::CUmemAllocationGranularity_flags) == sizeof(::CUmemAllocationGranularity_flags) && std::is_same_v<std::underlying_type_t<ours::CUmemAllocationGranularity_flags>, std::underlying_type_t<::CUmemAllocationGranularity_flags>>, "CUmemAllocationGranularity_flags");
static_assert(sizeof(ours::CUmemAllocationCompType) == sizeof(::CUmemAllocationCompType) && std::is_same_v<std::underlying_type_t<ours::CUmemAllocationCompType>, std::underlying_type_t<::CUmemAllocationCompType>>, "CUmemAllocationCompType");

// ---- enumerators
static_assert(static_cast<long long>(ours::CU_STREAM_DEFAULT) == static_cast<long long>(::CU_STREAM_DEFAULT), "CU_STREAM_DEFAULT");
static_assert(static_cast<long long>(ours::CU_STREAM_NON_BLOCKING) == static_cast<long long>(::CU_STREAM_NON_BLOCKING), "CU_STREAM_NON_BLOCKING");
static_assert(static_cast<long long>(ours::CU_EVENT_DEFAULT) == static_cast<long long>(::CU_EVENT_DEFAULT), "CU_EVENT_DEFAULT");
static_assert(static_cast<long long>(ours::CU_EVENT_BLOCKING_SYNC) == static_cast<long long>(::CU_EVENT_BLOCKING_SYNC), "CU_EVENT_BLOCKING_SYNC");
static_assert(static_cast<long long>(ours::CU_EVENT_DISABLE_TIMING) == static_cast<long long>(::CU_EVENT_DISABLE_TIMING), "CU_EVENT_DISABLE_TIMING");
static_assert(static_cast<long long>(ours::CU_EVENT_INTERPROCESS) == static_cast<long long>(::CU_EVENT_INTERPROCESS), "CU_EVENT_INTERPROCESS");
static_assert(static_cast<long long>(ours::CU_EVENT_WAIT_DEFAULT) == static_cast<long long>(::CU_EVENT_WAIT_DEFAULT), "CU_EVENT_WAIT_DEFAULT");
static_assert(static_cast<long long>(ours::CU_EVENT_WAIT_EXTERNAL) == static_cast<long long>(::CU_EVENT_WAIT_EXTERNAL), "CU_EVENT_WAIT_EXTERNAL");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), "CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED), "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED), "CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), "CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED");
static_assert(static_cast<long long>(ours::CU_DEVICE_ATTRIBUTE_MAX) == static_cast<long long>(::CU_DEVICE_ATTRIBUTE_MAX), "CU_DEVICE_ATTRIBUTE_MAX");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_DEFAULT) == static_cast<long long>(::CU_GET_PROC_ADDRESS_DEFAULT), "CU_GET_PROC_ADDRESS_DEFAULT");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_LEGACY_STREAM) == static_cast<long long>(::CU_GET_PROC_ADDRESS_LEGACY_STREAM), "CU_GET_PROC_ADDRESS_LEGACY_STREAM");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == static_cast<long long>(::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_CONTEXT) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_CONTEXT), "CU_POINTER_ATTRIBUTE_CONTEXT");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_MEMORY_TYPE) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_MEMORY_TYPE), "CU_POINTER_ATTRIBUTE_MEMORY_TYPE");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_DEVICE_POINTER) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_DEVICE_POINTER), "CU_POINTER_ATTRIBUTE_DEVICE_POINTER");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_HOST_POINTER) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_HOST_POINTER), "CU_POINTER_ATTRIBUTE_HOST_POINTER");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_IS_MANAGED) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_IS_MANAGED), "CU_POINTER_ATTRIBUTE_IS_MANAGED");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL), "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR), "CU_POINTER_ATTRIBUTE_RANGE_START_ADDR");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_RANGE_SIZE) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_RANGE_SIZE), "CU_POINTER_ATTRIBUTE_RANGE_SIZE");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_MAPPED) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_MAPPED), "CU_POINTER_ATTRIBUTE_MAPPED");
static_assert(static_cast<long long>(ours::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES) == static_cast<long long>(::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES), "CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES");
static_assert(static_cast<long long>(ours::CU_MEMORYTYPE_HOST) == static_cast<long long>(::CU_MEMORYTYPE_HOST), "CU_MEMORYTYPE_HOST");
static_assert(static_cast<long long>(ours::CU_MEMORYTYPE_DEVICE) == static_cast<long long>(::CU_MEMORYTYPE_DEVICE), "CU_MEMORYTYPE_DEVICE");
static_assert(static_cast<long long>(ours::CU_MEMORYTYPE_ARRAY) == static_cast<long long>(::CU_MEMORYTYPE_ARRAY), "CU_MEMORYTYPE_ARRAY");
static_assert(static_cast<long long>(ours::CU_MEMORYTYPE_UNIFIED) == static_cast<long long>(::CU_MEMORYTYPE_UNIFIED), "CU_MEMORYTYPE_UNIFIED");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_SUCCESS) == static_cast<long long>(::CU_GET_PROC_ADDRESS_SUCCESS), "CU_GET_PROC_ADDRESS_SUCCESS");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) == static_cast<long long>(::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND), "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND");
static_assert(static_cast<long long>(ours::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) == static_cast<long long>(::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT), "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT");
static_assert(static_cast<long long>(ours::CUDA_SUCCESS) == static_cast<long long>(::CUDA_SUCCESS), "CUDA_SUCCESS");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_VALUE) == static_cast<long long>(::CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_OUT_OF_MEMORY) == static_cast<long long>(::CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_INITIALIZED) == static_cast<long long>(::CUDA_ERROR_NOT_INITIALIZED), "CUDA_ERROR_NOT_INITIALIZED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_DEINITIALIZED) == static_cast<long long>(::CUDA_ERROR_DEINITIALIZED), "CUDA_ERROR_DEINITIALIZED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PROFILER_DISABLED) == static_cast<long long>(::CUDA_ERROR_PROFILER_DISABLED), "CUDA_ERROR_PROFILER_DISABLED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PROFILER_NOT_INITIALIZED) == static_cast<long long>(::CUDA_ERROR_PROFILER_NOT_INITIALIZED), "CUDA_ERROR_PROFILER_NOT_INITIALIZED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PROFILER_ALREADY_STARTED) == static_cast<long long>(::CUDA_ERROR_PROFILER_ALREADY_STARTED), "CUDA_ERROR_PROFILER_ALREADY_STARTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PROFILER_ALREADY_STOPPED) == static_cast<long long>(::CUDA_ERROR_PROFILER_ALREADY_STOPPED), "CUDA_ERROR_PROFILER_ALREADY_STOPPED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STUB_LIBRARY) == static_cast<long long>(::CUDA_ERROR_STUB_LIBRARY), "CUDA_ERROR_STUB_LIBRARY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER) == static_cast<long long>(::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER), "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER");
static_assert(static_cast<long long>(ours::CUDA_ERROR_DEVICE_UNAVAILABLE) == static_cast<long long>(::CUDA_ERROR_DEVICE_UNAVAILABLE), "CUDA_ERROR_DEVICE_UNAVAILABLE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NO_DEVICE) == static_cast<long long>(::CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_DEVICE) == static_cast<long long>(::CUDA_ERROR_INVALID_DEVICE), "CUDA_ERROR_INVALID_DEVICE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_DEVICE_NOT_LICENSED) == static_cast<long long>(::CUDA_ERROR_DEVICE_NOT_LICENSED), "CUDA_ERROR_DEVICE_NOT_LICENSED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_IMAGE) == static_cast<long long>(::CUDA_ERROR_INVALID_IMAGE), "CUDA_ERROR_INVALID_IMAGE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_CONTEXT) == static_cast<long long>(::CUDA_ERROR_INVALID_CONTEXT), "CUDA_ERROR_INVALID_CONTEXT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CONTEXT_ALREADY_CURRENT) == static_cast<long long>(::CUDA_ERROR_CONTEXT_ALREADY_CURRENT), "CUDA_ERROR_CONTEXT_ALREADY_CURRENT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MAP_FAILED) == static_cast<long long>(::CUDA_ERROR_MAP_FAILED), "CUDA_ERROR_MAP_FAILED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNMAP_FAILED) == static_cast<long long>(::CUDA_ERROR_UNMAP_FAILED), "CUDA_ERROR_UNMAP_FAILED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ARRAY_IS_MAPPED) == static_cast<long long>(::CUDA_ERROR_ARRAY_IS_MAPPED), "CUDA_ERROR_ARRAY_IS_MAPPED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ALREADY_MAPPED) == static_cast<long long>(::CUDA_ERROR_ALREADY_MAPPED), "CUDA_ERROR_ALREADY_MAPPED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NO_BINARY_FOR_GPU) == static_cast<long long>(::CUDA_ERROR_NO_BINARY_FOR_GPU), "CUDA_ERROR_NO_BINARY_FOR_GPU");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ALREADY_ACQUIRED) == static_cast<long long>(::CUDA_ERROR_ALREADY_ACQUIRED), "CUDA_ERROR_ALREADY_ACQUIRED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_MAPPED) == static_cast<long long>(::CUDA_ERROR_NOT_MAPPED), "CUDA_ERROR_NOT_MAPPED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_MAPPED_AS_ARRAY) == static_cast<long long>(::CUDA_ERROR_NOT_MAPPED_AS_ARRAY), "CUDA_ERROR_NOT_MAPPED_AS_ARRAY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_MAPPED_AS_POINTER) == static_cast<long long>(::CUDA_ERROR_NOT_MAPPED_AS_POINTER), "CUDA_ERROR_NOT_MAPPED_AS_POINTER");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ECC_UNCORRECTABLE) == static_cast<long long>(::CUDA_ERROR_ECC_UNCORRECTABLE), "CUDA_ERROR_ECC_UNCORRECTABLE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNSUPPORTED_LIMIT) == static_cast<long long>(::CUDA_ERROR_UNSUPPORTED_LIMIT), "CUDA_ERROR_UNSUPPORTED_LIMIT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CONTEXT_ALREADY_IN_USE) == static_cast<long long>(::CUDA_ERROR_CONTEXT_ALREADY_IN_USE), "CUDA_ERROR_CONTEXT_ALREADY_IN_USE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) == static_cast<long long>(::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED), "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_PTX) == static_cast<long long>(::CUDA_ERROR_INVALID_PTX), "CUDA_ERROR_INVALID_PTX");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_GRAPHICS_CONTEXT) == static_cast<long long>(::CUDA_ERROR_INVALID_GRAPHICS_CONTEXT), "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NVLINK_UNCORRECTABLE) == static_cast<long long>(::CUDA_ERROR_NVLINK_UNCORRECTABLE), "CUDA_ERROR_NVLINK_UNCORRECTABLE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_JIT_COMPILER_NOT_FOUND) == static_cast<long long>(::CUDA_ERROR_JIT_COMPILER_NOT_FOUND), "CUDA_ERROR_JIT_COMPILER_NOT_FOUND");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNSUPPORTED_PTX_VERSION) == static_cast<long long>(::CUDA_ERROR_UNSUPPORTED_PTX_VERSION), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
static_assert(static_cast<long long>(ours::CUDA_ERROR_JIT_COMPILATION_DISABLED) == static_cast<long long>(::CUDA_ERROR_JIT_COMPILATION_DISABLED), "CUDA_ERROR_JIT_COMPILATION_DISABLED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY) == static_cast<long long>(::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY), "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC) == static_cast<long long>(::CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC), "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CONTAINED) == static_cast<long long>(::CUDA_ERROR_CONTAINED), "CUDA_ERROR_CONTAINED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_SOURCE) == static_cast<long long>(::CUDA_ERROR_INVALID_SOURCE), "CUDA_ERROR_INVALID_SOURCE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_FILE_NOT_FOUND) == static_cast<long long>(::CUDA_ERROR_FILE_NOT_FOUND), "CUDA_ERROR_FILE_NOT_FOUND");
static_assert(static_cast<long long>(ours::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) == static_cast<long long>(::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND), "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND");
static_assert(static_cast<long long>(ours::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED) == static_cast<long long>(::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED), "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_OPERATING_SYSTEM) == static_cast<long long>(::CUDA_ERROR_OPERATING_SYSTEM), "CUDA_ERROR_OPERATING_SYSTEM");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_HANDLE) == static_cast<long long>(::CUDA_ERROR_INVALID_HANDLE), "CUDA_ERROR_INVALID_HANDLE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ILLEGAL_STATE) == static_cast<long long>(::CUDA_ERROR_ILLEGAL_STATE), "CUDA_ERROR_ILLEGAL_STATE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_LOSSY_QUERY) == static_cast<long long>(::CUDA_ERROR_LOSSY_QUERY), "CUDA_ERROR_LOSSY_QUERY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_FOUND) == static_cast<long long>(::CUDA_ERROR_NOT_FOUND), "CUDA_ERROR_NOT_FOUND");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_READY) == static_cast<long long>(::CUDA_ERROR_NOT_READY), "CUDA_ERROR_NOT_READY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ILLEGAL_ADDRESS) == static_cast<long long>(::CUDA_ERROR_ILLEGAL_ADDRESS), "CUDA_ERROR_ILLEGAL_ADDRESS");
static_assert(static_cast<long long>(ours::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) == static_cast<long long>(::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
static_assert(static_cast<long long>(ours::CUDA_ERROR_LAUNCH_TIMEOUT) == static_cast<long long>(::CUDA_ERROR_LAUNCH_TIMEOUT), "CUDA_ERROR_LAUNCH_TIMEOUT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING) == static_cast<long long>(::CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING), "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) == static_cast<long long>(::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED), "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) == static_cast<long long>(::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED), "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE) == static_cast<long long>(::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE), "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CONTEXT_IS_DESTROYED) == static_cast<long long>(::CUDA_ERROR_CONTEXT_IS_DESTROYED), "CUDA_ERROR_CONTEXT_IS_DESTROYED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ASSERT) == static_cast<long long>(::CUDA_ERROR_ASSERT), "CUDA_ERROR_ASSERT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_TOO_MANY_PEERS) == static_cast<long long>(::CUDA_ERROR_TOO_MANY_PEERS), "CUDA_ERROR_TOO_MANY_PEERS");
static_assert(static_cast<long long>(ours::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) == static_cast<long long>(::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) == static_cast<long long>(::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED), "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_HARDWARE_STACK_ERROR) == static_cast<long long>(::CUDA_ERROR_HARDWARE_STACK_ERROR), "CUDA_ERROR_HARDWARE_STACK_ERROR");
static_assert(static_cast<long long>(ours::CUDA_ERROR_ILLEGAL_INSTRUCTION) == static_cast<long long>(::CUDA_ERROR_ILLEGAL_INSTRUCTION), "CUDA_ERROR_ILLEGAL_INSTRUCTION");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MISALIGNED_ADDRESS) == static_cast<long long>(::CUDA_ERROR_MISALIGNED_ADDRESS), "CUDA_ERROR_MISALIGNED_ADDRESS");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_ADDRESS_SPACE) == static_cast<long long>(::CUDA_ERROR_INVALID_ADDRESS_SPACE), "CUDA_ERROR_INVALID_ADDRESS_SPACE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_PC) == static_cast<long long>(::CUDA_ERROR_INVALID_PC), "CUDA_ERROR_INVALID_PC");
static_assert(static_cast<long long>(ours::CUDA_ERROR_LAUNCH_FAILED) == static_cast<long long>(::CUDA_ERROR_LAUNCH_FAILED), "CUDA_ERROR_LAUNCH_FAILED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) == static_cast<long long>(::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_TENSOR_MEMORY_LEAK) == static_cast<long long>(::CUDA_ERROR_TENSOR_MEMORY_LEAK), "CUDA_ERROR_TENSOR_MEMORY_LEAK");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_PERMITTED) == static_cast<long long>(::CUDA_ERROR_NOT_PERMITTED), "CUDA_ERROR_NOT_PERMITTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_NOT_SUPPORTED) == static_cast<long long>(::CUDA_ERROR_NOT_SUPPORTED), "CUDA_ERROR_NOT_SUPPORTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_SYSTEM_NOT_READY) == static_cast<long long>(::CUDA_ERROR_SYSTEM_NOT_READY), "CUDA_ERROR_SYSTEM_NOT_READY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) == static_cast<long long>(::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
static_assert(static_cast<long long>(ours::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) == static_cast<long long>(::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE), "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_CONNECTION_FAILED) == static_cast<long long>(::CUDA_ERROR_MPS_CONNECTION_FAILED), "CUDA_ERROR_MPS_CONNECTION_FAILED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_RPC_FAILURE) == static_cast<long long>(::CUDA_ERROR_MPS_RPC_FAILURE), "CUDA_ERROR_MPS_RPC_FAILURE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_SERVER_NOT_READY) == static_cast<long long>(::CUDA_ERROR_MPS_SERVER_NOT_READY), "CUDA_ERROR_MPS_SERVER_NOT_READY");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_MAX_CLIENTS_REACHED) == static_cast<long long>(::CUDA_ERROR_MPS_MAX_CLIENTS_REACHED), "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED) == static_cast<long long>(::CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED), "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_MPS_CLIENT_TERMINATED) == static_cast<long long>(::CUDA_ERROR_MPS_CLIENT_TERMINATED), "CUDA_ERROR_MPS_CLIENT_TERMINATED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CDP_NOT_SUPPORTED) == static_cast<long long>(::CUDA_ERROR_CDP_NOT_SUPPORTED), "CUDA_ERROR_CDP_NOT_SUPPORTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CDP_VERSION_MISMATCH) == static_cast<long long>(::CUDA_ERROR_CDP_VERSION_MISMATCH), "CUDA_ERROR_CDP_VERSION_MISMATCH");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_MERGE) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_MERGE), "CUDA_ERROR_STREAM_CAPTURE_MERGE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED), "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_UNJOINED) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_UNJOINED), "CUDA_ERROR_STREAM_CAPTURE_UNJOINED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_ISOLATION) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_ISOLATION), "CUDA_ERROR_STREAM_CAPTURE_ISOLATION");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_CAPTURED_EVENT) == static_cast<long long>(::CUDA_ERROR_CAPTURED_EVENT), "CUDA_ERROR_CAPTURED_EVENT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) == static_cast<long long>(::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD), "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD");
static_assert(static_cast<long long>(ours::CUDA_ERROR_TIMEOUT) == static_cast<long long>(::CUDA_ERROR_TIMEOUT), "CUDA_ERROR_TIMEOUT");
static_assert(static_cast<long long>(ours::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) == static_cast<long long>(::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE), "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_EXTERNAL_DEVICE) == static_cast<long long>(::CUDA_ERROR_EXTERNAL_DEVICE), "CUDA_ERROR_EXTERNAL_DEVICE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_CLUSTER_SIZE) == static_cast<long long>(::CUDA_ERROR_INVALID_CLUSTER_SIZE), "CUDA_ERROR_INVALID_CLUSTER_SIZE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_FUNCTION_NOT_LOADED) == static_cast<long long>(::CUDA_ERROR_FUNCTION_NOT_LOADED), "CUDA_ERROR_FUNCTION_NOT_LOADED");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_RESOURCE_TYPE) == static_cast<long long>(::CUDA_ERROR_INVALID_RESOURCE_TYPE), "CUDA_ERROR_INVALID_RESOURCE_TYPE");
static_assert(static_cast<long long>(ours::CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) == static_cast<long long>(::CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION), "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION");
static_assert(static_cast<long long>(ours::CUDA_ERROR_KEY_ROTATION) == static_cast<long long>(::CUDA_ERROR_KEY_ROTATION), "CUDA_ERROR_KEY_ROTATION");
static_assert(static_cast<long long>(ours::CUDA_ERROR_UNKNOWN) == static_cast<long long>(::CUDA_ERROR_UNKNOWN), "CUDA_ERROR_UNKNOWN");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_NONE) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_NONE), "CU_MEM_HANDLE_TYPE_NONE");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_WIN32) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_WIN32), "CU_MEM_HANDLE_TYPE_WIN32");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_WIN32_KMT) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_WIN32_KMT), "CU_MEM_HANDLE_TYPE_WIN32_KMT");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_FABRIC) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_FABRIC), "CU_MEM_HANDLE_TYPE_FABRIC");
static_assert(static_cast<long long>(ours::CU_MEM_HANDLE_TYPE_MAX) == static_cast<long long>(::CU_MEM_HANDLE_TYPE_MAX), "CU_MEM_HANDLE_TYPE_MAX");
static_assert(static_cast<long long>(ours::CU_MEM_ACCESS_FLAGS_PROT_NONE) == static_cast<long long>(::CU_MEM_ACCESS_FLAGS_PROT_NONE), "CU_MEM_ACCESS_FLAGS_PROT_NONE");
static_assert(static_cast<long long>(ours::CU_MEM_ACCESS_FLAGS_PROT_READ) == static_cast<long long>(::CU_MEM_ACCESS_FLAGS_PROT_READ), "CU_MEM_ACCESS_FLAGS_PROT_READ");
static_assert(static_cast<long long>(ours::CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == static_cast<long long>(::CU_MEM_ACCESS_FLAGS_PROT_READWRITE), "CU_MEM_ACCESS_FLAGS_PROT_READWRITE");
static_assert(static_cast<long long>(ours::CU_MEM_ACCESS_FLAGS_PROT_MAX) == static_cast<long long>(::CU_MEM_ACCESS_FLAGS_PROT_MAX), "CU_MEM_ACCESS_FLAGS_PROT_MAX");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_INVALID) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_INVALID), "CU_MEM_LOCATION_TYPE_INVALID");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_DEVICE) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_DEVICE), "CU_MEM_LOCATION_TYPE_DEVICE");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_HOST) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_HOST), "CU_MEM_LOCATION_TYPE_HOST");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_HOST_NUMA) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_HOST_NUMA), "CU_MEM_LOCATION_TYPE_HOST_NUMA");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT), "CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT");
static_assert(static_cast<long long>(ours::CU_MEM_LOCATION_TYPE_MAX) == static_cast<long long>(::CU_MEM_LOCATION_TYPE_MAX), "CU_MEM_LOCATION_TYPE_MAX");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOCATION_TYPE_INVALID) == static_cast<long long>(::CU_MEM_ALLOCATION_TYPE_INVALID), "CU_MEM_ALLOCATION_TYPE_INVALID");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOCATION_TYPE_PINNED) == static_cast<long long>(::CU_MEM_ALLOCATION_TYPE_PINNED), "CU_MEM_ALLOCATION_TYPE_PINNED");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOCATION_TYPE_MANAGED) == static_cast<long long>(::CU_MEM_ALLOCATION_TYPE_MANAGED), "CU_MEM_ALLOCATION_TYPE_MANAGED");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOCATION_TYPE_MAX) == static_cast<long long>(::CU_MEM_ALLOCATION_TYPE_MAX), "CU_MEM_ALLOCATION_TYPE_MAX");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOC_GRANULARITY_MINIMUM) == static_cast<long long>(::CU_MEM_ALLOC_GRANULARITY_MINIMUM), "CU_MEM_ALLOC_GRANULARITY_MINIMUM");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == static_cast<long long>(::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "CU_MEM_ALLOC_GRANULARITY_RECOMMENDED");
static_assert(static_cast<long long>(ours::CU_MEM_ALLOCATION_COMP_GENERIC) == static_cast<long long>(::CU_MEM_ALLOCATION_COMP_GENERIC), "CU_MEM_ALLOCATION_COMP_GENERIC");

// ---- scalar and handle typedefs
#define CUVMM_SAME_TYPE(T) static_assert(std::is_same_v<ours::T, ::T>, #T);
CUVMM_SAME_TYPE(cuuint32_t)
CUVMM_SAME_TYPE(cuuint64_t)
CUVMM_SAME_TYPE(CUdeviceptr_v2)
CUVMM_SAME_TYPE(CUdeviceptr)
CUVMM_SAME_TYPE(CUdevice_v1)
CUVMM_SAME_TYPE(CUdevice)
CUVMM_SAME_TYPE(CUmemGenericAllocationHandle_v1)
CUVMM_SAME_TYPE(CUmemGenericAllocationHandle)
CUVMM_SAME_TYPE(CUhostFn)
#define CUVMM_SAME_SIZE(T) static_assert(sizeof(ours::T) == sizeof(::T) && alignof(ours::T) == alignof(::T), #T);
CUVMM_SAME_SIZE(CUcontext)
CUVMM_SAME_SIZE(CUevent)
CUVMM_SAME_SIZE(CUstream)
CUVMM_SAME_SIZE(CUpointer_attribute)
CUVMM_SAME_SIZE(CUmemorytype)

// ---- structs: size, alignment, and each member's offset and size
#define CUVMM_SAME_STRUCT(T) static_assert(sizeof(ours::T) == sizeof(::T) && alignof(ours::T) == alignof(::T), #T);
#define CUVMM_SAME_MEMBER(T, m)                                                              \
    static_assert(offsetof(ours::T, m) == offsetof(::T, m) &&                                \
                  sizeof(std::declval<ours::T&>().m) == sizeof(std::declval<::T&>().m), #T "." #m);
CUVMM_SAME_STRUCT(CUmemLocation)
CUVMM_SAME_MEMBER(CUmemLocation, type)
CUVMM_SAME_MEMBER(CUmemLocation, id)
CUVMM_SAME_STRUCT(CUmemAllocationProp)
CUVMM_SAME_MEMBER(CUmemAllocationProp, type)
CUVMM_SAME_MEMBER(CUmemAllocationProp, requestedHandleTypes)
CUVMM_SAME_MEMBER(CUmemAllocationProp, location)
CUVMM_SAME_MEMBER(CUmemAllocationProp, win32HandleMetaData)
CUVMM_SAME_MEMBER(CUmemAllocationProp, allocFlags)
CUVMM_SAME_MEMBER(CUmemAllocationProp, allocFlags.compressionType)
CUVMM_SAME_MEMBER(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)
CUVMM_SAME_MEMBER(CUmemAllocationProp, allocFlags.usage)
CUVMM_SAME_MEMBER(CUmemAllocationProp, allocFlags.reserved)
CUVMM_SAME_STRUCT(CUmemAccessDesc)
CUVMM_SAME_MEMBER(CUmemAccessDesc, location)
CUVMM_SAME_MEMBER(CUmemAccessDesc, flags)

// ---- every driver-table entry has cuda.h's function pointer type (cuda.h's own macros map
// a name to its versioned symbol, e.g. cuMemcpyHtoD -> cuMemcpyHtoD_v2, on both sides).
#define CUVMM_SAME_ENTRY(name, version, params)                                               \
    static_assert(std::is_same_v<decltype(cuvmm::DriverTable::name), decltype(&::name)>,     \
                  "driver table entry " #name " differs from cuda.h");
CUVMM_DRIVER_ENTRY_POINTS(CUVMM_SAME_ENTRY)

// ---- every function the host library exports (hostcuda/exports.hpp) has cuda.h's type for
// its symbol (an undecorated alias such as cuStreamDestroy is checked against the _v2 that
// cuda.h's macro names: the same ABI, which is why the alias is exported at all).
#define CUVMM_SAME_EXPORT(symbol, impl, params, args)                                         \
    static_assert(std::is_same_v<CUresult(CUDAAPI*) params, decltype(&::symbol)>,            \
                  "host library export " #symbol " differs from cuda.h");
CUVMM_HOSTCUDA_EXPORTS(CUVMM_SAME_EXPORT)
static_assert(std::is_same_v<CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*),
                             decltype(&::cuGetProcAddress_v2)>, "cuGetProcAddress_v2");
static_assert(std::is_same_v<CUresult(CUDAAPI*)(unsigned int), decltype(&::cuInit)>, "cuInit");
static_assert(std::is_same_v<CUresult(CUDAAPI*)(CUcontext), decltype(&::cuCtxSynchronize_v2)>, "cuCtxSynchronize_v2");

// ---- the same, against cudaTypedefs.h's PFN_<name>_v<version>: every table entry at the
// version cuvmm asks for it, and every export at the version of the ABI variant
// cuGetProcAddress hands it out for (hostcuda/proc_address.cpp's rows). cudaTypedefs.h
// declares the superseded variants (PFN_cuStreamDestroy_v2000, ...) only for NVIDIA's own
// build (__CUDA_API_VERSION_INTERNAL): an undecorated alias is checked against the
// variant that replaced it, whose ABI is the same (which is why it is exported at all).
#define CUVMM_SAME_PFN(name, version, params)                                                  \
    static_assert(std::is_same_v<decltype(cuvmm::DriverTable::name), PFN_##name##_v##version>, \
                  "driver table entry " #name " differs from PFN_" #name "_v" #version);
CUVMM_DRIVER_ENTRY_POINTS(CUVMM_SAME_PFN)
namespace export_type {
#define CUVMM_EXPORT_TYPE(symbol, impl, params, args) using symbol##_t = CUresult(CUDAAPI*) params;
CUVMM_HOSTCUDA_EXPORTS(CUVMM_EXPORT_TYPE)
using cuGetProcAddress_t = CUresult(CUDAAPI*) CUVMM_HOSTCUDA_GET_PROC_V1_PARAMS;
}  // namespace export_type
#define CUVMM_EXPORT_PFN(symbol, pfn) \
    static_assert(std::is_same_v<export_type::symbol##_t, pfn>, "host library export " #symbol " differs from " #pfn);
CUVMM_EXPORT_PFN(cuGetProcAddress, PFN_cuGetProcAddress_v11030)  // the 4-argument v1
CUVMM_EXPORT_PFN(cuStreamDestroy, PFN_cuStreamDestroy_v4000)  // v2000: same ABI
CUVMM_EXPORT_PFN(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)
CUVMM_EXPORT_PFN(cuEventDestroy, PFN_cuEventDestroy_v4000)  // v2000: same ABI
CUVMM_EXPORT_PFN(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)
CUVMM_EXPORT_PFN(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000)  // v7000: same ABI
CUVMM_EXPORT_PFN(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)
CUVMM_EXPORT_PFN(cuMemHostRegister, PFN_cuMemHostRegister_v6050)  // v4000: same ABI
CUVMM_EXPORT_PFN(cuMemHostRegister_v2, PFN_cuMemHostRegister_v6050)
CUVMM_EXPORT_PFN(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000)
CUVMM_EXPORT_PFN(cuEventElapsedTime_v2, PFN_cuEventElapsedTime_v12080)
CUVMM_EXPORT_PFN(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)
CUVMM_EXPORT_PFN(cuMemGetAddressRange_v2, PFN_cuMemGetAddressRange_v3020)
CUVMM_EXPORT_PFN(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000)
CUVMM_EXPORT_PFN(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD_v3020)
CUVMM_EXPORT_PFN(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync_v3020)
static_assert(std::is_same_v<CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*),
                             PFN_cuGetProcAddress_v12000>, "cuGetProcAddress_v2");
static_assert(std::is_same_v<CUresult(CUDAAPI*)(CUcontext), PFN_cuCtxSynchronize_v13000>, "cuCtxSynchronize_v2");

}  // namespace

