// Loads the NVIDIA driver at run time: dlopen("libcuda.so.1"), then every entry point
// through cuGetProcAddress with the CUDA version that introduced it, so the signature we
// declare is the one we get (cuMemcpyHtoD at 3020 is the 64-bit _v2, and so on).
// libcuda is never linked: the jar loads on machines without an NVIDIA driver.
// A library that exports cuvmmHostLibraryDescription is cuvmm's own host library
// (native/hostcuda: the CUDA driver API over the host driver, no GPU); the reason says so
// ("cuda driver API over the host library (no GPU)") and *host_library tells the caller.
#include "cuvmm/driver.hpp"

#include "cuvmm/cuda_errors.hpp"

#include <dlfcn.h>

namespace cuvmm {
namespace {

// cuGetProcAddress_v2 (CUDA 12.0+) reports a symbol status; the older v1 does not.
using GetProcV2 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcV1 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t);

const char* symbol_status_text(CUdriverProcAddressQueryResult s) {
    switch (s) {
        case CU_GET_PROC_ADDRESS_SUCCESS: return "found";
        case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "symbol not found";
        case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "driver too old for this entry point";
        default: return "unknown symbol status";
    }
}

}  // namespace

bool load_cuda_driver(DriverTable& table, const std::string& library, std::string& reason, bool* host_library) {
    if (host_library != nullptr) *host_library = false;
    dlerror();
    void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        const char* err = dlerror();
        reason = "dlopen(" + library + ") failed: " + (err ? err : "unknown error");
        return false;
    }
    auto fail = [&](std::string why) {
        reason = std::move(why);
        dlclose(lib);
        return false;
    };
    auto v2 = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
    auto v1 = reinterpret_cast<GetProcV1>(dlsym(lib, "cuGetProcAddress"));
    if (v2 == nullptr && v1 == nullptr) {
        return fail(library + " has no cuGetProcAddress (a driver older than CUDA 11.3)");
    }
    // The legacy default stream, asked for explicitly: transfer.cpp's cuStreamSynchronize(nullptr)
    // and the copies mean the legacy stream. CU_GET_PROC_ADDRESS_DEFAULT would mean the
    // per-thread stream whenever this file were built with CUDA_API_PER_THREAD_DEFAULT_STREAM
    // (cuda.h, cuGetProcAddress: "equivalent to ... LEGACY_STREAM otherwise"), so the intent
    // would hang on a build flag.
    constexpr cuuint64_t kProcFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    DriverTable t;
#define CUVMM_RESOLVE(name, version, params)                                                        \
    {                                                                                               \
        void* fn = nullptr;                                                                         \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;                       \
        CUresult rc = v2 ? v2(#name, &fn, version, kProcFlags, &status)                             \
                         : v1(#name, &fn, version, kProcFlags);                                     \
        if (rc != CUDA_SUCCESS || fn == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {         \
            return fail(std::string("cuGetProcAddress(\"" #name "\", ") + std::to_string(version) + \
                        ") failed: " + describe_result(rc) + ", " + symbol_status_text(status));    \
        }                                                                                           \
        t.name = reinterpret_cast<decltype(t.name)>(fn);                                            \
    }
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_RESOLVE)
#undef CUVMM_RESOLVE

    // Once cuInit has run, the library stays loaded even when we do not use it: unloading an
    // initialized driver is not supported.
    auto refuse = [&](std::string why) {
        reason = std::move(why);
        return false;
    };
    CUresult rc = t.cuInit(0);
    if (rc != CUDA_SUCCESS) return refuse("cuInit(0) failed: " + describe_result(rc));
    int count = 0;
    rc = t.cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS) return refuse("cuDeviceGetCount failed: " + describe_result(rc));
    if (count <= 0) return refuse(library + " loaded but reports no CUDA device");
    int version = 0;
    rc = t.cuDriverGetVersion(&version);
    if (rc != CUDA_SUCCESS) return refuse("cuDriverGetVersion failed: " + describe_result(rc));
    // The identity marker: only cuvmm's host library has it (a real libcuda never does).
    using Describe = const char* (*)();
    auto describe = reinterpret_cast<Describe>(dlsym(lib, "cuvmmHostLibraryDescription"));
    const char* description = describe != nullptr ? describe() : nullptr;
    table = t;
    reason = library + " loaded, CUDA driver " + std::to_string(version / 1000) + "." +
             std::to_string(version % 1000 / 10) + ", " + std::to_string(count) + " device(s)";
    if (describe != nullptr) {
        // The label is the loader's, said once; the library's description only adds which
        // library and API version (it says nothing about a GPU, so nothing is repeated).
        reason += ": cuda driver API over the host library (no GPU)";
        if (description != nullptr && *description != '\0') reason += std::string(" [") + description + "]";
    }
    if (host_library != nullptr) *host_library = describe != nullptr;
    return true;  // the handle stays open for the life of the process
}

}  // namespace cuvmm
