// Every C function the host library exports that forwards to the host driver, one row each:
//   X(exported symbol, implementation in Library, parameter list, argument list)
// The symbol is the name cuda.h 13.0's #defines produce (cuMemcpyHtoD -> cuMemcpyHtoD_v2,
// cuStreamDestroy -> cuStreamDestroy_v2, ...), plus the undecorated name where the real
// libcuda exports one with the same ABI (cuStreamDestroy, cuEventDestroy,
// cuDevicePrimaryCtxRelease, cuMemHostRegister, cuEventElapsedTime; never the 32-bit
// cuMemcpyHtoD and the like, whose ABI differs). cuInit, cuCtxSynchronize_v2,
// cuGetProcAddress(_v2) and the identity marker are written by hand (exports.cpp,
// proc_address.cpp).
// test/cuda_api_check.cpp proves each row's parameter list is cuda.h's for that symbol;
// exports.cpp proves it is the host driver's.
#pragma once

#include "cuvmm/cuda_api.hpp"

#define CUVMM_HOSTCUDA_EXPORTS(X)                                                                        \
    X(cuDriverGetVersion, table.cuDriverGetVersion, (int* v), (v))                                       \
    X(cuDeviceGetCount, table.cuDeviceGetCount, (int* n), (n))                                           \
    X(cuDeviceGet, table.cuDeviceGet, (CUdevice * d, int o), (d, o))                                     \
    X(cuDeviceGetName, table.cuDeviceGetName, (char* s, int n, CUdevice d), (s, n, d))                   \
    X(cuDeviceTotalMem_v2, table.cuDeviceTotalMem, (size_t * b, CUdevice d), (b, d))                     \
    X(cuDeviceGetAttribute, table.cuDeviceGetAttribute, (int* v, CUdevice_attribute a, CUdevice d),      \
      (v, a, d))                                                                                         \
    X(cuDeviceCanAccessPeer, table.cuDeviceCanAccessPeer, (int* c, CUdevice d, CUdevice p), (c, d, p))   \
    X(cuDevicePrimaryCtxRetain, table.cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d), (c, d))     \
    X(cuDevicePrimaryCtxRelease_v2, table.cuDevicePrimaryCtxRelease, (CUdevice d), (d))                  \
    X(cuDevicePrimaryCtxRelease, table.cuDevicePrimaryCtxRelease, (CUdevice d), (d))                     \
    X(cuCtxSetCurrent, table.cuCtxSetCurrent, (CUcontext c), (c))                                        \
    X(cuCtxGetCurrent, table.cuCtxGetCurrent, (CUcontext * c), (c))                                      \
    X(cuCtxSynchronize, table.cuCtxSynchronize, (), ())                                                  \
    X(cuMemGetAllocationGranularity, table.cuMemGetAllocationGranularity,                                \
      (size_t * g, const CUmemAllocationProp* p, CUmemAllocationGranularity_flags o), (g, p, o))         \
    X(cuMemCreate, table.cuMemCreate,                                                                    \
      (CUmemGenericAllocationHandle * h, size_t s, const CUmemAllocationProp* p, unsigned long long f),   \
      (h, s, p, f))                                                                                      \
    X(cuMemRelease, table.cuMemRelease, (CUmemGenericAllocationHandle h), (h))                           \
    X(cuMemAddressReserve, table.cuMemAddressReserve,                                                    \
      (CUdeviceptr * p, size_t s, size_t a, CUdeviceptr h, unsigned long long f), (p, s, a, h, f))       \
    X(cuMemAddressFree, table.cuMemAddressFree, (CUdeviceptr p, size_t s), (p, s))                       \
    X(cuMemMap, table.cuMemMap,                                                                          \
      (CUdeviceptr p, size_t s, size_t o, CUmemGenericAllocationHandle h, unsigned long long f),         \
      (p, s, o, h, f))                                                                                   \
    X(cuMemUnmap, table.cuMemUnmap, (CUdeviceptr p, size_t s), (p, s))                                   \
    X(cuMemSetAccess, table.cuMemSetAccess, (CUdeviceptr p, size_t s, const CUmemAccessDesc* d, size_t n), \
      (p, s, d, n))                                                                                      \
    X(cuMemGetAccess, table.cuMemGetAccess,                                                              \
      (unsigned long long* f, const CUmemLocation* l, CUdeviceptr p), (f, l, p))                         \
    X(cuMemExportToShareableHandle, table.cuMemExportToShareableHandle,                                  \
      (void* s, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t, unsigned long long f),       \
      (s, h, t, f))                                                                                      \
    X(cuMemImportFromShareableHandle, table.cuMemImportFromShareableHandle,                              \
      (CUmemGenericAllocationHandle * h, void* o, CUmemAllocationHandleType t), (h, o, t))               \
    X(cuMemGetAllocationPropertiesFromHandle, table.cuMemGetAllocationPropertiesFromHandle,              \
      (CUmemAllocationProp * p, CUmemGenericAllocationHandle h), (p, h))                                 \
    X(cuMemRetainAllocationHandle, table.cuMemRetainAllocationHandle,                                    \
      (CUmemGenericAllocationHandle * h, void* a), (h, a))                                               \
    X(cuMemcpyHtoD_v2, table.cuMemcpyHtoD, (CUdeviceptr d, const void* s, size_t n), (d, s, n))          \
    X(cuMemcpyDtoH_v2, table.cuMemcpyDtoH, (void* d, CUdeviceptr s, size_t n), (d, s, n))                \
    X(cuMemcpyDtoD_v2, table.cuMemcpyDtoD, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))          \
    X(cuMemsetD8_v2, table.cuMemsetD8, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))            \
    X(cuStreamCreate, table.cuStreamCreate, (CUstream * s, unsigned int f), (s, f))                      \
    X(cuStreamDestroy_v2, table.cuStreamDestroy, (CUstream s), (s))                                      \
    X(cuStreamDestroy, table.cuStreamDestroy, (CUstream s), (s))                                         \
    X(cuStreamSynchronize, table.cuStreamSynchronize, (CUstream s), (s))                                 \
    X(cuStreamCreateWithPriority, table.cuStreamCreateWithPriority, (CUstream * s, unsigned int f, int p), \
      (s, f, p))                                                                                         \
    X(cuStreamQuery, table.cuStreamQuery, (CUstream s), (s))                                             \
    X(cuStreamWaitEvent, table.cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int f), (s, e, f))    \
    X(cuCtxGetStreamPriorityRange, table.cuCtxGetStreamPriorityRange, (int* l, int* g), (l, g))          \
    X(cuEventCreate, table.cuEventCreate, (CUevent * e, unsigned int f), (e, f))                         \
    X(cuEventDestroy_v2, table.cuEventDestroy, (CUevent e), (e))                                         \
    X(cuEventDestroy, table.cuEventDestroy, (CUevent e), (e))                                            \
    X(cuEventRecord, table.cuEventRecord, (CUevent e, CUstream s), (e, s))                               \
    X(cuEventQuery, table.cuEventQuery, (CUevent e), (e))                                                \
    X(cuEventSynchronize, table.cuEventSynchronize, (CUevent e), (e))                                    \
    X(cuEventElapsedTime_v2, table.cuEventElapsedTime, (float* ms, CUevent a, CUevent b), (ms, a, b))    \
    X(cuEventElapsedTime, table.cuEventElapsedTime, (float* ms, CUevent a, CUevent b), (ms, a, b))       \
    X(cuLaunchHostFunc, table.cuLaunchHostFunc, (CUstream s, CUhostFn f, void* u), (s, f, u))            \
    X(cuMemcpyHtoDAsync_v2, table.cuMemcpyHtoDAsync, (CUdeviceptr d, const void* s, size_t n, CUstream h), \
      (d, s, n, h))                                                                                      \
    X(cuMemcpyDtoHAsync_v2, table.cuMemcpyDtoHAsync, (void* d, CUdeviceptr s, size_t n, CUstream h),     \
      (d, s, n, h))                                                                                      \
    X(cuMemcpyDtoDAsync_v2, table.cuMemcpyDtoDAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h), \
      (d, s, n, h))                                                                                      \
    X(cuMemsetD8Async, table.cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream h),    \
      (d, v, n, h))                                                                                      \
    X(cuMemHostAlloc, table.cuMemHostAlloc, (void** p, size_t n, unsigned int f), (p, n, f))             \
    X(cuMemFreeHost, table.cuMemFreeHost, (void* p), (p))                                                \
    X(cuMemHostRegister_v2, table.cuMemHostRegister, (void* p, size_t n, unsigned int f), (p, n, f))     \
    X(cuMemHostRegister, table.cuMemHostRegister, (void* p, size_t n, unsigned int f), (p, n, f))        \
    X(cuMemHostUnregister, table.cuMemHostUnregister, (void* p), (p))                                    \
    X(cuGetErrorName, table.cuGetErrorName, (CUresult e, const char** s), (e, s))                        \
    X(cuGetErrorString, table.cuGetErrorString, (CUresult e, const char** s), (e, s))                    \
    X(cuMemGetAddressRange_v2, pointers.cuMemGetAddressRange, (CUdeviceptr * b, size_t * s, CUdeviceptr p), \
      (b, s, p))                                                                                         \
    X(cuPointerGetAttribute, pointers.cuPointerGetAttribute, (void* d, CUpointer_attribute a, CUdeviceptr p), \
      (d, a, p))

// cuGetProcAddress v1's parameters (CUDA 11.3; cuda.h declares only v2 under that name, so
// test/cuda_api_check.cpp proves this list against cudaTypedefs.h's PFN_cuGetProcAddress_v11030).
#define CUVMM_HOSTCUDA_GET_PROC_V1_PARAMS (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)

#ifndef CUVMM_CUDA_API_CHECK  // test/cuda_api_check.cpp uses the list only
#define CUVMM_HOSTCUDA_API extern "C" __attribute__((visibility("default")))

// The declarations (C linkage), so that proc_address.cpp can hand out their addresses.
#define CUVMM_HOSTCUDA_DECLARE(symbol, impl, params, args) CUVMM_HOSTCUDA_API CUresult CUDAAPI symbol params;
CUVMM_HOSTCUDA_EXPORTS(CUVMM_HOSTCUDA_DECLARE)
#undef CUVMM_HOSTCUDA_DECLARE
CUVMM_HOSTCUDA_API CUresult CUDAAPI cuInit(unsigned int flags);
CUVMM_HOSTCUDA_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx);
CUVMM_HOSTCUDA_API CUresult CUDAAPI cuGetProcAddress CUVMM_HOSTCUDA_GET_PROC_V1_PARAMS;
CUVMM_HOSTCUDA_API CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                        cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus);
// The identity marker: a real libcuda has no such symbol. cuvmm's loader (cuda_driver.cpp)
// looks for it to label what it loaded "cuda driver API over the host library (no GPU)".
CUVMM_HOSTCUDA_API const char* cuvmmHostLibraryDescription(void);
#endif  // CUVMM_CUDA_API_CHECK
