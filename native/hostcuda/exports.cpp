// The host library's exported C functions: each forwards to the host driver's table
// (hostcuda/library.hpp), with no logic of its own. cuInit adds one thing: it refuses when
// the environment's configuration was refused (library.cpp), saying why on stderr once.
// Out of memory while setting up: cuInit answers OUT_OF_MEMORY, the rest NOT_INITIALIZED.
// cuCtxSynchronize_v2 (CUDA 13.0) is the one composed export: the table's cuCtxSynchronize
// with ctx made current for the call (the host driver has no per-context synchronize).
#include "hostcuda/exports.hpp"

#include "hostcuda/library.hpp"

#include <cstdio>
#include <mutex>
#include <type_traits>

using cuvmm::DriverTable;
using cuvmm::hostcuda::library;

// Each export's signature is the host driver's for that entry point (compile-time proof).
#define CUVMM_HOSTCUDA_SAME(symbol, impl, params, args)                                      \
    static_assert(std::is_same_v<decltype(&symbol), decltype(library().impl)>,             \
                  #symbol " differs from the host driver's " #impl);
CUVMM_HOSTCUDA_EXPORTS(CUVMM_HOSTCUDA_SAME)
#undef CUVMM_HOSTCUDA_SAME

// Not ready (out of memory while setting up, library.cpp): the table may be unfilled, and
// nothing can have been initialized, so every call answers NOT_INITIALIZED.
#define CUVMM_HOSTCUDA_DEFINE(symbol, impl, params, args)           \
    CUresult CUDAAPI symbol params {                               \
        const auto& lib = library();                               \
        return lib.ready ? lib.impl args : CUDA_ERROR_NOT_INITIALIZED; \
    }
CUVMM_HOSTCUDA_EXPORTS(CUVMM_HOSTCUDA_DEFINE)
#undef CUVMM_HOSTCUDA_DEFINE

CUresult CUDAAPI cuInit(unsigned int flags) {
    const auto& lib = library();
    if (!lib.ready) {
        static std::once_flag told;
        std::call_once(told, [] {
            std::fputs("cuvmm host library: cuInit refused: out of memory while setting up\n", stderr);
        });
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!lib.config_error.empty()) {
        static std::once_flag told;
        std::call_once(told, [&] {
            std::fprintf(stderr, "cuvmm host library: cuInit refused: %s\n", lib.config_error.c_str());
        });
        return CUDA_ERROR_INVALID_VALUE;
    }
    return lib.table.cuInit(flags);
}

// cuda.h 13.0: blocks until ctx's work is done; a null ctx means the current context. The
// current context is per thread, so swapping it here is invisible to other threads; the
// previous one is restored (or, if it was released meanwhile, none is left current).
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
    const auto& lib = library();
    if (!lib.ready) return CUDA_ERROR_NOT_INITIALIZED;
    const DriverTable& t = lib.table;
    if (ctx == nullptr) return t.cuCtxSynchronize();
    CUcontext previous = nullptr;
    CUresult rc = t.cuCtxGetCurrent(&previous);
    if (rc != CUDA_SUCCESS) return rc;
    if (ctx == previous) return t.cuCtxSynchronize();
    rc = t.cuCtxSetCurrent(ctx);  // INVALID_CONTEXT for an unknown or released context
    if (rc != CUDA_SUCCESS) return rc;
    rc = t.cuCtxSynchronize();
    CUresult restored = t.cuCtxSetCurrent(previous);
    if (restored != CUDA_SUCCESS) t.cuCtxSetCurrent(nullptr);
    return rc != CUDA_SUCCESS ? rc : restored;
}

const char* cuvmmHostLibraryDescription(void) {
    // A literal: callable any time, also during exit (no static object to destroy).
    static_assert(CUDA_VERSION == 13000, "update the description's API version");
    // What and which API version; the loader adds "(no GPU)" once, in its own words.
    return "cuvmm host library, CUDA 13.0 driver API over cuvmm's host driver";
}
