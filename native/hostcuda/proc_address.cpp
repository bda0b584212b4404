// cuGetProcAddress (v1, CUDA 11.3) and cuGetProcAddress_v2 (CUDA 12.0): a base name and
// the CUDA version the caller was written against -> the exported function with that ABI.
//
// Rows: one per ABI variant of a base name, with the version that introduced it
// (cudaTypedefs.h's PFN_<name>_v<version>), and our function, or null for a variant we do
// not implement (the 32-bit cuMemcpyHtoD of CUDA 2.0 and the like).
// A request picks the newest variant whose version <= the requested one:
//   symbol or pfn null, flags outside DEFAULT|LEGACY_STREAM|PER_THREAD_DEFAULT_STREAM,
//     or a version newer than this driver's (13000)                 CUDA_ERROR_INVALID_VALUE
//   a name with no row (every name we do not implement, kernels and modules included;
//     a decorated name such as "cuMemcpyHtoD_v2": cuda.h asks for base names)
//                                                                  SUCCESS, SYMBOL_NOT_FOUND
//   a version older than the name's first variant                  SUCCESS, VERSION_NOT_SUFFICIENT
//   the chosen variant is one we do not implement                  SUCCESS, SYMBOL_NOT_FOUND
//   PER_THREAD_DEFAULT_STREAM for a name that has a per-thread (_ptsz/_ptds) variant at that
//     version: we implement none (no per-thread default stream here)  SUCCESS, SYMBOL_NOT_FOUND
//   otherwise                                                       CUDA_SUCCESS, SUCCESS
// *pfn is null on every answer but the last. "Not found" is CUDA_SUCCESS with a null *pfn
// and the symbol status, as cuda.h 13.0 documents it (its return list has no NOT_FOUND);
// what real drivers answer is not verified here. Callers must check pfn and the status, as
// cuvmm's loader does. DEFAULT means LEGACY_STREAM: this library is not built with
// per-thread default streams.
#include "hostcuda/exports.hpp"

#include <cstring>

namespace {

struct Variant {
    const char* name;   // base name, as cuGetProcAddress is asked
    int since;          // CUDA version that introduced this ABI variant
    void* fn;           // our export with that ABI, or null: not implemented
    int per_thread;     // version from which a _ptsz/_ptds variant exists (0: none)
};

#define FN(f) reinterpret_cast<void*>(&f)
const Variant kVariants[] = {
    {"cuInit", 2000, FN(cuInit), 0},
    {"cuDriverGetVersion", 2020, FN(cuDriverGetVersion), 0},
    {"cuDeviceGetCount", 2000, FN(cuDeviceGetCount), 0},
    {"cuDeviceGet", 2000, FN(cuDeviceGet), 0},
    {"cuDeviceGetName", 2000, FN(cuDeviceGetName), 0},
    {"cuDeviceTotalMem", 2000, nullptr, 0},  // unsigned int* bytes
    {"cuDeviceTotalMem", 3020, FN(cuDeviceTotalMem_v2), 0},
    {"cuDeviceGetAttribute", 2000, FN(cuDeviceGetAttribute), 0},
    {"cuDeviceCanAccessPeer", 4000, FN(cuDeviceCanAccessPeer), 0},
    {"cuDevicePrimaryCtxRetain", 7000, FN(cuDevicePrimaryCtxRetain), 0},
    {"cuDevicePrimaryCtxRelease", 7000, FN(cuDevicePrimaryCtxRelease), 0},
    {"cuDevicePrimaryCtxRelease", 11000, FN(cuDevicePrimaryCtxRelease_v2), 0},
    {"cuCtxSetCurrent", 4000, FN(cuCtxSetCurrent), 0},
    {"cuCtxGetCurrent", 4000, FN(cuCtxGetCurrent), 0},
    {"cuCtxSynchronize", 2000, FN(cuCtxSynchronize), 0},
    {"cuCtxSynchronize", 13000, FN(cuCtxSynchronize_v2), 0},
    {"cuMemGetAllocationGranularity", 10020, FN(cuMemGetAllocationGranularity), 0},
    {"cuMemCreate", 10020, FN(cuMemCreate), 0},
    {"cuMemRelease", 10020, FN(cuMemRelease), 0},
    {"cuMemAddressReserve", 10020, FN(cuMemAddressReserve), 0},
    {"cuMemAddressFree", 10020, FN(cuMemAddressFree), 0},
    {"cuMemMap", 10020, FN(cuMemMap), 0},
    {"cuMemUnmap", 10020, FN(cuMemUnmap), 0},
    {"cuMemSetAccess", 10020, FN(cuMemSetAccess), 0},
    {"cuMemGetAccess", 10020, FN(cuMemGetAccess), 0},
    {"cuMemExportToShareableHandle", 10020, FN(cuMemExportToShareableHandle), 0},
    {"cuMemImportFromShareableHandle", 10020, FN(cuMemImportFromShareableHandle), 0},
    {"cuMemGetAllocationPropertiesFromHandle", 10020, FN(cuMemGetAllocationPropertiesFromHandle), 0},
    {"cuMemRetainAllocationHandle", 11000, FN(cuMemRetainAllocationHandle), 0},
    {"cuMemcpyHtoD", 2000, nullptr, 7000},  // 32-bit sizes and pointers
    {"cuMemcpyHtoD", 3020, FN(cuMemcpyHtoD_v2), 7000},
    {"cuMemcpyDtoH", 2000, nullptr, 7000},
    {"cuMemcpyDtoH", 3020, FN(cuMemcpyDtoH_v2), 7000},
    {"cuMemcpyDtoD", 2000, nullptr, 7000},
    {"cuMemcpyDtoD", 3020, FN(cuMemcpyDtoD_v2), 7000},
    {"cuMemsetD8", 2000, nullptr, 7000},
    {"cuMemsetD8", 3020, FN(cuMemsetD8_v2), 7000},
    {"cuStreamCreate", 2000, FN(cuStreamCreate), 0},
    {"cuStreamDestroy", 2000, FN(cuStreamDestroy), 0},
    {"cuStreamDestroy", 4000, FN(cuStreamDestroy_v2), 0},
    {"cuStreamSynchronize", 2000, FN(cuStreamSynchronize), 7000},
    {"cuStreamCreateWithPriority", 5050, FN(cuStreamCreateWithPriority), 0},
    {"cuStreamQuery", 2000, FN(cuStreamQuery), 7000},
    {"cuStreamWaitEvent", 3020, FN(cuStreamWaitEvent), 7000},
    {"cuCtxGetStreamPriorityRange", 5050, FN(cuCtxGetStreamPriorityRange), 0},
    {"cuEventCreate", 2000, FN(cuEventCreate), 0},
    {"cuEventDestroy", 2000, FN(cuEventDestroy), 0},
    {"cuEventDestroy", 4000, FN(cuEventDestroy_v2), 0},
    {"cuEventRecord", 2000, FN(cuEventRecord), 7000},
    {"cuEventQuery", 2000, FN(cuEventQuery), 0},
    {"cuEventSynchronize", 2000, FN(cuEventSynchronize), 0},
    {"cuEventElapsedTime", 2000, FN(cuEventElapsedTime), 0},
    {"cuEventElapsedTime", 12080, FN(cuEventElapsedTime_v2), 0},
    {"cuLaunchHostFunc", 10000, FN(cuLaunchHostFunc), 10000},
    {"cuMemcpyHtoDAsync", 2000, nullptr, 7000},
    {"cuMemcpyHtoDAsync", 3020, FN(cuMemcpyHtoDAsync_v2), 7000},
    {"cuMemcpyDtoHAsync", 2000, nullptr, 7000},
    {"cuMemcpyDtoHAsync", 3020, FN(cuMemcpyDtoHAsync_v2), 7000},
    {"cuMemcpyDtoDAsync", 3000, nullptr, 7000},
    {"cuMemcpyDtoDAsync", 3020, FN(cuMemcpyDtoDAsync_v2), 7000},
    {"cuMemsetD8Async", 3020, FN(cuMemsetD8Async), 7000},
    {"cuMemHostAlloc", 2020, FN(cuMemHostAlloc), 0},
    {"cuMemFreeHost", 2000, FN(cuMemFreeHost), 0},
    {"cuMemHostRegister", 4000, FN(cuMemHostRegister), 0},
    {"cuMemHostRegister", 6050, FN(cuMemHostRegister_v2), 0},
    {"cuMemHostUnregister", 4000, FN(cuMemHostUnregister), 0},
    {"cuGetErrorName", 6000, FN(cuGetErrorName), 0},
    {"cuGetErrorString", 6000, FN(cuGetErrorString), 0},
    {"cuMemGetAddressRange", 2000, nullptr, 0},  // 32-bit
    {"cuMemGetAddressRange", 3020, FN(cuMemGetAddressRange_v2), 0},
    {"cuPointerGetAttribute", 4000, FN(cuPointerGetAttribute), 0},
    {"cuGetProcAddress", 11030, FN(cuGetProcAddress), 0},
    {"cuGetProcAddress", 12000, FN(cuGetProcAddress_v2), 0},
};
#undef FN

constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
    auto answer = [&](CUresult rc, CUdriverProcAddressQueryResult s, void* fn) {
        *pfn = fn;
        if (status != nullptr) *status = s;
        return rc;
    };
    if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & ~kKnownFlags) != 0 || version > CUDA_VERSION) {
        return answer(CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, nullptr);
    }
    const Variant* chosen = nullptr;
    bool known = false;
    for (const Variant& v : kVariants) {
        if (std::strcmp(v.name, symbol) != 0) continue;
        known = true;
        if (v.since <= version && (chosen == nullptr || v.since > chosen->since)) chosen = &v;
    }
    if (!known) return answer(CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, nullptr);
    if (chosen == nullptr) return answer(CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, nullptr);
    const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 && chosen->per_thread != 0 &&
                            chosen->per_thread <= version;
    if (chosen->fn == nullptr || per_thread) {
        return answer(CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, nullptr);
    }
    return answer(CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS, chosen->fn);
}

}  // namespace

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
    return lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
