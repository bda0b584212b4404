// A stand-in libcuda for vmm_test (built as a shared library by run-host-driver-test.sh):
// exports cuGetProcAddress_v2 and resolves every entry point of the X-macro, so
// load_cuda_driver gets through dlopen and symbol lookup; cuInit and cuDeviceGetCount
// succeed (one device) and cuDriverGetVersion fails, which load_cuda_driver must report
// (audit A9) rather than take as version 0. Every other entry point returns
// CUDA_ERROR_NOT_SUPPORTED and is never called by the test.
#include "cuvmm/driver_table.hpp"

#include <cstring>

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define FAKE_STUB(name, version, params) \
    CUresult CUDAAPI stub_##name params { return CUDA_ERROR_NOT_SUPPORTED; }
CUVMM_DRIVER_ENTRY_POINTS(FAKE_STUB)
#undef FAKE_STUB
#pragma GCC diagnostic pop

CUresult CUDAAPI fake_init(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI fake_count(int* count) {
    *count = 1;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_version(int*) { return CUDA_ERROR_OPERATING_SYSTEM; }

// What the loader asked for: lookups made, and how many asked for the legacy default stream
// (audit A.1 #4: every entry point must be resolved with CU_GET_PROC_ADDRESS_LEGACY_STREAM).
long g_lookups = 0;
long g_legacy_lookups = 0;

}  // namespace

// For vmm_test (dlsym): {lookups, lookups whose flags were exactly LEGACY_STREAM}.
extern "C" void fake_cuda_lookup_flags(long* lookups, long* legacy) {
    *lookups = g_lookups;
    *legacy = g_legacy_lookups;
}

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t flags,
                                                CUdriverProcAddressQueryResult* status) {
    ++g_lookups;
    if (flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM) ++g_legacy_lookups;
    *pfn = nullptr;
    if (std::strcmp(symbol, "cuInit") == 0) *pfn = reinterpret_cast<void*>(&fake_init);
    else if (std::strcmp(symbol, "cuDeviceGetCount") == 0) *pfn = reinterpret_cast<void*>(&fake_count);
    else if (std::strcmp(symbol, "cuDriverGetVersion") == 0) *pfn = reinterpret_cast<void*>(&fake_version);
#define FAKE_LOOKUP(name, version, params) \
    else if (std::strcmp(symbol, #name) == 0) *pfn = reinterpret_cast<void*>(&stub_##name);
    CUVMM_DRIVER_ENTRY_POINTS(FAKE_LOOKUP)
#undef FAKE_LOOKUP
    if (status != nullptr) {
        *status = *pfn != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return *pfn != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
