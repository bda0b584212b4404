// The host driver's answers to two CUDA driver queries that cuvmm's own code never calls
// (so they are not in DriverTable) but that other bindings in the same process do: the
// JavaCPP presets' cross-check tests ask cuMemGetAddressRange and cuPointerGetAttribute
// about cuvmm's mappings. Only the host library (native/hostcuda) exports them.
// Implemented in host/pointers.cpp, over the same registry as every other entry point.
#pragma once

#include "cuvmm/cuda_api.hpp"

namespace cuvmm {

struct HostPointerEntries {
    // cuda.h's cuMemGetAddressRange_v2: the mapping (one cuMemMap'ed chunk) holding dptr.
    CUresult(CUDAAPI* cuMemGetAddressRange)(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) = nullptr;
    // cuda.h's cuPointerGetAttribute, for the attributes host/pointers.cpp lists.
    CUresult(CUDAAPI* cuPointerGetAttribute)(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) = nullptr;
};

// Fills `out`. The entries follow the host driver's rules (NOT_INITIALIZED before its
// cuInit) and need install_host_driver to have run before they are called.
void install_host_pointer_entries(HostPointerEntries& out);

}  // namespace cuvmm
