// The host library's exported C functions: each forwards to the host driver's table
// (hostcuda/library.hpp), with no logic of its own. cuInit adds one thing: it refuses when
// the environment's configuration was refused (library.cpp), saying why on stderr once.
#include "hostcuda/exports.hpp"

#include "hostcuda/library.hpp"

#include <cstdio>
#include <mutex>
#include <type_traits>

using cuvmm::hostcuda::library;

// Each export's signature is the host driver's for that entry point (compile-time proof).
#define CUVMM_HOSTCUDA_SAME(symbol, impl, params, args)                                      \
    static_assert(std::is_same_v<decltype(&symbol), decltype(library().impl)>,             \
                  #symbol " differs from the host driver's " #impl);
CUVMM_HOSTCUDA_EXPORTS(CUVMM_HOSTCUDA_SAME)
#undef CUVMM_HOSTCUDA_SAME

#define CUVMM_HOSTCUDA_DEFINE(symbol, impl, params, args) \
    CUresult CUDAAPI symbol params { return library().impl args; }
CUVMM_HOSTCUDA_EXPORTS(CUVMM_HOSTCUDA_DEFINE)
#undef CUVMM_HOSTCUDA_DEFINE

CUresult CUDAAPI cuInit(unsigned int flags) {
    const auto& lib = library();
    if (!lib.config_error.empty()) {
        static std::once_flag told;
        std::call_once(told, [&] {
            std::fprintf(stderr, "cuvmm host library: cuInit refused: %s\n", lib.config_error.c_str());
        });
        return CUDA_ERROR_INVALID_VALUE;
    }
    return lib.table.cuInit(flags);
}

const char* cuvmmHostLibraryDescription(void) {
    // A literal: callable any time, also during exit (no static object to destroy).
    static_assert(CUDA_VERSION == 13000, "update the description's API version");
    // What and which API version; the loader adds "(no GPU)" once, in its own words.
    return "cuvmm host library, CUDA 13.0 driver API over cuvmm's host driver";
}
